"""format.on_schema_change for ``fields`` end to end: a Redis stream whose later entries
gain a field, read as field/value pairs through the real flow (readers, landing, Spark,
the Parquet sink); the sink compared with the entries as Redis returns them."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from dataflow.models import SchemaChangeRecord
from dataflow.redis_client import redis_url
from dataflow.services.flows import flow_apply, flow_start
from tests.helpers import Beat, wait_for_run


@pytest.mark.slow
def test_a_stream_of_fields_gaining_a_field_evolves_the_sink(worker, rds, prefix, dirs):
    ids = [
        rds.xadd(
            f"{prefix}orders:0",
            {"id": i, "customer": f"c{i % 4}", **({"coupon": f"K{i}"} if i >= 30 else {})},
        )
        for i in range(60)
    ]
    doc = {
        "flow": {"name": "fields-drift", "parallelism": 1, "batch_size": 50, "poll_interval_ms": 50},
        "source": {"type": "redis_streams", "url": redis_url(), "streams": f"{prefix}orders:*"},
        "format": {"type": "fields", "schema": "id BIGINT, customer STRING", "on_schema_change": "evolve"},
        "transform": {"sql": "SELECT * FROM source", "trigger_ms": 200},
        "sink": {"type": "parquet", "path": str(dirs.out / "sink")},
        "stop": {"at": "latest"},
    }
    flow, _ = flow_apply(spec=doc)

    with Beat():
        run = wait_for_run(flow_start(flow=flow), timeout=120)

    assert run.status == "succeeded", run.message
    expected = [
        {
            "id": int(f[b"id"]),
            "customer": f[b"customer"].decode(),
            "coupon": f.get(b"coupon", b"").decode() or None,
        }
        for _, f in rds.xrange(f"{prefix}orders:0")
    ]
    assert sorted(pq.read_table(dirs.out / "sink").to_pylist(), key=lambda r: r["id"]) == expected
    change = SchemaChangeRecord.objects.get(run=run)
    assert (change.column_name, change.kind, change.records) == ("coupon", "added", 30)
    assert change.first_position == f"stream {prefix}orders:0 entry {ids[30].decode()}"
