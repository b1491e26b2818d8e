"""Crashes mid-flow: worker processes killed with SIGKILL, and the whole fleet restarted.

Real ``celery -A dataflow worker`` and ``celery -A dataflow beat`` processes against the
test's PostgreSQL and Redis. The sink must hold exactly the source's rows afterwards.
"""

from __future__ import annotations

import time

import pytest

from dataflow.models import Assignment, FlowRun, Split
from dataflow.services.context import coordinator_for
from dataflow.services.flows import flow_start
from tests.e2e.fleet import Fleet
from tests.factories import DataFlowFactory
from tests.helpers import live, multiset, read_parquet_rows, wait_for_run, write_csv

pytestmark = pytest.mark.django_db(transaction=True)


def _source(dirs, files: int = 60, rows: int = 4000) -> list[tuple]:
    sent = []
    for i in range(files):
        sent += write_csv(dirs.data / f"part-{i:03d}.csv", range(i * rows, (i + 1) * rows))
    return sent


def _wait_for_progress(run: FlowRun, at_least: int, fleet: Fleet, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run.refresh_from_db()
        if live(run) >= at_least:
            return
        if run.status != "reading":
            raise AssertionError(f"run ended before the crash point: {run.status} {run.message}")
        time.sleep(0.05)
    raise AssertionError(f"no progress: {live(run)} records\n{fleet.log('w1')[-3000:]}")


def _worker_holding_a_split(run: FlowRun, fleet: Fleet) -> str:
    """The fleet name of a worker process that is reading a split of ``run`` right now."""
    coordinator = coordinator_for(run)
    for _ in range(400):
        live = coordinator.live_readers(run.spec["parallelism"])
        owners = set(Split.objects.filter(run=run, status="assigned").values_list("owner_token", flat=True))
        for subtask, location in coordinator.reader_locations().items():
            if live.get(subtask) in owners:
                name = fleet.name_of(int(location.rsplit(":", 1)[1]))
                if name:
                    return name
        time.sleep(0.05)
    raise AssertionError("no worker holds a split")


def test_sigkilled_worker_loses_and_duplicates_nothing(fleet, dirs):
    sent = _source(dirs)
    flow = DataFlowFactory(batch_size=100, sink_path=str(dirs.out / "sink"))
    fleet.beat()
    fleet.worker("w1")
    fleet.worker("w2")
    run = flow_start(flow=flow)

    _wait_for_progress(run, len(sent) // 4, fleet)
    victim = _worker_holding_a_split(run, fleet)
    fleet.kill(victim)
    killed_at = live(run)
    run = wait_for_run(run, timeout=240)

    survivor = "w2" if victim == "w1" else "w1"
    assert run.status == "succeeded", run.message + fleet.log(survivor)[-3000:]
    assert killed_at < len(sent)
    assert multiset(read_parquet_rows(dirs.out / "sink")) == multiset(sent)
    assert run.records_read == len(sent)
    assert Assignment.objects.filter(split__run=run, outcome="expired").exists()


def test_restarted_fleet_resumes_from_checkpoints(fleet, dirs):
    sent = _source(dirs, files=8, rows=15000)
    flow = DataFlowFactory(batch_size=500, sink_path=str(dirs.out / "sink"))
    fleet.beat()
    fleet.worker("w1")
    fleet.worker("w2")
    run = flow_start(flow=flow)

    _wait_for_progress(run, len(sent) // 3, fleet)
    fleet.kill("w1")
    fleet.kill("w2")
    run.refresh_from_db()
    read_before_restart = live(run)
    # The splits the fleet was in the middle of when it died, at their checkpoints.
    midway = dict(
        Split.objects.filter(run=run, status="assigned", position__gt=0).values_list("split_id", "position")
    )
    fleet.worker("w3")
    fleet.worker("w4")
    run = wait_for_run(run, timeout=240)

    assert run.status == "succeeded", run.message + fleet.log("w3")[-3000:]
    assert multiset(read_parquet_rows(dirs.out / "sink")) == multiset(sent)
    # Each record was committed once: what was read before the restart was not read again.
    assert run.records_read == len(sent)
    assert 0 < read_before_restart < len(sent)
    for split_id, checkpoint in midway.items():
        resumed = Assignment.objects.filter(
            split__run=run, split__split_id=split_id, start_position=checkpoint
        )
        assert resumed.exists(), (
            f"after the restart, {split_id} did not go on from its checkpoint {checkpoint}"
        )
