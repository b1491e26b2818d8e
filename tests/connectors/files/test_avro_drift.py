"""format.on_schema_change for Avro container files: a directory whose later files were
written (by fastavro) with a writer schema that adds a field, lacks one or retypes one,
read by the real split reader under each policy; what lands is compared with what
fastavro reads from the same files, the policy applied here by hand."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import fastavro
import pandas as pd
import pytest

from connectors.files.avro_reader import AvroFileSplitReader, avro_check_input
from connectors.files.config import FilesSourceConfig
from connectors.files.source import FileSource
from connectors.files.split import FileSplit
from source_support.errors import ConfigError
from source_support.formats import FormatSpec, validate_format
from source_support.formats.avro_container import read_header
from source_support.formats.drift import SchemaDrift
from source_support.registry import BuildContext, Environment
from tests.connectors.files.avro_data import fastavro_records, write_container

BASE = ["id", "sensor", "temperature"]
PYTHON_TYPES = {"id": int, "sensor": str, "temperature": float}


def _schema(*fields: tuple[str, Any]) -> dict[str, Any]:
    return {"type": "record", "name": "Reading", "fields": [{"name": n, "type": t} for n, t in fields]}


def drifting_files(data: Path) -> dict[str, Path]:
    """a.avro as the columns are taken from it; b.avro adds ``region``; c.avro lacks
    ``temperature``; d.avro writes ``temperature`` as a string; e.avro writes ``id`` as an
    int (a promotion to long: no change). Small sync intervals: several blocks a file."""
    base = [("id", "long"), ("sensor", "string"), ("temperature", ["null", "double"])]
    return {
        "a": write_container(
            data / "a.avro",
            _schema(*base),
            [{"id": i, "sensor": f"s{i}", "temperature": i * 0.5} for i in range(5)],
        ),
        "b": write_container(
            data / "b.avro",
            _schema(*base, ("region", "string")),
            [{"id": i, "sensor": f"s{i}", "temperature": i * 0.5, "region": "eu"} for i in range(5, 10)],
            sync_interval=40,
        ),
        "c": write_container(
            data / "c.avro", _schema(*base[:2]), [{"id": i, "sensor": f"s{i}"} for i in range(10, 13)]
        ),
        "d": write_container(
            data / "d.avro",
            _schema(*base[:2], ("temperature", "string")),
            [
                {"id": 13, "sensor": "s13", "temperature": "hot"},
                {"id": 14, "sensor": "s14", "temperature": "1.5"},
            ],
        ),
        "e": write_container(
            data / "e.avro",
            _schema(("id", "int"), *base[1:]),
            [{"id": 15, "sensor": "s15", "temperature": 2.0}],
        ),
    }


def by_hand(policy: str, files: list[Path]) -> list[dict[str, Any]]:
    """What the run should land: each file as fastavro reads it, the policy applied to each
    record (a field the first file lacks, a field of another type, a field the file lacks)."""
    rows = []
    for path in files:
        for record in fastavro_records(path):
            row: dict[str, Any] = {}
            rescued: dict[str, str] = {}
            for name in BASE:
                value = record.get(name)
                if value is not None and not isinstance(value, PYTHON_TYPES[name]):
                    row[name], rescued[name] = None, str(value)
                else:
                    row[name] = value
            extra = {k: v for k, v in record.items() if k not in BASE and v is not None}
            if policy == "evolve":
                row["region"] = extra.get("region")
            if policy == "rescue":
                rescued.update(extra)
                row["_rescued"] = json.dumps(rescued, sort_keys=True) if rescued else None
            rows.append(row)
    return rows


def _reader(data: Path, policy: str | None, schema: str | None = None) -> AvroFileSplitReader:
    env = Environment(allowed_roots=(data,), base_dir=data)
    config = FilesSourceConfig.parse({"path": str(data / "*.avro")}, env)
    table = {"type": "avro", **({"on_schema_change": policy} if policy else {})}
    table |= {"schema": schema} if schema else {}
    source = FileSource.from_config(config, validate_format(table), BuildContext(env=env, batch_size=100))
    return AvroFileSplitReader(source.fmt.with_schema(source.infer_schema()))


def _read(reader: AvroFileSplitReader, files: list[Path]):
    tables, changes = [], []
    for path in files:
        batch = reader.read_batch(FileSplit(str(path), 0, os.path.getsize(path), 0), 100)
        tables.append(batch.records.to_pandas())
        changes += [
            (path.name, c.column, c.kind, c.old_type, c.new_type, c.position, c.records)
            for c in batch.schema_changes
        ]
    landed = pd.concat(tables, ignore_index=True)
    return landed.astype(object).where(landed.notna(), None).to_dict("records"), changes


@pytest.mark.parametrize("policy", ["rescue", "ignore"])
def test_added_missing_and_retyped_fields_land_as_the_policy_says(data, policy):
    files = list(drifting_files(data).values())

    rows, changes = _read(_reader(data, policy), files)

    assert rows == by_hand(policy, files)
    header_end = {p.name: _first_block(p) for p in files}
    assert changes == [
        ("b.avro", "region", "added", "", "STRING", header_end["b.avro"], 5),
        ("c.avro", "temperature", "missing", "DOUBLE", "", header_end["c.avro"], 3),
        ("d.avro", "temperature", "retyped", "DOUBLE", "STRING", header_end["d.avro"], 2),
    ]


def test_evolve_adds_the_new_field_as_a_column_and_nulls_the_missing_one(data):
    files = list(drifting_files(data).values())
    ok = [p for p in files if p.name != "d.avro"]

    rows, _ = _read(_reader(data, "evolve"), ok)

    assert rows == by_hand("evolve", ok)
    assert [r["region"] for r in rows[5:10]] == ["eu"] * 5


def test_evolve_fails_on_a_retyped_field_naming_it(data):
    files = drifting_files(data)

    with pytest.raises(SchemaDrift, match="the column 'temperature' holds a STRING value, not DOUBLE"):
        _read(_reader(data, "evolve"), [files["d"]])


def test_fail_fails_at_the_new_field_naming_it_and_its_block(data):
    files = drifting_files(data)

    with pytest.raises(SchemaDrift) as failed:
        _read(_reader(data, "fail"), [files["a"], files["b"]])

    assert "a new column 'region' (STRING)" in str(failed.value)
    assert failed.value.change.position == _first_block(files["b"])


def test_a_change_over_several_blocks_is_said_at_the_first_and_counted_in_all(data):
    files = drifting_files(data)
    with open(files["b"], "rb") as f:
        assert len(list(fastavro.block_reader(f))) > 1

    _, changes = _read(_reader(data, "ignore"), [files["b"]])

    assert changes == [("b.avro", "region", "added", "", "STRING", _first_block(files["b"]), 5)]


def test_a_declared_schema_with_a_policy_reads_files_that_lack_a_column(data):
    files = drifting_files(data)
    reader = _reader(data, "ignore", schema="id BIGINT, temperature DOUBLE")

    rows, changes = _read(reader, [files["c"]])

    assert rows == [{"id": i, "temperature": None} for i in range(10, 13)]
    # As a CSV header's: a field the declared columns lack is a new column too.
    assert [c[1:3] for c in changes] == [("sensor", "added"), ("temperature", "missing")]


def test_a_declared_schema_without_the_option_needs_its_columns_in_every_file_as_before(data, env):
    drifting_files(data)
    fmt = validate_format({"type": "avro", "schema": "id BIGINT, temperature DOUBLE"}).build()
    assert fmt.on_schema_change is None

    with pytest.raises(
        ConfigError, match="column 'temperature' is not a field of the Avro schema of .*c.avro"
    ):
        avro_check_input(str(data / "*.avro"), env, fmt)


def test_on_schema_change_is_refused_for_avro_messages_naming_why(env):
    spec = FormatSpec(
        "avro",
        {"writer_schema": json.dumps(_schema(("id", "long"))), "on_schema_change": "evolve"},
    )

    with pytest.raises(
        ConfigError, match="format.on_schema_change: applies to Avro container files"
    ) as refused:
        spec.build(entries=True, env=env)

    assert "cannot drift" in str(refused.value)


def _first_block(path: Path) -> int:
    """Where the file's first block starts (right after its header)."""
    with open(path, "rb") as f:
        return read_header(f).end
