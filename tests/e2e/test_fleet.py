"""A real fleet: one beat and three worker processes share two flows.

Separate ``celery -A dataflow worker`` processes (threads pool) and one ``celery beat``
against the test's PostgreSQL and Redis; more readers than worker slots.
"""

from __future__ import annotations

import time

import pytest

from dataflow.models import Assignment, FlowRun
from dataflow.services.flows import flow_start
from tests.factories import DataFlowFactory
from tests.helpers import live, multiset, read_parquet_rows, wait_for_run, write_csv

pytestmark = pytest.mark.django_db(transaction=True)


def _files(directory, count: int, rows: int, first_id: int) -> list[tuple]:
    directory.mkdir()
    sent = []
    for i in range(count):
        start = first_id + i * rows
        sent += write_csv(directory / f"part-{i:03d}.csv", range(start, start + rows))
    return sent


def test_two_flows_share_three_workers_fairly_and_survive_a_sigkill(fleet, dirs):
    sent_a = _files(dirs.data / "a", 24, 3000, 0)
    sent_b = _files(dirs.data / "b", 16, 3000, 1_000_000)
    flow_a = DataFlowFactory(
        source_path=str(dirs.data / "a"), sink_path=str(dirs.out / "a"), parallelism=6, batch_size=150
    )
    flow_b = DataFlowFactory(
        source_path=str(dirs.data / "b"), sink_path=str(dirs.out / "b"), parallelism=4, batch_size=150
    )
    fleet.beat()
    for name in ("w1", "w2", "w3"):
        fleet.worker(name, concurrency=3)  # 9 slots for 10 readers, ticks and transforms
    run_a, run_b = flow_start(flow=flow_a), flow_start(flow=flow_b)

    both_reading = False
    killed = False
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        run_a.refresh_from_db()
        run_b.refresh_from_db()
        reading = [r for r in (run_a, run_b) if r.status == "reading"]
        if len(reading) == 2 and 0 < live(run_a) < len(sent_a) and 0 < live(run_b) < len(sent_b):
            both_reading = True
        if both_reading and not killed and live(run_a) + live(run_b) > (len(sent_a) + len(sent_b)) // 3:
            fleet.kill("w2")
            killed = True
        if run_a.status not in ("reading", "transforming") and run_b.status not in (
            "reading",
            "transforming",
        ):
            break
        time.sleep(0.05)
    run_a, run_b = wait_for_run(run_a, timeout=60), wait_for_run(run_b, timeout=60)

    assert run_a.status == run_b.status == "succeeded", (
        run_a.message,
        run_b.message,
        fleet.log("w1")[-2000:],
    )
    assert killed, "the kill happened mid-flow"
    assert both_reading, "both flows made progress at the same time on the shared fleet"
    assert multiset(read_parquet_rows(dirs.out / "a")) == multiset(sent_a)
    assert multiset(read_parquet_rows(dirs.out / "b")) == multiset(sent_b)
    assert (run_a.records_read, run_b.records_read) == (len(sent_a), len(sent_b))
    # Which process takes which reader task is Celery's choice (prefetch, a loaded machine):
    # one run may stay in one process; the fleet as a whole must have read the two.
    pids = {
        loc.rsplit(":", 1)[1]
        for loc in Assignment.objects.filter(split__run__in=[run_a, run_b]).values_list(
            "reader_location", flat=True
        )
    }
    assert len(pids) >= 2, f"the two runs were read by the processes {pids}"
    assert FlowRun.objects.filter(status="succeeded").count() == 2
