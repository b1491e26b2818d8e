"""Pause, resume and restart (``services.flows``) on running flows, end to end: a real Celery
worker (in-process), PostgreSQL, Redis and Spark, and the sink as a plain reader sees it.

A paused run is checked by what its readers do, not by waiting a while: each reader runs
in time slices (one Celery task each, one after the other per reader), so once every reader
has run a whole slice that began after the pause, nothing read before the pause is left to
commit; a run whose count then stays put over further slices reads nothing.
"""

from __future__ import annotations

import threading
from collections import Counter

import pytest

from dataflow.models import Assignment, FlowRun, FlowStatus, RunStatus, Split, SplitStatus
from dataflow.selectors.flows import flow_status
from dataflow.services.context import coordinator_for
from dataflow.services.errors import FlowStateError
from dataflow.services.flows import flow_apply, flow_pause, flow_restart, flow_resume, flow_start, flow_stop
from dataflow.services.runs import slices as slices_service
from dataflow.services.runs.tick import run_tick
from source_support.coordination import Mark
from tests.e2e.streams_helpers import Producer, quick_stream_intervals, sink_ids, stream_spec, what_differs
from tests.factories import DataFlowFactory
from tests.helpers import Beat, live, multiset, read_parquet_rows, wait_for_run, wait_until, write_csv

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture()
def quick(settings, worker):
    """The in-process worker, with short stream intervals (``quick_stream_intervals``)."""
    quick_stream_intervals(settings)
    return worker


class ReaderSlices:
    """The reader slices of one run as the in-process worker runs them (a spy around the
    slice service the reader task calls, in the worker's threads, in this process)."""

    def __init__(self, run: FlowRun) -> None:
        self.run_id, self.parallelism = run.pk, run.spec["parallelism"]
        self.lock = threading.Lock()
        self.begun = 0
        self.ended: list[tuple[int, int]] = []  # (order begun, subtask)
        self.read_slice = slices_service.read_slice

    def __enter__(self) -> ReaderSlices:
        slices_service.read_slice = self._read_slice
        return self

    def __exit__(self, *exc) -> None:
        slices_service.read_slice = self.read_slice

    def _read_slice(self, *, run_id, subtask, token):
        if run_id != self.run_id:
            return self.read_slice(run_id=run_id, subtask=subtask, token=token)
        with self.lock:
            self.begun += 1
            begun = self.begun
        try:
            return self.read_slice(run_id=run_id, subtask=subtask, token=token)
        finally:
            with self.lock:
                self.ended.append((begun, subtask))

    def mark(self) -> int:
        with self.lock:
            return self.begun

    def wait_for_a_whole_slice_each_since(self, mark: int) -> None:
        """Until every reader has run a whole slice that began after ``mark``."""

        def done() -> set[int]:
            with self.lock:
                return {subtask for begun, subtask in self.ended if begun > mark}

        def why() -> str:
            run = FlowRun.objects.get(pk=self.run_id)
            missing = sorted(set(range(self.parallelism)) - done())
            return f"readers {missing} ran no slice since; run {run.status}, {live(run)} records read"

        wait_until(lambda: done() >= set(range(self.parallelism)), 60, why)

    def records_once_held(self, run: FlowRun) -> int:
        """Records read once every reader ran a whole slice after now; the count must then
        stay the same over one more such slice each (the test fails otherwise)."""
        self.wait_for_a_whole_slice_each_since(self.mark())
        held = live(run)
        self.wait_for_a_whole_slice_each_since(self.mark())
        assert live(run) == held, f"run {run.pk} read on while paused: {held} -> {live(run)}"
        return held


@pytest.mark.slow
def test_a_paused_flow_reads_nothing_until_resumed_then_every_record_once(quick, dirs, rds, prefix):
    producer = Producer(rds, prefix)
    producer.write(200)
    sink = dirs.out / "sink"
    flow, _ = flow_apply(spec={**stream_spec("paused", prefix, sink), "stop": {"after_records": 600}})
    with Beat():
        run = flow_start(flow=flow)
        with ReaderSlices(run) as slices:
            wait_until(lambda: live(run) == 200, 60, lambda: what_differs(sink, producer.sent, run))

            flow_pause(flow=flow)
            producer.write(400)
            held = slices.records_once_held(run)

            flow.refresh_from_db()
            status = flow_status(flow=flow)
            assert (status["status"], status["run"]["paused"]) == (FlowStatus.PAUSED, True)
            assert held < 600
            with pytest.raises(FlowStateError, match="paused already"):
                flow_pause(flow=flow)

            flow_resume(flow=flow)
            run = wait_for_run(run)

    assert run.status == RunStatus.SUCCEEDED, run.message
    assert run.paused_at is None and run.flow.status == FlowStatus.SUCCEEDED
    assert sink_ids(sink) == Counter(producer.sent), what_differs(sink, producer.sent, run)


