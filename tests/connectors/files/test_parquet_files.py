"""``[format] type = "parquet"`` in the files source: real Parquet files written by pandas
and pyarrow, read as a run reads them (footer schema, byte-range splits of row groups,
batches of whole row groups), compared with what pandas reads from the same files."""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import os
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from connectors.files import parquet_reader
from connectors.files.config import FilesSourceConfig
from connectors.files.enumerator import file_splits
from connectors.files.parquet_reader import ParquetFileSplitReader, row_group_start
from connectors.files.source import FileSource
from connectors.files.split import FileSplit
from source_support.api import BadRecord
from source_support.errors import ConfigError, SplitFailed
from source_support.formats import FormatSpec, ReadError, validate_format
from source_support.formats.drift import SchemaDrift
from source_support.registry import BuildContext, Environment
from source_support.schema import parse_ddl
from source_support.testing.suite import SourceConformanceSuite
from tests.connectors.files.test_conformance import COLUMNS, FilesContext


@dataclasses.dataclass
class ParquetRead:
    """What reading a Parquet file as a run does gave."""

    table: pa.Table
    bad: list[BadRecord]
    splits: list[FileSplit]
    batch_rows: list[int]
    reader: ParquetFileSplitReader


def read_parquet_like_a_run(
    path: Path,
    fmt: dict[str, Any] | None = None,
    *,
    batch_size: int = 500,
    split_bytes: int = 64 << 20,
    first_only: bool = False,
) -> ParquetRead:
    """Reads ``path`` as a run does: the schema from the file's footer (or declared), the
    file cut into splits of its row groups, each split read batch by batch."""
    env = Environment(allowed_roots=(path.parent,), base_dir=path.parent, redis_url="redis://unused")
    config = FilesSourceConfig.parse({"path": str(path), "split_size_mb": split_bytes / (1 << 20)}, env)
    spec = validate_format(fmt or {"type": "parquet"})
    context = BuildContext(env=env, batch_size=batch_size, flow_name="parquet")
    source = FileSource.from_config(config, spec, context)
    schema = parse_ddl(spec.options["schema"]) if "schema" in spec.options else source.infer_schema()
    source = FileSource.from_config(config, spec, dataclasses.replace(context, schema=schema))
    source.check_input()
    splits = file_splits(str(path), os.stat(path), split_size=source.split_size, splittable=source.layout)
    reader = ParquetFileSplitReader(source.fmt, first_bad_record_only=first_only)  # type: ignore[arg-type]
    tables, bad, batch_rows = [], [], []
    for split in splits:
        finished = False
        while not finished:
            batch = reader.read_batch(split, batch_size)
            tables.append(batch.records)
            bad += batch.bad_records
            batch_rows.append(batch.records.num_rows)
            split, finished = split.at(batch.end.position), batch.finished
            if first_only and batch.bad_records:
                break
    reader.close()
    return ParquetRead(pa.concat_tables(tables), bad, splits, batch_rows, reader)


def orders(rows: int, start: int = 0) -> pd.DataFrame:
    ids = range(start, start + rows)
    return pd.DataFrame(
        {
            "id": pd.Series(ids, dtype="int64"),
            "customer": [f"customer-{i % 97}" for i in ids],
            "amount": [decimal.Decimal(i % 100_000) / 100 for i in ids],
            "ts": pd.to_datetime([1_767_225_600 + i for i in ids], unit="s", utc=True),
        }
    )


def write_orders(path: Path, frame: pd.DataFrame, *, row_group_rows: int) -> Path:
    table = pa.Table.from_pandas(frame, preserve_index=False).cast(
        pa.schema(
            [
                ("id", pa.int64()),
                ("customer", pa.string()),
                ("amount", pa.decimal128(12, 2)),
                ("ts", pa.timestamp("us", tz="UTC")),
            ]
        )
    )
    pq.write_table(table, path, row_group_size=row_group_rows)
    return path


def as_rows(frame: pd.DataFrame) -> list[dict[str, Any]]:
    return [{k: (None if v is pd.NaT else v) for k, v in row.items()} for row in frame.to_dict("records")]


