"""The avro format of messages: single-object encoding, plain binary bodies and a schema
registry's framing (a real HTTP registry started here), bad bodies, and the validation of
``writer_schema`` and a declared schema."""

from __future__ import annotations

import io
import json
import struct
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import fastavro
import pyarrow as pa
import pytest

from source_support.errors import ConfigError
from source_support.formats import AvroFormat, BadMessage, FormatSpec, validate_format
from source_support.formats.avro import single_object_fingerprint
from source_support.registry import Environment, connector_catalog
from tests.connectors.files.avro_data import EVERY_TYPE_SCHEMA, every_type_record, expected_rows

READING = {
    "type": "record",
    "name": "Reading",
    "namespace": "sensors",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "sensor", "type": ["null", "string"]},
        {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    ],
}


def plain(schema, record) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), record)
    return out.getvalue()


def single_object(schema, record) -> bytes:
    return b"\xc3\x01" + single_object_fingerprint(schema) + plain(schema, record)


def avro_format(writer=READING, **options) -> AvroFormat:
    fmt = FormatSpec("avro", {"writer_schema": json.dumps(writer), **options}).build(entries=True)
    assert isinstance(fmt, AvroFormat)
    return fmt


def test_the_single_object_fingerprint_is_crc_64_avro_little_endian():
    # The Avro specification's test vector: the schema "null" has fingerprint 7195948357588979594.
    assert single_object_fingerprint("null") == struct.pack("<q", 7195948357588979594)


def test_single_object_and_plain_bodies_decode_to_records_of_every_type():
    fmt = avro_format(EVERY_TYPE_SCHEMA)
    records = [every_type_record(i) for i in range(40)]
    bodies = [(single_object if i % 2 else plain)(EVERY_TYPE_SCHEMA, r) for i, r in enumerate(records)]

    table, bad = fmt.decode_batch(bodies)

    assert bad == {}
    decoded = [
        fastavro.schemaless_reader(
            io.BytesIO(plain(EVERY_TYPE_SCHEMA, r)),
            EVERY_TYPE_SCHEMA,
            None,
            return_record_name=True,
            return_record_name_override=True,
        )
        for r in records
    ]
    assert table.to_pylist() == expected_rows(EVERY_TYPE_SCHEMA, decoded)


def test_one_body_decodes_to_one_record_for_other_stream_connectors():
    fmt = avro_format()

    record = fmt.decode(single_object(READING, {"id": 7, "sensor": None, "ts": 1_700_000_000_000}))

    assert record["id"] == 7 and record["sensor"] is None
    assert record["ts"].isoformat() == "2023-11-14T22:13:20+00:00"


def test_bad_bodies_are_reported_by_index_with_the_reason():
    fmt = avro_format()
    good = plain(READING, {"id": 1, "sensor": "a", "ts": 0})
    other_schema = {
        "type": "record",
        "name": "X",
        "fields": [{"name": "a", "type": "string"}, {"name": "b", "type": "string"}],
    }

    table, bad = fmt.decode_batch(
        [good, b"", None, good[:3], good + b"\x00\x02", plain(other_schema, {"a": "x" * 30, "b": "y"})]
    )

    assert table.column("id").to_pylist() == [1]
    assert bad[1] == "the message body is empty"
    assert bad[2] == "the message has no body"
    assert "not an Avro record of the declared schema" in bad[3]
    assert "2 bytes left after the record" in bad[4]
    assert 5 in bad
    empty, first = fmt.decode_batch([good, b"", None], first_only=True)
    assert empty.num_rows == 0 and list(first) == [1]


