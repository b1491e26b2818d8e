"""Two transform attempts of one run: only the current one may publish.

A 2-worker fleet runs a 2M-row ``ORDER BY`` transform. While the first attempt runs, the
test deletes its Redis lease until a second attempt has started in the other worker, then
empties Redis (``FLUSHDB``: the keys a restart without persistence loses, the broker's
queues included; connections are not cut, tests/e2e/test_redis_outage.py covers that).
The stale attempt must publish nothing and clean up nothing: the sink holds every row
read, once.
"""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from dataflow.models import FlowRun
from dataflow.redis_client import get_redis
from dataflow.services.context import coordinator_for
from dataflow.services.flows import flow_start
from source_support.coordination import Mark
from tests.e2e.fleet import Fleet
from tests.factories import DataFlowFactory
from tests.helpers import wait_for_run, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

ROWS = 2_000_000


def _write_source(directory, files: int = 4) -> None:
    per_file = ROWS // files
    for i in range(files):
        with open(directory / f"part-{i}.csv", "w") as f:
            f.write("id,sensor,temperature\n")
            start = i * per_file
            f.writelines(f"{n},s{n % 7},{n % 1000 / 10}\n" for n in range(start, start + per_file))


def test_a_stale_transform_attempt_cannot_lose_rows(fleet: Fleet, dirs, settings):
    _write_source(dirs.data)
    flow = DataFlowFactory(
        batch_size=50_000,
        parallelism=2,
        sql="SELECT id, sensor, temperature FROM source ORDER BY temperature, id",
        sink_path=str(dirs.out / "sink"),
    )
    lease = {"DATAFLOW_TRANSFORM_LEASE_SECONDS": "3"}
    fleet.beat()
    fleet.worker("w1", env=lease)
    fleet.worker("w2", env=lease)
    run = flow_start(flow=flow)

    wait_until(
        lambda: FlowRun.objects.get(pk=run.pk).transform_attempts >= 1,
        240,
        lambda: f"no transform started: {FlowRun.objects.get(pk=run.pk).message}",
    )
    lease_key = coordinator_for(run).keys.mark(Mark.TRANSFORM_LEASE)

    def second_attempt_started() -> bool:
        now = FlowRun.objects.get(pk=run.pk)
        assert now.status == "transforming", "the first attempt ended first"
        if now.transform_attempts >= 2:
            return True
        get_redis().delete(lease_key)
        return False

    wait_until(second_attempt_started, 120, lambda: "no second attempt started")
    get_redis().flushdb()
    run = wait_for_run(run, timeout=300)

    assert run.status == "succeeded", run.message + fleet.log("w1")[-2000:] + fleet.log("w2")[-2000:]
    sink = pq.read_table(dirs.out / "sink")
    assert run.records_read == ROWS
    assert sink.num_rows == ROWS
    assert run.rows_written == ROWS
    assert len(set(sink.column("id").to_pylist())) == ROWS
    # The stale attempt may still be writing when the run ends; once refused, it removes
    # its staging directory (and the winner removed what a crashed attempt would leave).
    wait_until(
        lambda: sorted(p.name for p in dirs.out.iterdir()) == ["sink"],
        120,
        lambda: f"staging debris is left: {sorted(p.name for p in dirs.out.iterdir())}",
    )
    assert pq.read_table(dirs.out / "sink").num_rows == ROWS
