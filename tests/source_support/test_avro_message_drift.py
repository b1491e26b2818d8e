"""format.on_schema_change for Avro messages framed for a schema registry: each message
names its writer's schema, which may add, lack or retype a field of writer_schema's; each
is read with its own writer's schema and settled as a container file's is. The landed
records are compared with what fastavro reads from each body, the policy applied by hand."""

from __future__ import annotations

import io
import json
import struct

import fastavro
import pytest

from source_support.errors import ConfigError
from source_support.formats import FormatSpec, validate_format
from source_support.formats.drift import SchemaDrift
from tests.source_support.test_avro import _Registry, registry  # noqa: F401 - the fixture

BASE = {
    "type": "record",
    "name": "Reading",
    "fields": [{"name": "id", "type": "long"}, {"name": "sensor", "type": "string"}],
}
WITH_REGION = {**BASE, "fields": [*BASE["fields"], {"name": "region", "type": "string"}]}
NO_SENSOR = {**BASE, "fields": BASE["fields"][:1]}
SENSOR_AS_INT = {**BASE, "fields": [BASE["fields"][0], {"name": "sensor", "type": "int"}]}
WRITERS = {1: BASE, 2: WITH_REGION, 3: NO_SENSOR, 4: SENSOR_AS_INT}
CASTS = {"id": int, "sensor": str}


def framed(schema_id: int, record: dict) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(WRITERS[schema_id]), record)
    return b"\x00" + struct.pack(">I", schema_id) + out.getvalue()


def messages() -> list[bytes]:
    return [
        framed(1, {"id": 1, "sensor": "a"}),
        framed(2, {"id": 2, "sensor": "b", "region": "eu"}),
        framed(3, {"id": 3}),
        framed(1, {"id": 4, "sensor": "d"}),
        framed(4, {"id": 5, "sensor": 7}),
    ]


def by_hand(policy: str, bodies: list[bytes]) -> list[dict]:
    """Each body as fastavro reads it with its writer's schema, the policy applied."""
    rows = []
    for body in bodies:
        writer = WRITERS[struct.unpack(">I", body[1:5])[0]]
        record = fastavro.schemaless_reader(io.BytesIO(body[5:]), fastavro.parse_schema(writer), None)
        assert isinstance(record, dict)
        row: dict = {}
        rescued: dict = {}
        for name, cast in CASTS.items():
            value = record.get(name)
            if value is not None and not isinstance(value, cast):
                row[name], rescued[name] = None, json.dumps(value)
            else:
                row[name] = value
        extra = {k: v for k, v in record.items() if k not in CASTS}
        if policy == "evolve":
            row["region"] = extra.get("region")
        if policy == "rescue":
            rescued.update(extra)
            row["_rescued"] = json.dumps(rescued, sort_keys=True) if rescued else None
        rows.append(row)
    return rows


def _format(registry, policy: str | None):  # noqa: F811 - the fixture
    _Registry.schemas = dict(WRITERS)
    table = {
        "type": "avro",
        "writer_schema": json.dumps(BASE),
        "registry_url": f"http://127.0.0.1:{registry.server_port}",
    }
    if policy is not None:
        table["on_schema_change"] = policy
    return validate_format(table).build(entries=True)


@pytest.mark.parametrize("policy", ["rescue", "ignore"])
def test_messages_of_drifting_writers_land_in_order_as_the_policy_says(registry, policy):  # noqa: F811 - the fixture
    fmt = _format(registry, policy)

    table, bad = fmt.decode_batch(messages())

    assert bad == {}
    assert table.to_pylist() == by_hand(policy, messages())
    assert [(c.column, c.kind, c.old_type, c.new_type, c.position, c.records) for c in fmt.drift_seen] == [
        ("region", "added", "", "STRING", 1, 1),
        ("sensor", "missing", "STRING", "", 2, 1),
        ("sensor", "retyped", "STRING", "INT", 4, 1),
    ]


def test_evolve_adds_the_new_field_and_fails_on_a_retyped_one(registry):  # noqa: F811 - the fixture
    fmt = _format(registry, "evolve")

    table, _ = fmt.decode_batch(messages()[:4])
    with pytest.raises(SchemaDrift, match="the column 'sensor' holds a INT value, not STRING") as failed:
        fmt.decode_batch(messages())

    assert table.to_pylist() == by_hand("evolve", messages()[:4])
    assert failed.value.change.position == 4


def test_fail_fails_at_the_first_message_whose_writer_adds_a_field(registry):  # noqa: F811 - the fixture
    with pytest.raises(SchemaDrift, match="a new column 'region'") as failed:
        _format(registry, "fail").decode_batch(messages())

    assert failed.value.change.position == 1


def test_without_the_option_messages_are_resolved_to_writer_schema_as_before(registry):  # noqa: F811 - the fixture
    fmt = _format(registry, None)

    table, bad = fmt.decode_batch(messages()[:4])

    assert table.to_pylist() == [{"id": 1, "sensor": "a"}, {"id": 2, "sensor": "b"}, {"id": 4, "sensor": "d"}]
    assert list(bad) == [2] and fmt.drift_seen == []  # no default for sensor: not resolvable


def test_the_option_without_a_registry_is_refused_naming_why():
    spec = FormatSpec("avro", {"writer_schema": json.dumps(BASE), "on_schema_change": "rescue"})

    with pytest.raises(ConfigError, match="format.on_schema_change: .*without registry_url every message"):
        spec.build(entries=True)
