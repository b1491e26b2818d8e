"""Where ``runflow``'s reader slices go when its readers run in child processes, and how many
children it starts (``DATAFLOW_RUNFLOW_READER_PROCESSES``). Real Redis (the broker's queues)
and PostgreSQL; the children themselves run in tests/e2e/test_runflow_reader_processes.py."""

from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command

from dataflow.celery import app as celery_app
from dataflow.management.reader_processes import MAX_READER_PROCESSES, reader_processes_wanted
from dataflow.services.queues import (
    READ_SPLITS,
    TICK_RUN,
    run_task_send,
    runflow_claim,
    runflow_reader_queue,
    runflow_release,
)
from tests.factories import FlowRunFactory

pytestmark = pytest.mark.django_db(transaction=True)


def _waiting(queue: str) -> int:
    with celery_app.connection_for_write() as connection:
        return connection.default_channel.queue_declare(queue=queue).message_count


def _purge(*queues: str) -> None:
    with celery_app.connection_for_write() as connection:
        for queue in queues:
            connection.default_channel.queue_purge(queue)


def test_each_readers_slices_go_to_its_own_child_and_the_rest_to_runflows_queue():
    run = FlowRunFactory(running=True, flow__parallelism=4)
    queue = runflow_claim(run.flow, reader_queues=2)
    children = [runflow_reader_queue(queue, 0), runflow_reader_queue(queue, 1)]
    try:
        for subtask in (0, 1, 2, 3, 3):
            run_task_send(READ_SPLITS, run.pk, subtask, None)
        run_task_send(TICK_RUN, run.pk)

        assert [_waiting(q) for q in children] == [2, 3]  # subtasks 0, 2 and 1, 3, 3
        assert _waiting(queue) == 1  # the tick

        runflow_claim(run.flow)  # renewed without reader processes: all to runflow's queue
        run_task_send(READ_SPLITS, run.pk, 1, None)
        assert [_waiting(q) for q in children] == [2, 3]
        assert _waiting(queue) == 2
    finally:
        runflow_release(run.flow)
        _purge(queue, *children)


@pytest.mark.parametrize(
    ("setting", "parallelism", "unbounded", "cpus", "wanted"),
    [
        ("auto", 2, True, 2, 2),
        ("auto", 4, True, 2, 2),  # one per CPU at most
        ("auto", 1, True, 2, 0),  # one reader: nothing to share a GIL with
        ("auto", 4, False, 2, 0),  # a bounded flow's readers stay threads
        ("auto", 4, True, 1, 0),  # one CPU: processes would only add their start
        ("0", 4, True, 2, 0),
        ("3", 4, False, 2, 3),
        (" 8 ", 4, True, 2, 4),  # never more than the readers
    ],
)
def test_how_many_reader_processes(monkeypatch, setting, parallelism, unbounded, cpus, wanted):
    monkeypatch.setattr("os.cpu_count", lambda: cpus)
    assert reader_processes_wanted(setting, parallelism=parallelism, unbounded=unbounded) == wanted


@pytest.mark.parametrize("setting", ["many", "-1", str(MAX_READER_PROCESSES + 1), "1.5", ""])
def test_a_bad_setting_is_refused_naming_it(setting):
    with pytest.raises(
        ValueError, match="DATAFLOW_RUNFLOW_READER_PROCESSES must be 'auto' or a whole number"
    ):
        reader_processes_wanted(setting, parallelism=2, unbounded=True)


def test_runflow_refuses_a_bad_setting_before_it_starts_anything(settings):
    settings.DATAFLOW_RUNFLOW_READER_PROCESSES = "lots"
    run = FlowRunFactory(stopped=True)

    with pytest.raises(CommandError, match="DATAFLOW_RUNFLOW_READER_PROCESSES .* not 'lots'"):
        call_command("runflow", run.flow.name, "--until-done", "--no-progress")

    assert run.flow.runs.count() == 1, "no run was started"
