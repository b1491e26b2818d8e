"""format.on_schema_change for ``fields`` (the field/value pairs of Redis stream entries):
entries that gain a field or hold a value of another type, read by the real split reader
under each policy; what lands is compared with the entries as Redis returns them, the
policy applied here by hand."""

from __future__ import annotations

import json

import pytest

from connectors.redis_streams.split import StreamSplit, encode_id
from source_support.errors import SplitFailed
from tests.connectors.redis_streams.conftest import build_source
from tests.connectors.redis_streams.test_reader import reader_of
from tests.source_support.fakes import RecordingReaderContext

SCHEMA = "id BIGINT, customer STRING"
CASTS = {"id": int, "customer": str}


def _entries(rds, key: str) -> list[bytes]:
    """Orders; the third gains a field ``coupon``, the fourth lacks ``customer`` and the
    fifth holds an ``id`` that is not a number."""
    values = [
        {"id": 1, "customer": "a"},
        {"id": 2, "customer": "b"},
        {"id": 3, "customer": "c", "coupon": "K3"},
        {"id": 4},
        {"id": "five", "customer": "e"},
    ]
    return [rds.xadd(key, v) for v in values]


def by_hand(policy: str, rds, key: str) -> list[dict]:
    """The entries as Redis returns them (XRANGE), the policy applied to each."""
    rows = []
    for _, fields in rds.xrange(key):
        record = {k.decode(): v.decode() for k, v in fields.items()}
        row: dict = {}
        rescued: dict = {}
        for name, cast in CASTS.items():
            text = record.get(name)
            try:
                row[name] = None if text is None else cast(text)
            except ValueError:
                row[name], rescued[name] = None, text
        extra = {k: v for k, v in record.items() if k not in CASTS}
        if policy == "evolve":
            row["coupon"] = extra.get("coupon")
        if policy == "rescue":
            rescued.update(extra)
            row["_rescued"] = json.dumps(rescued, sort_keys=True) if rescued else None
        rows.append(row)
    return rows


def _read(env, prefix: str, policy: str):
    reader = reader_of(
        env, {"streams": f"{prefix}o"}, {"type": "fields", "schema": SCHEMA, "on_schema_change": policy}
    )
    reader.handle_splits_changes([StreamSplit(f"{prefix}o", 0)], [])
    [batch] = reader.fetch(100, 0)
    return batch


@pytest.mark.parametrize("policy", ["rescue", "ignore"])
def test_a_new_field_and_a_value_of_another_type_land_as_the_policy_says(rds, prefix, env, policy):
    ids = _entries(rds, f"{prefix}o")

    batch = _read(env, prefix, policy)

    assert batch.records.to_pylist() == by_hand(policy, rds, f"{prefix}o")
    assert batch.bad_records == []
    assert [(c.column, c.kind, c.old_type, c.position, c.records) for c in batch.schema_changes] == [
        ("coupon", "added", "", encode_id(ids[2]), 1),
        ("id", "retyped", "BIGINT", encode_id(ids[4]), 1),
    ]


def test_evolve_adds_the_new_field_and_a_value_of_another_type_is_a_bad_record(rds, prefix, env):
    ids = _entries(rds, f"{prefix}o")

    batch = _read(env, prefix, "evolve")

    assert batch.records.to_pylist() == by_hand("evolve", rds, f"{prefix}o")[:4]
    assert [(b.position, b.reason) for b in batch.bad_records] == [
        (encode_id(ids[4]), "field 'id': invalid value 'five' for BIGINT")
    ]
    assert [(c.column, c.kind) for c in batch.schema_changes] == [("coupon", "added")]


def test_fail_fails_the_split_at_the_entry_with_the_new_field(rds, prefix, env):
    ids = _entries(rds, f"{prefix}o")

    with pytest.raises(SplitFailed) as failed:
        _read(env, prefix, "fail")

    assert str(failed.value).startswith(f"stream {prefix}o entry {ids[2].decode()}: schema changed:")
    assert "a new column 'coupon' (STRING)" in str(failed.value)
    [change] = failed.value.schema_changes
    assert (change.column, change.kind, change.policy) == ("coupon", "added", "fail")
    assert (change.position, change.where) == (encode_id(ids[2]), f"stream {prefix}o entry {ids[2].decode()}")


def test_without_the_option_a_declared_schema_ignores_other_fields_as_before(rds, prefix, env):
    _entries(rds, f"{prefix}o")
    reader = reader_of(env, {"streams": f"{prefix}o"}, {"type": "fields", "schema": SCHEMA})
    reader.handle_splits_changes([StreamSplit(f"{prefix}o", 0)], [])

    [batch] = reader.fetch(100, 0)

    assert batch.records.column_names == ["id", "customer"] and batch.schema_changes == []
    assert len(batch.bad_records) == 1


def test_an_inferred_schema_fails_on_a_new_field_by_default(rds, prefix, env):
    rds.xadd(f"{prefix}o", {"id": 1})
    inferred = build_source(env, {"streams": f"{prefix}o"}, {"type": "fields"}).infer_schema()
    source = build_source(env, {"streams": f"{prefix}o"}, {"type": "fields"}, schema=inferred)
    reader = source.create_reader(RecordingReaderContext()).split_reader
    rds.xadd(f"{prefix}o", {"id": 2, "extra": "x"})
    reader.handle_splits_changes([StreamSplit(f"{prefix}o", 0)], [])

    with pytest.raises(SplitFailed, match="a new column 'extra'"):
        reader.fetch(100, 0)
