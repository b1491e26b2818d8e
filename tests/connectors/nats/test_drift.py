"""``format.on_schema_change`` on a real NATS stream: a message that gains a column fails
its split under ``fail``, naming the column and the message's stream sequence, and is
landed and reported at that sequence under ``evolve``."""

from __future__ import annotations

import json

import pytest

from connectors.nats.split import SubjectSplit
from source_support.errors import SplitFailed
from tests.connectors.nats.test_reader import fetch_until, reader_of, stream  # noqa: F401 - the fixture

FORMAT = {"type": "json", "schema": "id BIGINT, customer STRING"}


def _publish(stream) -> int:  # noqa: F811 - the fixture's value
    """Two orders, then one that gains ``region``; the sequence of that one."""
    stream.orders("a", range(2))
    return stream.publish("a", json.dumps({"id": 2, "customer": "c2", "region": "eu"}).encode())


def test_a_message_gaining_a_column_fails_its_split_under_fail_naming_column_and_sequence(env, stream):  # noqa: F811
    seq = _publish(stream)
    reader = reader_of(env, stream, {**FORMAT, "on_schema_change": "fail"})
    reader.handle_splits_changes([SubjectSplit(stream.name, stream.subject("a"), 0)], [])

    with pytest.raises(SplitFailed) as failed:
        fetch_until(reader, lambda b: sum(x.records.num_rows for x in b) >= 3)
    reader.close()

    assert f"subject filter {stream.subject('a')} sequence {seq}" in str(failed.value)
    assert "'region'" in str(failed.value)
    [change] = failed.value.schema_changes
    assert (change.column, change.kind, change.policy, change.position) == ("region", "added", "fail", seq)


def test_a_message_gaining_a_column_lands_it_under_evolve_and_says_where(env, stream):  # noqa: F811
    seq = _publish(stream)
    reader = reader_of(env, stream, {**FORMAT, "on_schema_change": "evolve"})
    reader.handle_splits_changes([SubjectSplit(stream.name, stream.subject("a"), 0)], [])

    batches = fetch_until(reader, lambda b: sum(x.records.num_rows for x in b) >= 3)
    reader.close()

    rows = [r for b in batches for r in b.records.to_pylist()]
    assert [r.get("region") for r in rows] == [None, None, "eu"]
    changes = [c for b in batches for c in b.schema_changes]
    assert [(c.column, c.kind, c.policy, c.position) for c in changes] == [("region", "added", "evolve", seq)]
