"""``format.on_schema_change`` on Kafka (the mock cluster, then Tansu): a record that gains
a column fails its split under ``fail``, naming the column and the record's offset, and
is rescued and reported at that offset under ``rescue``."""

from __future__ import annotations

import pytest

from connectors.kafka.split import PartitionSplit
from source_support.errors import SplitFailed
from tests.connectors.kafka.conftest import Topics
from tests.connectors.kafka.test_reader import read_until, reader_of

pytestmark = pytest.mark.slow

FORMAT = {"type": "json", "schema": "id BIGINT, customer STRING"}


def _send(broker, topic: str) -> int:
    """Two orders, then one that gains ``region``, to partition 0; the offset of that one."""
    topics = Topics(broker)
    topics.make(topic)
    topics.send_json(topic, 0, [{"id": i, "customer": f"c{i}"} for i in range(2)])
    return topics.send_json(topic, 0, [{"id": 2, "customer": "c2", "region": "eu"}])[0]


def test_a_record_gaining_a_column_fails_its_split_under_fail_naming_column_and_offset(env, broker, prefix):
    offset = _send(broker, prefix)
    _, reader = reader_of(env, broker, prefix, fmt={**FORMAT, "on_schema_change": "fail"})
    reader.handle_splits_changes([PartitionSplit(prefix, 0, 0)], [])

    try:
        with pytest.raises(SplitFailed) as failed:
            read_until(reader, 3)
    finally:
        reader.close()

    assert f"topic {prefix} partition 0 offset {offset}" in str(failed.value)
    assert "'region'" in str(failed.value)
    [change] = failed.value.schema_changes
    assert (change.column, change.kind, change.policy, change.position) == ("region", "added", "fail", offset)


def test_a_record_gaining_a_column_is_rescued_under_rescue_and_said_where(env, broker, prefix):
    offset = _send(broker, prefix)
    _, reader = reader_of(env, broker, prefix, fmt={**FORMAT, "on_schema_change": "rescue"})
    reader.handle_splits_changes([PartitionSplit(prefix, 0, 0)], [])

    try:
        batches = read_until(reader, 3)
    finally:
        reader.close()

    rows = [r for b in batches for r in b.records.to_pylist()]
    assert [(r["id"], r["_rescued"]) for r in rows] == [(0, None), (1, None), (2, '{"region": "eu"}')]
    changes = [c for b in batches for c in b.schema_changes]
    assert [(c.column, c.kind, c.policy, c.position) for c in changes] == [
        ("region", "added", "rescue", offset)
    ]
