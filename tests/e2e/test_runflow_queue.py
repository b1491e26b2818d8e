"""``runflow NAME`` runs only its own flow's tasks, next to a fleet that shares the broker."""

from __future__ import annotations

import pytest
from django.conf import settings

from dataflow.celery import app as celery_app
from dataflow.models import Assignment, FlowRun
from dataflow.services.flows import flow_start
from dataflow.services.queues import run_queue
from tests.e2e.fleet import fleet_env
from tests.e2e.test_runflow import run_manage, runflow_once_landed
from tests.factories import DataFlowFactory
from tests.helpers import multiset, read_parquet_rows, wait_for_run, write_csv

pytestmark = pytest.mark.django_db(transaction=True)


def _waiting(queue: str) -> int:
    """How many messages wait in Celery queue ``queue`` of the broker."""
    with celery_app.connection_for_write() as connection:
        return connection.default_channel.queue_declare(queue=queue).message_count


def test_runflow_leaves_other_flows_tasks_in_the_shared_queue(dirs):
    (dirs.data / "other").mkdir()
    (dirs.data / "mine").mkdir()
    write_csv(dirs.data / "other" / "a.csv", range(100))
    sent = write_csv(dirs.data / "mine" / "a.csv", range(5000))
    other = DataFlowFactory(name="other", source_path=str(dirs.data / "other"))
    DataFlowFactory(name="mine", source_path=str(dirs.data / "mine"))
    # No fleet runs: the other flow's first tasks (its tick, its transform check) wait in
    # the shared queue, as they would for a fleet that is busy or down for a moment.
    waiting_run = flow_start(flow=other)
    shared = settings.CELERY_TASK_DEFAULT_QUEUE
    queued = _waiting(shared)
    assert queued >= 2

    try:
        done = run_manage(fleet_env(), "runflow", "mine", "--until-done", "--no-progress")

        assert f"succeeded: {len(sent)} records read" in done.stdout
        assert "Requeuing undeliverable" not in done.stderr, done.stderr[-3000:]
        assert _waiting(shared) == queued, "runflow took tasks of another flow"
        assert not Assignment.objects.filter(split__run=waiting_run).exists()
        assert FlowRun.objects.get(pk=waiting_run.pk).status == "reading"
        assert multiset(read_parquet_rows(dirs.out / "mine")) == multiset(sent)
        # Its claim on a queue of its own went with it: the flow's next run goes to the fleet.
        mine = FlowRun.objects.get(flow__name="mine")
        assert run_queue(mine.pk) is None
        assert _waiting(f"{shared}.runflow.mine") == 0
    finally:
        celery_app.control.purge()  # the other flow's tasks must not run in a later test's worker


def test_a_flow_whose_runflow_was_killed_goes_on_in_the_fleet(fleet, dirs):
    sent = []
    for i in range(8):
        sent += write_csv(dirs.data / f"part-{i}.csv", range(i * 20_000, (i + 1) * 20_000))
    DataFlowFactory(name="orphan", batch_size=200, parallelism=2, sink_path=str(dirs.out / "sink"))
    proc = runflow_once_landed(fleet_env(), "orphan", dirs.landing, at_least=3)
    proc.kill()  # SIGKILL: nothing releases runflow's queue; its claim must lapse by itself
    proc.communicate(timeout=60)
    run = FlowRun.objects.get(flow__name="orphan")
    assert run.status == "reading"

    fleet.beat()
    fleet.worker("w1")
    run = wait_for_run(run, timeout=300)

    assert run.status == "succeeded", run.message + fleet.log("w1")[-3000:]
    assert multiset(read_parquet_rows(dirs.out / "sink")) == multiset(sent)
    assert run.records_read == len(sent)
