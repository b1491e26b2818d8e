"""``format.on_schema_change`` on Kinesis (the module's moto server, the stand-in for it): a
record that gains a column fails its split under ``fail``, naming the column and the
record's position in the shard, and is dropped and counted under ``ignore``."""

from __future__ import annotations

import pytest

from connectors.kinesis.config import KinesisSourceConfig
from connectors.kinesis.source import KinesisSource
from source_support.errors import SplitFailed
from source_support.formats import validate_format
from source_support.registry import BuildContext
from tests.connectors.kinesis.conftest import put_json, shard_ids, source_table
from tests.connectors.kinesis.test_reader import read_all, reader_of, split_of

pytestmark = pytest.mark.slow


def _reader(env, moto, stream: str, policy: str):
    source = KinesisSource.from_config(
        KinesisSourceConfig.parse(source_table(moto, stream), env),
        validate_format({"type": "json", "schema": "id BIGINT, customer STRING", "on_schema_change": policy}),
        BuildContext(env=env, batch_size=10),
    )
    return reader_of(source)


def _put(kinesis, stream: str) -> str:
    """Two orders, then one that gains ``region`` (the shard's third record); the shard."""
    kinesis.create_stream(StreamName=stream, ShardCount=1)
    put_json(kinesis, stream, [{"id": i, "customer": f"c{i}"} for i in range(2)])
    put_json(kinesis, stream, [{"id": 2, "customer": "c2", "region": "eu"}])
    return shard_ids(kinesis, stream)[0]


def test_a_record_gaining_a_column_fails_its_split_under_fail_naming_column_and_record(
    env, moto, kinesis, stream_name
):
    shard = _put(kinesis, stream_name)
    reader = _reader(env, moto, stream_name, "fail")
    reader.handle_splits_changes([split_of(stream_name, shard)], [])

    with pytest.raises(SplitFailed) as failed:
        read_all(reader)

    assert f"stream {stream_name} shard {shard} record 3" in str(failed.value)
    assert "'region'" in str(failed.value)
    [change] = failed.value.schema_changes
    assert (change.column, change.kind, change.policy, change.position) == ("region", "added", "fail", 3)


def test_a_record_gaining_a_column_is_dropped_and_counted_under_ignore(env, moto, kinesis, stream_name):
    shard = _put(kinesis, stream_name)
    reader = _reader(env, moto, stream_name, "ignore")
    reader.handle_splits_changes([split_of(stream_name, shard)], [])

    batches = read_all(reader)

    rows = [r for b in batches for r in b.records.to_pylist()]
    assert rows == [{"id": i, "customer": f"c{i}"} for i in range(3)]
    changes = [c for b in batches for c in b.schema_changes]
    assert [(c.column, c.kind, c.policy, c.position, c.records) for c in changes] == [
        ("region", "added", "ignore", 3, 1)
    ]