class _Registry(BaseHTTPRequestHandler):
    schemas: dict[int, dict] = {}

    def do_GET(self):  # noqa: N802 - http.server's name
        parts = self.path.strip("/").split("/")
        if parts[:2] == ["schemas", "ids"] and int(parts[2]) in self.schemas:
            body = json.dumps({"schema": json.dumps(self.schemas[int(parts[2])])}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        else:
            self.send_error(404)

    def log_message(self, *args):
        pass


@pytest.fixture()
def registry():
    """A Confluent-style schema registry over real HTTP on a free loopback port."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Registry)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def confluent(schema_id, schema, record) -> bytes:
    return b"\x00" + struct.pack(">I", schema_id) + plain(schema, record)


def test_registry_framed_messages_are_resolved_to_the_declared_schema(registry):
    older = {**READING, "fields": READING["fields"][:1] + READING["fields"][2:]}  # no sensor yet
    newer = {**READING, "fields": [*READING["fields"], {"name": "extra", "type": "int", "default": 0}]}
    _Registry.schemas = {1: older, 2: newer}
    declared = {
        **READING,
        "fields": [
            READING["fields"][0],
            {"name": "sensor", "type": ["null", "string"], "default": None},
            READING["fields"][2],
        ],
    }
    url = f"http://127.0.0.1:{registry.server_port}"
    fmt = avro_format(declared, registry_url=url)

    table, bad = fmt.decode_batch(
        [
            confluent(1, older, {"id": 1, "ts": 0}),
            confluent(2, newer, {"id": 2, "sensor": "b", "ts": 1000, "extra": 5}),
            confluent(3, older, {"id": 3, "ts": 0}),
            plain(declared, {"id": 4, "sensor": None, "ts": 0}),
        ]
    )

    assert table.column("id").to_pylist() == [1, 2]
    assert table.column("sensor").to_pylist() == [None, "b"]
    assert table.column_names == ["id", "sensor", "ts"]
    assert bad == {
        2: "schema id 3 is not in the schema registry",
        3: "not in the schema registry's framing (a zero byte, then a 4-byte schema id)",
    }


def test_writer_schema_from_a_file_under_the_roots_and_one_outside_refused(tmp_path):
    inside, outside = tmp_path / "data", tmp_path / "elsewhere"
    inside.mkdir(), outside.mkdir()
    (inside / "reading.avsc").write_text(json.dumps(READING))
    (outside / "reading.avsc").write_text(json.dumps(READING))
    env = Environment(allowed_roots=(inside,), base_dir=tmp_path)

    spec = validate_format({"type": "avro", "writer_schema": "data/reading.avsc"}, env)
    fmt = spec.build(entries=True, env=env)
    assert isinstance(fmt, AvroFormat) and fmt.known_schema.names == ["id", "sensor", "ts"]

    with pytest.raises(
        ConfigError, match=r"format\.writer_schema: .*elsewhere/reading\.avsc is outside the allowed roots"
    ):
        validate_format({"type": "avro", "writer_schema": "elsewhere/reading.avsc"}, env)
    with pytest.raises(ConfigError, match=r"format\.writer_schema: .*outside the allowed roots"):
        FormatSpec("avro", {"writer_schema": str(outside / "reading.avsc")}).build(entries=True, env=env)
    with pytest.raises(ConfigError, match=r"format\.writer_schema: cannot read"):
        validate_format({"type": "avro", "writer_schema": "data/missing.avsc"}, env)


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"writer_schema": "{not json"}, r"format\.writer_schema: is not JSON"),
        ({"writer_schema": '"string"'}, r"format\.writer_schema: is not an Avro record schema"),
        (
            {"writer_schema": '{"type": "record", "name": "R", "fields": [{"name": "a", "type": "nope"}]}'},
            r"format\.writer_schema: is not an Avro record schema",
        ),
        (
            {"writer_schema": json.dumps(READING), "schema": "id STRING"},
            r"format\.schema: column 'id' is BIGINT .*not STRING",
        ),
        (
            {"writer_schema": json.dumps(READING), "schema": "other BIGINT"},
            r"format\.schema: column 'other' is not a field",
        ),
        ({"registry_url": "ftp://x"}, r"format\.registry_url: must be an http"),
    ],
)
def test_bad_avro_options_are_refused_naming_the_field(table, message):
    with pytest.raises(ConfigError, match=message):
        validate_format({"type": "avro", **table})


def test_a_declared_schema_selects_the_columns_of_messages():
    fmt = avro_format(schema="ts TIMESTAMP, id BIGINT")

    table, _ = fmt.decode_batch([plain(READING, {"id": 3, "sensor": "x", "ts": 0})])

    assert table.schema == pa.schema([("ts", pa.timestamp("us", tz="UTC")), ("id", pa.int64())])


def test_a_stream_source_needs_writer_schema():
    with pytest.raises(ConfigError, match=r"format\.writer_schema: is required to read Avro messages"):
        FormatSpec("avro", {}).build(entries=True)


def test_a_recursive_record_is_refused_naming_the_field():
    linked = {"type": "record", "name": "Node", "fields": [{"name": "next", "type": ["null", "Node"]}]}
    with pytest.raises(ConfigError, match=r"format\.writer_schema: .*field 'next' is a recursive record"):
        validate_format({"type": "avro", "writer_schema": json.dumps(linked)})


def test_the_catalog_lists_avro_with_its_options():
    entry = next(e for e in connector_catalog()["formats"] if e["type"] == "avro")

    assert set(entry["schema"]["properties"]) == {
        "type",
        "schema",
        "writer_schema",
        "registry_url",
        "field",
        "on_schema_change",
    }
    assert entry["schema"]["properties"]["registry_url"]["writeOnly"] is True


def test_bad_message_is_a_value_error():
    assert issubclass(BadMessage, ValueError)