@pytest.mark.slow
def test_a_paused_run_that_was_stopped_reads_again_once_resumed(quick, dirs, rds, prefix):
    producer = Producer(rds, prefix)
    producer.write(100)
    sink = dirs.out / "sink"
    flow, _ = flow_apply(spec={**stream_spec("stopped", prefix, sink), "stop": {"after_records": 300}})
    with Beat():
        run = flow_start(flow=flow)
        wait_until(lambda: live(run) == 100, 60, lambda: what_differs(sink, producer.sent, run))
        flow_pause(flow=flow)
        flow_stop(flow=flow)
        run.refresh_from_db()
        assert (run.status, run.flow.status) == (RunStatus.STOPPED, FlowStatus.STOPPED)

        producer.write(200)
        resumed = flow_resume(flow=flow)
        assert (resumed.pk, resumed.paused_at) == (run.pk, None)
        run = wait_for_run(run)

    assert run.status == RunStatus.SUCCEEDED, run.message
    assert sink_ids(sink) == Counter(producer.sent), what_differs(sink, producer.sent, run)


# Bounded flows of files.


def _bad_line(path, ids: range, bad_id: int) -> list[tuple]:
    """A CSV of readings (as ``write_csv``) whose row ``bad_id`` has a temperature that is no number."""
    rows = write_csv(path, ids)
    path.write_text(path.read_text().replace(f"\n{bad_id},s{bad_id % 7},", f"\n{bad_id},s{bad_id % 7},x"))
    return rows


@pytest.mark.slow
def test_restart_only_failed_reads_the_fixed_split_again_and_every_row_once(worker, dirs):
    sent = []
    for name, ids in (("a", range(0, 500)), ("b", range(500, 1000)), ("d", range(1500, 2000))):
        sent += write_csv(dirs.data / f"{name}.csv", ids)
    sent += _bad_line(dirs.data / "c.csv", range(1000, 1500), bad_id=1300)
    flow = DataFlowFactory(batch_size=100, parallelism=2, sink_path=str(dirs.out / "sink"))
    with Beat():
        run = wait_for_run(flow_start(flow=flow))
        assert run.status == RunStatus.FAILED and "c.csv line 302" in run.message, run.message
        finished = dict(
            Split.objects.filter(run=run, status=SplitStatus.FINISHED).values_list("split_id", "records_read")
        )
        failed = Split.objects.get(run=run, status=SplitStatus.FAILED).split_id
        leases = Counter(Assignment.objects.filter(split__run=run).values_list("split__split_id", flat=True))

        write_csv(dirs.data / "c.csv", range(1000, 1500))  # the user fixed the bad line
        restarted = flow_restart(flow=flow, only_failed=True)
        assert restarted.pk == run.pk
        run = wait_for_run(run)

    assert run.status == RunStatus.SUCCEEDED, run.message
    assert multiset(read_parquet_rows(dirs.out / "sink")) == multiset(sent)
    # The failed split is read again; the finished ones are not (a split the failure
    # stopped before it was read is read for the first time).
    again = (
        Counter(Assignment.objects.filter(split__run=run).values_list("split__split_id", flat=True)) - leases
    )
    assert failed in again and not set(again) & set(finished), (failed, again, finished)
    after = dict(Split.objects.filter(run=run, split_id__in=finished).values_list("split_id", "records_read"))
    assert after == finished


@pytest.mark.slow
def test_restart_of_a_running_flow_stops_its_run_and_starts_a_new_one(worker, dirs):
    sent = []
    for i in range(4):
        sent += write_csv(dirs.data / f"{i}.csv", range(i * 100, (i + 1) * 100))
    flow = DataFlowFactory(parallelism=2, sink_path=str(dirs.out / "sink"))
    with Beat():
        first = flow_start(flow=flow)
        flow_pause(flow=flow)  # so it is surely still running when restarted

        second = flow_restart(flow=flow)
        second = wait_for_run(second)

    assert second.pk != first.pk
    assert FlowRun.objects.get(pk=first.pk).status == RunStatus.STOPPED
    assert second.status == RunStatus.SUCCEEDED, second.message
    assert multiset(read_parquet_rows(dirs.out / "sink")) == multiset(sent)


def test_a_tick_sets_the_pause_mark_again_after_redis_lost_it(dirs, rds, prefix):
    # No worker: the test runs the tick itself, and no task of the run may still be writing
    # when the database is emptied after the test (CI saw that teardown deadlock).
    Producer(rds, prefix).write(20)
    # A stream: its run reads until stopped, so it is surely still reading when paused.
    flow, _ = flow_apply(spec=stream_spec("held", prefix, dirs.out / "sink"))
    run = flow_start(flow=flow)
    flow_pause(flow=flow)
    coordinator = coordinator_for(run)
    assert coordinator.user_hold_on()

    coordinator.redis.delete(coordinator.keys.mark(Mark.USER_HOLD))  # as if Redis lost it
    run_tick(run_id=run.pk)

    assert coordinator.user_hold_on()
    flow_stop(flow=flow)