def test_every_parquet_type_lands_as_the_type_a_user_expects_with_pandas_values(data):
    frame = pd.DataFrame(
        {
            "big": pd.Series([1, None, 3], dtype="Int64"),
            "small": pd.Series([1, 2, None], dtype="Int16"),
            "unsigned": pd.Series([1, 2**32 - 1, 0], dtype="uint32"),
            "ratio": pd.Series([0.5, None, 2.25], dtype="float32"),
            "flag": pd.Series([True, None, False], dtype="boolean"),
            "name": ["a", None, "ü"],
            "blob": [b"\x00\x01", None, b""],
            "local": pd.to_datetime(["2026-01-02 03:04:05.123456", None, "1999-12-31 23:59:59.000000"]),
            "instant": pd.to_datetime(["2026-01-02 03:04:05", None, "1970-01-01 00:00:00"]).tz_localize(
                "Europe/Paris"
            ),
            "day": [datetime.date(2026, 1, 2), None, datetime.date(1900, 5, 6)],
            "price": [decimal.Decimal("12.34"), None, decimal.Decimal("-0.01")],
            "color": pd.Categorical(["red", None, "blue"]),
            "tags": [["x", "y"], None, []],
            "at": [datetime.time(1, 2, 3), None, datetime.time(23, 59)],
        }
    )
    path = data / "types.parquet"
    frame.to_parquet(path)

    read = read_parquet_like_a_run(path)

    assert dict(zip(read.table.column_names, read.table.schema.types, strict=True)) == {
        "big": pa.int64(),
        "small": pa.int16(),
        "unsigned": pa.int64(),
        "ratio": pa.float32(),
        "flag": pa.bool_(),
        "name": pa.string(),
        "blob": pa.binary(),
        "local": pa.timestamp("us"),
        "instant": pa.timestamp("us", tz="UTC"),
        "day": pa.date32(),
        "price": pa.decimal128(4, 2),
        "color": pa.string(),
        "tags": pa.list_(pa.string()),
        "at": pa.string(),
    }
    expected = pd.read_parquet(path)
    got = read.table.to_pydict()
    for name in ("big", "small", "unsigned", "flag", "name", "blob", "price", "day"):
        assert got[name] == [None if pd.isna(v) else v for v in expected[name].astype(object)], name
    assert got["ratio"] == [0.5, None, 2.25]
    assert got["color"] == ["red", None, "blue"]
    assert got["tags"] == [["x", "y"], None, []]
    assert got["at"] == ["01:02:03.000000", None, "23:59:00.000000"]  # Spark has no TIME: its text
    assert [None if v is None else pd.Timestamp(v) for v in got["local"]] == [
        None if pd.isna(v) else v for v in expected["local"]
    ]
    assert [None if v is None else pd.Timestamp(v) for v in got["instant"]] == [
        None if pd.isna(v) else v.tz_convert("UTC") for v in expected["instant"]
    ]


