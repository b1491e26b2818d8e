"""A flow over Redis streams whose entries hold Avro messages (single-object encoded and
plain binary), a bad one dead-lettered with its entry id, landed and written as JSON."""

from __future__ import annotations

import decimal
import io
import json

import fastavro
import pytest

from dataflow.models import DeadLetter
from source_support.formats.avro import single_object_fingerprint
from tests.helpers import run_flow

ORDER = {
    "type": "record",
    "name": "Order",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "customer", "type": ["null", "string"]},
        {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}},
        {"name": "lines", "type": {"type": "array", "items": "int"}},
    ],
}


def _body(record, *, single_object: bool) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(ORDER), record)
    return (b"\xc3\x01" + single_object_fingerprint(ORDER) if single_object else b"") + out.getvalue()


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_avro_messages_in_a_stream_field_are_landed_and_a_bad_one_dead_lettered(worker, rds, prefix, dirs):
    records = [
        {
            "id": i,
            "customer": None if i % 5 == 0 else f"c{i}",
            "amount": decimal.Decimal(f"{i}.25"),
            "lines": [i, 1],
        }
        for i in range(40)
    ]
    for i, record in enumerate(records):
        rds.xadd(f"{prefix}orders", {"payload": _body(record, single_object=i % 2 == 0), "other": "x"})
    bad_id = rds.xadd(f"{prefix}orders", {"payload": b"\xc3\x01garbage"}).decode()
    (dirs.data / "order.avsc").write_text(json.dumps(ORDER))
    sink = dirs.out / "sink"
    doc = {
        "flow": {
            "name": f"ra-{prefix[:-1]}",
            "parallelism": 1,
            "batch_size": 9,
            "poll_interval_ms": 50,
            "skip_errors": True,
        },
        "source": {"type": "redis_streams", "streams": f"{prefix}orders"},
        "format": {"type": "avro", "writer_schema": str(dirs.data / "order.avsc"), "field": "payload"},
        "transform": {"sql": "SELECT id, customer, amount, lines FROM source"},
        "sink": {"type": "json", "path": str(sink)},
        "stop": {"at": "latest"},
    }

    run = run_flow(doc, timeout=240)

    assert run.status == "succeeded", run.message
    lines = [
        json.loads(line) for part in sorted(sink.glob("*.json")) for line in part.read_text().splitlines()
    ]
    written = sorted(
        (line["id"], line.get("customer"), decimal.Decimal(str(line["amount"])), line["lines"])
        for line in lines
    )
    assert written == [(r["id"], r["customer"], r["amount"], r["lines"]) for r in records]
    [letter] = DeadLetter.objects.filter(run=run)
    assert letter.offset == bad_id
    assert "not an Avro record of the declared schema" in letter.error
