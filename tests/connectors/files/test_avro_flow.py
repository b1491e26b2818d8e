"""Whole flows over Avro container files, through the framework and Spark: read by block
ranges, landed as Parquet, written out as Parquet and as JSON, and compared value by value
with what ``fastavro.reader`` reads from the same files."""

from __future__ import annotations

import datetime as dt
import json

import fastavro
import pyarrow.parquet as pq
import pytest

from dataflow.models import DeadLetter
from tests.connectors.files.avro_data import (
    EVERY_TYPE_SCHEMA,
    every_type_record,
    expected_rows,
    fastavro_records,
    flights,
    write_container,
)
from tests.helpers import run_flow

pytestmark = pytest.mark.django_db(transaction=True)


def _doc(name, dirs, sink, **flow):
    return {
        "flow": {"name": name, "parallelism": 2, "batch_size": 300, "poll_interval_ms": 50, **flow},
        "source": {"type": "files", "path": str(dirs.data), "split_size_mb": 0.01},
        "format": {"type": "avro"},
        "transform": {"sql": "SELECT * FROM source"},
        "sink": sink,
    }


@pytest.mark.slow  # over 5 s: a Spark flow over every Avro type
def test_every_avro_type_lands_and_is_written_as_parquet_as_fastavro_reads_it(worker, dirs):
    paths = [
        write_container(
            dirs.data / f"part-{n}.avro",
            EVERY_TYPE_SCHEMA,
            [every_type_record(i) for i in range(n * 700, (n + 1) * 700)],
            codec=codec,
            sync_interval=3000,
        )
        for n, codec in enumerate(("deflate", "null"))
    ]
    sink = dirs.out / "sink"

    run = run_flow(_doc("avro-types", dirs, {"type": "parquet", "path": str(sink)}), timeout=240)

    assert run.status == "succeeded", run.message
    assert run.splits.count() > 2  # the files were cut into block ranges
    written = sorted(pq.read_table(sink).to_pylist(), key=lambda r: r["id"])
    for row in written:  # an identity run writes UTC instants as landed; Spark's INT96 reads naive
        for name in ("ts_ms", "ts_us"):
            if row[name] is not None and row[name].tzinfo is None:
                row[name] = row[name].replace(tzinfo=dt.UTC)
    expected = [row for path in paths for row in expected_rows(EVERY_TYPE_SCHEMA, fastavro_records(path))]
    for mine, theirs in zip(written, expected, strict=True):
        assert mine == theirs


@pytest.mark.slow  # over 5 s on 2 cores: not in the fast lane
def test_public_flights_are_written_as_json_as_fastavro_reads_them(worker, dirs):
    schema, records = flights(6000)
    path = write_container(dirs.data / "flights.avro", schema, records, codec="snappy", sync_interval=5000)
    sink = dirs.out / "sink"
    doc = _doc("avro-json", dirs, {"type": "json", "path": str(sink)})
    doc["transform"]["sql"] = (
        "SELECT year, month, day, dep_delay, carrier, flight, tailnum, origin, time_hour FROM source"
    )

    run = run_flow(doc, timeout=240)

    assert run.status == "succeeded", run.message
    lines = [
        json.loads(line) for part in sorted(sink.glob("*.json")) for line in part.read_text().splitlines()
    ]
    names = ("year", "month", "day", "dep_delay", "carrier", "flight", "tailnum", "origin", "time_hour")
    written = sorted(
        (
            (
                *(line.get(name) for name in names[:-1]),
                dt.datetime.fromisoformat(line["time_hour"]).astimezone(dt.UTC),
            )
            for line in lines
        ),
        key=str,
    )
    expected = sorted(
        (tuple(r[n] for n in names) for r in expected_rows(schema, fastavro_records(path))), key=str
    )
    assert written == expected


@pytest.mark.slow
def test_a_corrupt_block_is_dead_lettered_with_file_and_position_when_skipping(worker, dirs):
    schema, records = flights(2000)
    path = write_container(dirs.data / "flights.avro", schema, records, sync_interval=2000)
    with open(path, "rb") as f:
        blocks = [(b.offset, b.size, b.num_records) for b in fastavro.block_reader(f)]
    offset, size, count = blocks[3]
    data = bytearray(path.read_bytes())
    data[offset + 3 : offset + size - 16] = b"\xff" * (size - 19)
    path.write_bytes(bytes(data))
    sink = dirs.out / "sink"

    run = run_flow(
        _doc("avro-bad", dirs, {"type": "parquet", "path": str(sink)}, skip_errors=True), timeout=240
    )

    assert run.status == "succeeded", run.message
    assert pq.read_table(sink).num_rows == len(records) - count
    [letter] = DeadLetter.objects.filter(run=run)
    assert letter.position == offset and str(path) in letter.split_id
    assert "corrupt block" in letter.error
