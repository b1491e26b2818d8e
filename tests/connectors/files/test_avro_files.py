"""Avro container files read by the files source: every type, nulls and nesting, codecs and
block sizes, splits cut inside a multi-block file, a corrupt block, a declared schema that
disagrees, and the conformance kit; compared value by value with ``fastavro.reader``."""

from __future__ import annotations

import io
import json
import os

import fastavro
import pyarrow as pa
import pytest

from connectors.files.avro_reader import AvroFileSplitReader
from connectors.files.config import FilesSourceConfig
from connectors.files.source import FileSource
from connectors.files.split import FileSplit
from source_support.errors import ConfigError
from source_support.formats import FormatSpec, ReadError, validate_format
from source_support.formats.drift import SchemaDrift
from source_support.registry import BuildContext, Environment
from source_support.testing.suite import SourceConformanceSuite
from tests.connectors.files.avro_data import (
    EVERY_TYPE_SCHEMA,
    every_type_record,
    expected_rows,
    fastavro_records,
    flights,
    read_avro_like_a_run,
    write_container,
)
from tests.connectors.files.test_conformance import COLUMNS, FilesContext

EVERY_TYPE_COLUMNS = {
    "id": pa.int64(),
    "flag": pa.bool_(),
    "small": pa.int32(),
    "ratio": pa.float32(),
    "ts_ms": pa.timestamp("us", tz="UTC"),
    "ts_us": pa.timestamp("us", tz="UTC"),
    "local_ts": pa.timestamp("us"),
    "day": pa.date32(),
    "t_ms": pa.int32(),
    "t_us": pa.int64(),
    "price": pa.decimal128(10, 2),
    "fixed_price": pa.decimal128(18, 4),
    "color": pa.string(),
    "key": pa.string(),
    "digest": pa.binary(),
    "blob": pa.binary(),
    "tags": pa.list_(pa.string()),
    "scores": pa.map_(pa.string(), pa.float64()),
    "wide": pa.int64(),
}


@pytest.fixture(scope="module")
def flight_data():
    return flights(20_000)


def test_every_avro_type_lands_as_the_type_a_user_expects(data):
    path = write_container(data / "all.avro", EVERY_TYPE_SCHEMA, [every_type_record(i) for i in range(300)])

    read = read_avro_like_a_run(path)

    types = dict(zip(read.table.schema.names, read.table.schema.types, strict=True))
    assert {name: types[name] for name in EVERY_TYPE_COLUMNS} == EVERY_TYPE_COLUMNS
    address = pa.struct([("city", pa.string()), ("zip", pa.int32()), ("seen", pa.list_(pa.int32()))])
    assert types["address"] == address and types["home"] == address
    assert types["either"] == pa.struct(
        [
            ("member0", pa.string()),
            ("member1", pa.int64()),
            ("member2", pa.struct([("x", pa.int32())])),
            ("member3", pa.struct([("text", pa.string())])),
        ]
    )
    assert read.bad == []
    assert read.table.to_pylist() == expected_rows(EVERY_TYPE_SCHEMA, fastavro_records(path))


@pytest.mark.parametrize(
    ("codec", "sync_interval"), [("null", 16000), ("deflate", 4000), ("snappy", 1000), ("deflate", 200_000)]
)
@pytest.mark.slow
def test_public_flights_read_as_fastavro_reads_them_with_each_codec(data, flight_data, codec, sync_interval):
    schema, records = flight_data
    path = write_container(data / "flights.avro", schema, records, codec=codec, sync_interval=sync_interval)

    read = read_avro_like_a_run(path, batch_size=3000)

    assert read.table.to_pylist() == expected_rows(schema, fastavro_records(path))
    assert read.table.schema.field("origin").type == pa.string()  # an enum
    assert read.table.schema.field("time_hour").type == pa.timestamp("us", tz="UTC")
    assert read.table.column("dep_time").null_count == sum(r["dep_time"] is None for r in records) > 0


