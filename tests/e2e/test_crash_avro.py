"""A reader of an Avro container file killed with SIGKILL mid-split: another worker resumes
at the block after the last checkpoint, and the sink holds exactly the records of the file,
compared value by value with ``fastavro.reader``.

Real ``celery -A dataflow worker`` and ``celery -A dataflow beat`` processes against the
test's PostgreSQL and Redis (as ``tests/e2e/test_crash_files.py`` does for CSV and gzip).
"""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from dataflow.models import Assignment
from dataflow.services.flows import flow_start
from tests.connectors.files.avro_data import fastavro_records
from tests.connectors.files.avro_data import write_container as write_avro
from tests.e2e.test_crash_files import _kill_mid_split_and_finish
from tests.factories import DataFlowFactory
from tests.helpers import committed_overlaps_and_gaps, multiset

pytestmark = pytest.mark.django_db(transaction=True)

SCHEMA = {
    "type": "record",
    "name": "Reading",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "sensor", "type": {"type": "enum", "name": "Sensor", "symbols": ["s0", "s1", "s2"]}},
        {"name": "temperature", "type": ["null", "double"]},
    ],
}


def test_an_avro_split_resumes_at_the_block_after_its_checkpoint(fleet, dirs):
    records = [
        {"id": i, "sensor": f"s{i % 3}", "temperature": None if i % 11 == 0 else i * 0.5}
        for i in range(300_000)
    ]
    path = write_avro(dirs.data / "readings.avro", SCHEMA, records, codec="deflate", sync_interval=8000)
    flow = DataFlowFactory(
        parallelism=2,
        batch_size=1000,
        sink_path=str(dirs.out / "sink"),
        source={"type": "files", "path": str(dirs.data), "split_size_mb": 0.5},
        format={"type": "avro"},
    )
    fleet.beat()
    fleet.worker("w1")
    fleet.worker("w2")
    run = flow_start(flow=flow)

    run = _kill_mid_split_and_finish(run, fleet, records)

    rows = pq.read_table(dirs.out / "sink").to_pylist()
    assert multiset(tuple(r.values()) for r in rows) == multiset(
        tuple(r.values()) for r in fastavro_records(path)
    )
    assert run.records_read == len(records)
    assert committed_overlaps_and_gaps(run) == []
    expired = Assignment.objects.filter(split__run=run, outcome="expired").values_list("split_id", flat=True)
    assert Assignment.objects.filter(split_id__in=list(expired), start_position__gt=0).exists()