@pytest.mark.parametrize("split_bytes", [1000, 20_000, 1 << 26])
def test_splits_cut_inside_a_file_of_many_row_groups_read_each_row_once(data, split_bytes):
    path = write_orders(data / "orders.parquet", orders(10_000), row_group_rows=700)

    read = read_parquet_like_a_run(path, batch_size=1000, split_bytes=split_bytes)

    assert len(read.splits) == -(-os.path.getsize(path) // split_bytes)
    assert read.table.to_pandas().to_dict("records") == as_rows(pd.read_parquet(path))


def test_a_batch_ends_after_a_whole_row_group_and_holds_at_most_the_batch_size(data):
    path = write_orders(data / "orders.parquet", orders(5000), row_group_rows=300)

    read = read_parquet_like_a_run(path, batch_size=1000)
    assert read.batch_rows == [900, 900, 900, 900, 900, 500]

    small = read_parquet_like_a_run(path, batch_size=1)
    assert small.table.num_rows == 5000
    assert set(small.batch_rows) == {300, 200}  # a row group of more rows than asked is not cut


def test_a_reader_restarted_from_a_checkpoint_resumes_at_the_next_row_group(data):
    path = write_orders(data / "orders.parquet", orders(3000), row_group_rows=1000)
    read = read_parquet_like_a_run(path, batch_size=1000)
    split = read.splits[0]
    first = ParquetFileSplitReader(read.reader.fmt).read_batch(split, 1000)
    second_group_start = row_group_start(pq.ParquetFile(path).metadata, 1)
    assert first.end.position == second_group_start

    # Another reader (a new process) takes the split at its checkpoint.
    rest = ParquetFileSplitReader(read.reader.fmt).read_batch(split.at(first.end.position), 5000)

    assert rest.finished
    assert rest.records.column("id").to_pylist() == list(range(1000, 3000))


def test_a_row_group_larger_than_a_reader_may_hold_fails_its_split_naming_it(data, monkeypatch):
    path = write_orders(data / "orders.parquet", orders(3000), row_group_rows=1000)
    sizes = [pq.ParquetFile(path).metadata.row_group(i).total_byte_size for i in range(3)]
    reader = ParquetFileSplitReader(read_parquet_like_a_run(path).reader.fmt)
    # The bound lowered under the file's row groups (the real one is 1 GiB).
    monkeypatch.setattr(parquet_reader, "MAX_ROW_GROUP_BYTES", min(sizes) - 1)

    with pytest.raises(SplitFailed, match=r"orders\.parquet row group 0 at byte 4: \d+ bytes uncompressed"):
        reader.read_batch(_whole(path), 1000)
    assert not reader.open, "the split's file is closed"


def test_a_declared_schema_reads_only_its_columns_and_one_that_disagrees_is_refused(data):
    path = write_orders(data / "orders.parquet", orders(100), row_group_rows=50)

    read = read_parquet_like_a_run(path, {"type": "parquet", "schema": "TS TIMESTAMP, id BIGINT"})
    assert read.table.column_names == ["TS", "id"]
    assert read.table.column("id").to_pylist() == list(range(100))

    with pytest.raises(
        ConfigError, match=r"format\.schema.*column 'id' is BIGINT in the Parquet schema .*not STRING"
    ):
        read_parquet_like_a_run(path, {"type": "parquet", "schema": "id STRING"})
    with pytest.raises(
        ConfigError, match=r"format\.schema.*column 'nope' is not a field of the Parquet schema"
    ):
        read_parquet_like_a_run(path, {"type": "parquet", "schema": "nope STRING"})


def test_a_declared_wider_type_reads_narrower_columns_and_a_narrower_one_is_refused(data):
    path = data / "narrow.parquet"
    narrow = pa.table(
        {
            "id": pa.array([1, 2], pa.int32()),
            "amount": pa.array([decimal.Decimal("1.50"), decimal.Decimal("-12.25")], pa.decimal128(4, 2)),
        }
    )
    pq.write_table(narrow, path)

    read = read_parquet_like_a_run(path, {"type": "parquet", "schema": "id BIGINT, amount DECIMAL(12,2)"})
    assert read.table.schema == pa.schema([("id", pa.int64()), ("amount", pa.decimal128(12, 2))])
    assert read.table.to_pydict() == {
        "id": [1, 2],
        "amount": [decimal.Decimal("1.50"), decimal.Decimal("-12.25")],
    }

    with pytest.raises(ConfigError, match=r"format\.schema.*'amount' is DECIMAL\(4,2\) .*not DECIMAL\(3,1\)"):
        read_parquet_like_a_run(path, {"type": "parquet", "schema": "amount DECIMAL(3,1)"})


def test_a_file_that_is_not_parquet_fails_naming_it(data):
    path = data / "not.parquet"
    path.write_text("id,name\n1,a\n")

    with pytest.raises(ValueError, match=r"not\.parquet: not a Parquet file"):
        read_parquet_like_a_run(path)
    split = FileSplit(str(path), 0, os.path.getsize(path), 0)
    with pytest.raises(ReadError, match=r"not\.parquet: not a Parquet file"):
        ParquetFileSplitReader(
            validate_format({"type": "parquet", "schema": "id BIGINT"}).build()
        ).read_batch(split, 10)  # type: ignore[arg-type]


def _reader_for(data: Path, first: Path, fmt: dict[str, Any]) -> ParquetFileSplitReader:
    env = Environment(allowed_roots=(data,), base_dir=data)
    config = FilesSourceConfig.parse({"path": str(first)}, env)
    source = FileSource.from_config(config, validate_format(fmt), BuildContext(env=env, batch_size=10))
    schema = source.infer_schema()
    assert schema is not None
    return ParquetFileSplitReader(source.fmt.with_schema(schema))  # type: ignore[union-attr, arg-type]


def _whole(path: Path) -> FileSplit:
    return FileSplit(str(path), 0, os.path.getsize(path), 0)


def test_a_later_file_with_a_new_and_a_missing_column_lands_as_the_policy_says(data):
    first = write_orders(data / "a.parquet", orders(10), row_group_rows=10)
    later = data / "b.parquet"
    pq.write_table(pa.table({"id": pa.array([7], pa.int64()), "coupon": ["SAVE"]}), later)

    with pytest.raises(SchemaDrift, match=r"column 'coupon'"):
        _reader_for(data, first, {"type": "parquet"}).read_batch(_whole(later), 10)

    evolved = _reader_for(data, first, {"type": "parquet", "on_schema_change": "evolve"}).read_batch(
        _whole(later), 10
    )
    assert evolved.records.to_pylist() == [
        {"id": 7, "customer": None, "amount": None, "ts": None, "coupon": "SAVE"}
    ]
    assert {(c.column, c.kind) for c in evolved.schema_changes} >= {("coupon", "added")}

    rescued = _reader_for(data, first, {"type": "parquet", "on_schema_change": "rescue"}).read_batch(
        _whole(later), 10
    )
    assert rescued.records.column("_rescued").to_pylist() == ['{"coupon": "SAVE"}']


def test_a_later_file_whose_column_has_another_type_fails_its_split_naming_it(data):
    first = write_orders(data / "a.parquet", orders(10), row_group_rows=10)
    later = data / "b.parquet"
    pq.write_table(pa.table({"id": ["x"], "customer": ["c"]}), later)

    with pytest.raises(SchemaDrift, match=r"'id' holds a STRING value, not BIGINT"):
        _reader_for(data, first, {"type": "parquet"}).read_batch(_whole(later), 10)
    declared = ParquetFileSplitReader(
        validate_format({"type": "parquet", "schema": "id BIGINT, customer STRING"}).build()  # type: ignore[arg-type]
    )
    with pytest.raises(ReadError, match=r"b\.parquet: its Parquet schema does not fit.*'id' is STRING"):
        declared.read_batch(_whole(later), 10)


def _corrupt_row_group(path: Path, index: int) -> int:
    """Overwrites the pages of row group ``index`` with garbage; returns where it starts."""
    metadata = pq.ParquetFile(path).metadata
    start = row_group_start(metadata, index)
    group = metadata.row_group(index)
    end = start + sum(group.column(c).total_compressed_size for c in range(group.num_columns))
    data = bytearray(path.read_bytes())
    data[start:end] = b"\xff" * (end - start)
    path.write_bytes(bytes(data))
    return start


def test_a_corrupt_row_group_is_a_bad_record_at_its_offset_and_the_rest_is_read(data):
    path = write_orders(data / "orders.parquet", orders(3000), row_group_rows=1000)
    offset = _corrupt_row_group(path, 1)

    read = read_parquet_like_a_run(path, batch_size=1000)

    assert [b.position for b in read.bad] == [offset]
    assert "row group 1 cannot be read" in read.bad[0].reason
    assert read.table.column("id").to_pylist() == [*range(1000), *range(2000, 3000)]
    stopped = read_parquet_like_a_run(path, batch_size=1000, first_only=True)
    assert [b.position for b in stopped.bad] == [offset]
    assert stopped.reader.describe(stopped.splits[0], offset) == f"{path} row group at byte {offset}"


def test_parquet_is_refused_for_a_stream_source_and_its_options_are_checked(env):
    with pytest.raises(ConfigError, match=r"format\.type: parquet reads Parquet files"):
        validate_format({"type": "parquet"}).build(entries=True)
    with pytest.raises(ConfigError, match=r"format\.header: is not an option of parquet"):
        validate_format({"type": "parquet", "header": True})
    with pytest.raises(ConfigError, match=r"format\.on_schema_change: must be one of|unknown policy"):
        validate_format({"type": "parquet", "on_schema_change": "merge"})
    with pytest.raises(ConfigError, match=r"format\.schema"):
        validate_format({"type": "parquet", "schema": "id NOPE"})


ROW_SCHEMA = pa.schema([("id", pa.int64()), ("split", pa.int64()), ("text", pa.string())])


class ParquetFilesContext(FilesContext):
    """Split i is a Parquet file of row groups of two rows each."""

    def __init__(self, root, **options):
        super().__init__(root, **options)
        self.format, self.suffix = (
            FormatSpec("parquet", {"schema": "id BIGINT, split BIGINT, text STRING"}),
            "parquet",
        )

    def write_file(self, path, records):
        table = pa.Table.from_pylist([{c: r[c] for c in COLUMNS} for r in records], schema=ROW_SCHEMA)
        pq.write_table(table, path, row_group_size=2)

    def write_bad_file(self, path, split_index):
        """A file of one row group whose pages are garbage: the bad record is the row group."""
        rows = [{"id": i, "split": split_index, "text": "bad"} for i in range(3)]
        pq.write_table(pa.Table.from_pylist(rows, schema=ROW_SCHEMA), path)
        _corrupt_row_group(path, 0)


class TestParquetFilesConformance(SourceConformanceSuite):
    @pytest.fixture()
    def external_context(self, tmp_path):
        return ParquetFilesContext(tmp_path)