@pytest.mark.parametrize("split_bytes", [997, 4096, 50_000])
@pytest.mark.slow
def test_splits_cut_inside_a_multi_block_file_read_each_record_once(data, flight_data, split_bytes):
    schema, records = flight_data
    path = write_container(data / "flights.avro", schema, records, codec="deflate", sync_interval=2000)

    read = read_avro_like_a_run(path, batch_size=700, split_mb=split_bytes / (1 << 20))

    assert len(read.splits) == -(-os.path.getsize(path) // split_bytes) > 1
    assert read.table.to_pylist() == expected_rows(schema, fastavro_records(path))


@pytest.mark.slow
def test_a_batch_ends_after_a_whole_block_and_holds_at_most_the_batch_size(data, flight_data):
    schema, records = flight_data
    path = write_container(data / "flights.avro", schema, records[:5000], sync_interval=1000)

    read = read_avro_like_a_run(path, batch_size=100)

    assert read.table.num_rows == 5000
    assert read.batches > 5000 // 100  # blocks of ~15 records do not fill batches exactly
    small = read_avro_like_a_run(path, batch_size=1)
    assert small.table.num_rows == 5000  # a block of more records than asked is not cut


def _corrupt_middle_block(path):
    """Flips the bytes of the middle block's records; returns its offset and the range of
    the records it held."""
    with open(path, "rb") as f:
        blocks = [(b.offset, b.size, b.num_records) for b in fastavro.block_reader(f)]
    middle = len(blocks) // 2
    offset, size, count = blocks[middle]
    data = bytearray(path.read_bytes())
    for i in range(offset + 4, offset + size - 16):
        data[i] ^= 0x5A
    path.write_bytes(bytes(data))
    first = sum(n for _, _, n in blocks[:middle])
    return offset, range(first, first + count)


@pytest.mark.slow
def test_a_corrupt_block_is_a_bad_record_at_its_offset_and_the_rest_is_read(data, flight_data):
    schema, records = flight_data
    path = write_container(data / "flights.avro", schema, records[:3000], codec="deflate", sync_interval=2000)
    expected = expected_rows(schema, fastavro_records(path))
    offset, lost = _corrupt_middle_block(path)

    read = read_avro_like_a_run(path, batch_size=400)

    assert [b.position for b in read.bad] == [offset]
    assert "corrupt block" in read.bad[0].reason
    assert read.table.to_pylist() == expected[: lost.start] + expected[lost.stop :]


def test_a_corrupt_block_fails_the_split_naming_file_and_offset(data, flight_data):
    schema, records = flight_data
    path = write_container(data / "flights.avro", schema, records[:3000], codec="deflate", sync_interval=2000)
    offset, _ = _corrupt_middle_block(path)

    read = read_avro_like_a_run(path, batch_size=400, first_only=True)

    assert [b.position for b in read.bad] == [offset]
    where = read.reader.describe(read.splits[0], offset)
    assert where == f"{path} block at byte {offset}"


def test_a_file_that_is_not_avro_fails_naming_it(data):
    path = data / "not.avro"
    path.write_text("id,name\n1,a\n")

    with pytest.raises(ValueError, match=r"not\.avro.*not an Avro object container file"):
        read_avro_like_a_run(path)


def test_a_declared_schema_selects_columns_and_one_that_disagrees_is_refused(data, flight_data):
    schema, records = flight_data
    path = write_container(data / "flights.avro", schema, records[:100])

    read = read_avro_like_a_run(path, {"type": "avro", "schema": "carrier STRING, time_hour TIMESTAMP"})
    assert read.table.column_names == ["carrier", "time_hour"]
    assert read.table.column("carrier").to_pylist() == [r["carrier"] for r in records[:100]]

    with pytest.raises(ConfigError, match=r"format\.schema.*column 'flight' is BIGINT .*not STRING"):
        read_avro_like_a_run(path, {"type": "avro", "schema": "flight STRING"})
    with pytest.raises(ConfigError, match=r"format\.schema.*column 'nope' is not a field"):
        read_avro_like_a_run(path, {"type": "avro", "schema": "nope STRING"})


def test_a_later_file_whose_schema_lacks_a_run_column_fails_its_split(data, flight_data):
    schema, records = flight_data
    first = write_container(data / "a.avro", schema, records[:10])
    other = {"type": "record", "name": "Other", "fields": [{"name": "year", "type": "string"}]}
    path = write_container(data / "b.avro", other, [{"year": "x"}])
    env = Environment(allowed_roots=(data,), base_dir=data)
    config = FilesSourceConfig.parse({"path": str(first)}, env)
    source = FileSource.from_config(
        config, validate_format({"type": "avro"}), BuildContext(env=env, batch_size=10)
    )
    reader = AvroFileSplitReader(source.fmt.with_schema(source.infer_schema()))

    # Left out, on_schema_change is fail where the columns are the first file's.
    with pytest.raises(SchemaDrift, match=r"the column 'year' holds a STRING value, not INT"):
        reader.read_batch(FileSplit(str(path), 0, os.path.getsize(path), 0), 100)


def test_writer_schema_and_registry_url_are_refused_for_files(data, env):
    config = FilesSourceConfig.parse({"path": str(data)}, env)
    context = BuildContext(env=env, batch_size=10)
    for name, value in (
        ("writer_schema", '{"type": "record", "name": "R", "fields": []}'),
        ("registry_url", "http://x"),
    ):
        with pytest.raises(ConfigError, match=rf"format\.{name}: applies to Avro messages"):
            FileSource.from_config(config, FormatSpec("avro", {name: value}), context)


ROW_SCHEMA = {
    "type": "record",
    "name": "Row",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "split", "type": "long"},
        {"name": "text", "type": "string"},
    ],
}


