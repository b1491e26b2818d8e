"""A worker that takes Spark tasks has its Spark session warm before the first run asks
for it, and a run on a running fleet needs no beat tick to start or end.

No in-process worker here (the ``worker`` fixture): it would take the run's tasks."""

from __future__ import annotations

import pytest

from dataflow.services.flows import flow_apply, flow_start
from tests.helpers import multiset, read_parquet_rows, spec, wait_for_run, wait_until, write_csv

pytestmark = pytest.mark.django_db(transaction=True)

WARMED = "Spark warmed up"


def _files(directory, count: int, rows: int) -> list[tuple]:
    sent = []
    for i in range(count):
        sent += write_csv(directory / f"part-{i:02d}.csv", range(i * rows, (i + 1) * rows))
    return sent


def test_a_worker_that_takes_spark_tasks_warms_spark_as_it_starts(fleet, dirs):
    # "spark" takes every task (the Spark tasks' queue is the default one here); "readers"
    # consumes another queue only, so it takes no Spark task and starts no JVM.
    warm = {"DATAFLOW_WORKER_SPARK_WARM_UP": "1"}
    fleet.worker("spark", concurrency=4, env=warm)
    fleet.worker("readers", concurrency=1, queues="not-spark", env=warm)
    fleet.wait_ready("spark", "readers")
    wait_until(
        lambda: WARMED in fleet.log("spark"),
        timeout=180,
        message=lambda: f"the Spark worker did not warm up: {fleet.log('spark')[-2000:]}",
    )
    sent = _files(dirs.data, 4, 300)
    flow, _ = flow_apply(spec=spec("warm", str(dirs.data), str(dirs.out / "sink"), parallelism=2))

    run = wait_for_run(flow_start(flow=flow), timeout=120)  # no beat runs in this test

    assert run.status == "succeeded", (run.message, fleet.log("spark")[-2000:])
    assert multiset(read_parquet_rows(dirs.out / "sink")) == multiset(sent)
    assert fleet.log("spark").count("Spark session on") == 1, "the run used the warm session"
    assert WARMED not in fleet.log("readers")
    assert "Spark session on" not in fleet.log("readers")
