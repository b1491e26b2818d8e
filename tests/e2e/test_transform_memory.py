"""A transform that runs the Spark driver out of heap fails its run, and the worker that ran
it runs the next flow.

A real worker process (its own JVM, with a small heap so the bomb goes off at once):
``explode(sequence(1, 400000000))`` asks for a 1.6 GB array per row.
"""

from __future__ import annotations

import pytest

from dataflow.models import RunStatus
from dataflow.services.flows import flow_start
from tests.e2e.fleet import Fleet
from tests.factories import DataFlowFactory
from tests.helpers import read_parquet_rows, wait_for_run, write_csv

pytestmark = pytest.mark.django_db(transaction=True)

BOMB_SQL = "SELECT id, explode(sequence(1, 400000000)) AS k FROM source"


def test_a_transform_that_runs_the_driver_out_of_heap_fails_and_the_worker_runs_the_next_flow(
    fleet: Fleet, dirs
):
    rows = write_csv(dirs.data / "part-0.csv", range(20))
    bomb_flow = DataFlowFactory(name="bomb", parallelism=1, sql=BOMB_SQL)
    small_flow = DataFlowFactory(name="small", parallelism=1)
    fleet.beat()
    fleet.worker("w1", env={"SPARK_DRIVER_MEMORY": "512m"})

    bombed = wait_for_run(flow_start(flow=bomb_flow), timeout=300)

    assert bombed.status == RunStatus.FAILED, bombed.message
    assert bombed.message.startswith("transform failed: the Spark driver ran out of memory ("), bombed.message
    assert "OutOfMemoryError" in bombed.message
    assert bombed.message.endswith(
        "the query needs more memory than the driver has (SPARK_DRIVER_MEMORY); "
        "a new Spark session starts with the next job"
    )
    assert bombed.transform_attempts == 1, "a query that exhausted the heap is not retried"
    assert not (dirs.out / "bomb").exists()

    small = wait_for_run(flow_start(flow=small_flow), timeout=300)

    assert small.status == RunStatus.SUCCEEDED, small.message + fleet.log("w1")[-3000:]
    assert sorted(read_parquet_rows(dirs.out / "small")) == rows