class AvroFilesContext(FilesContext):
    """Split i is an Avro container file of blocks of a few records each."""

    def __init__(self, root, **options):
        super().__init__(root, **options)
        self.format, self.suffix = (
            FormatSpec("avro", {"schema": "id BIGINT, split BIGINT, text STRING"}),
            "avro",
        )

    def write_file(self, path, records):
        write_container(path, ROW_SCHEMA, [{c: r[c] for c in COLUMNS} for r in records], sync_interval=40)

    def write_bad_file(self, path, split_index):
        """A file of one block whose records are corrupt: the bad record is the block."""
        self.write_file(path, [{"id": i, "split": split_index, "text": "bad"} for i in range(3)])
        _corrupt_middle_block(path)


class TestAvroFilesConformance(SourceConformanceSuite):
    @pytest.fixture()
    def external_context(self, tmp_path):
        return AvroFilesContext(tmp_path)


def test_a_codec_whose_package_is_not_installed_fails_the_split_naming_it(data):
    # zstandard is not installed here (fastavro reads it only with the zstandard package):
    # a header that names it, written by hand, then one block.
    header_schema = {
        "type": "record",
        "name": "Header",
        "fields": [
            {"name": "magic", "type": {"type": "fixed", "name": "Magic", "size": 4}},
            {"name": "meta", "type": {"type": "map", "values": "bytes"}},
            {"name": "sync", "type": {"type": "fixed", "name": "Sync", "size": 16}},
        ],
    }
    schema = {"type": "record", "name": "R", "fields": [{"name": "a", "type": "long"}]}
    sync = bytes(range(16))
    out = io.BytesIO()
    meta = {"avro.schema": json.dumps(schema).encode(), "avro.codec": b"zstandard"}
    fastavro.schemaless_writer(
        out, fastavro.parse_schema(header_schema), {"magic": b"Obj\x01", "meta": meta, "sync": sync}
    )
    out.write(b"\x02\x06abc" + sync)  # one record, three bytes of data
    path = data / "z.avro"
    path.write_bytes(out.getvalue())

    with pytest.raises(ReadError, match="codec zstandard cannot be read here: .*install"):
        read_avro_like_a_run(path)
