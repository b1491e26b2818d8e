"""The Kafka split reader against librdkafka's mock cluster (not a real broker): typed
records from values, positions as next offsets, metadata columns, stops by offset and by
time, a record without a value dead-lettered at its offset."""

from __future__ import annotations

import time

import pytest

from connectors.kafka.config import KafkaSourceConfig
from connectors.kafka.source import KafkaSource
from connectors.kafka.split import PartitionSplit
from source_support.formats import validate_format
from source_support.registry import BuildContext


def reader_of(env, cluster, topic, *, metadata=False, fmt=None):
    table = {"bootstrap_servers": cluster.bootstrap, "topics": [topic], "metadata": metadata}
    source = KafkaSource.from_config(
        KafkaSourceConfig.parse(table, env),
        validate_format(fmt or {"type": "json", "schema": "id BIGINT, customer STRING"}),
        BuildContext(env=env, batch_size=100, flow_name="reader-test"),
    )
    return source, source.create_reader(_Context()).split_reader


class _Context:
    bad_record_fails_split = False
    subtask = 0

    def send_split_request(self) -> None: ...

    def send_source_event_to_coordinator(self, event) -> None: ...


def read_until(reader, count: int, *, finished: bool = False):
    batches, deadline = [], time.monotonic() + 20
    while time.monotonic() < deadline:
        batches += reader.fetch(100, 0.2)
        rows = sum(b.records.num_rows + len(b.bad_records) for b in batches)
        if rows >= count and (not finished or any(b.finished for b in batches)):
            return batches
    raise AssertionError(f"read {batches}")


def orders(ids):
    return [{"id": i, "customer": f"c{i}"} for i in ids]


@pytest.mark.slow
def test_reads_from_the_position_with_metadata_and_ends_at_the_next_offset(env, cluster, topics, prefix):
    topics.send_json(prefix, 1, orders(range(5)), key=b"k", ts_ms=1_700_000_000_000)
    source, reader = reader_of(env, cluster, prefix, metadata=True)
    reader.handle_splits_changes([PartitionSplit(prefix, 1, 2)], [])
    try:
        batches = read_until(reader, 3)
    finally:
        reader.close()
    table = batches[0].records
    assert table.column("id").to_pylist() == [2, 3, 4]
    assert table.column("_offset").to_pylist() == [2, 3, 4]
    assert set(table.column("_topic").to_pylist()) == {prefix}
    assert set(table.column("_partition").to_pylist()) == {1}
    assert set(table.column("_key").to_pylist()) == {"k"}
    assert table.column("_ts")[0].as_py().year == 2023
    assert (batches[0].start.position, batches[-1].end.position) == (2, 5)
    assert source.split_lags({f"{prefix}:1": ({"topic": prefix, "partition": 1}, 2)}) == {f"{prefix}:1": 3}


def test_a_stop_offset_ends_the_split_before_it(env, cluster, topics, prefix):
    topics.send_json(prefix, 0, orders(range(6)))
    _, reader = reader_of(env, cluster, prefix)
    reader.handle_splits_changes([PartitionSplit(prefix, 0, 0, stop_offset=4)], [])
    try:
        batches = read_until(reader, 4, finished=True)
    finally:
        reader.close()
    assert [i for b in batches for i in b.records.column("id").to_pylist()] == [0, 1, 2, 3]
    assert batches[-1].finished and batches[-1].end.position == 4


def test_a_stop_time_ends_the_split_at_the_first_record_after_it(env, cluster, topics, prefix):
    topics.send_json(prefix, 0, orders([1, 2]), ts_ms=1_000_000)
    topics.send_json(prefix, 0, orders([3]), ts_ms=3_000_000)
    _, reader = reader_of(env, cluster, prefix)
    reader.handle_splits_changes([PartitionSplit(prefix, 0, 0, stop_time_ms=2_000_000)], [])
    try:
        batches = read_until(reader, 2, finished=True)
    finally:
        reader.close()
    assert [i for b in batches for i in b.records.column("id").to_pylist()] == [1, 2]
    assert batches[-1].finished and batches[-1].end.position == 2


@pytest.mark.parametrize("value", [None, b"{not json"])
def test_a_record_without_a_good_value_is_a_bad_record_at_its_offset(env, cluster, topics, prefix, value):
    topics.send_json(prefix, 0, orders([1]))
    topics.send(prefix, 0, [value])
    topics.send_json(prefix, 0, orders([3]))
    source, reader = reader_of(env, cluster, prefix)
    reader.handle_splits_changes([PartitionSplit(prefix, 0, 0)], [])
    try:
        batches = read_until(reader, 3)
    finally:
        reader.close()
    bad = [r for b in batches for r in b.bad_records]
    assert [r.position for r in bad] == [1] and bad[0].reason
    assert source.format_position(bad[0].position) == "1"
    assert [i for b in batches for i in b.records.column("id").to_pylist()] == [1, 3]


def test_raw_values_are_kept_as_bytes_and_a_schema_is_inferred(env, cluster, topics, prefix):
    topics.send(prefix, 2, [b"\x00\x01", b"plain"])
    _, reader = reader_of(env, cluster, prefix, fmt={"type": "raw"})
    reader.handle_splits_changes([PartitionSplit(prefix, 2, 0)], [])
    try:
        batches = read_until(reader, 2)
    finally:
        reader.close()
    assert [v for b in batches for v in b.records.column("data").to_pylist()] == [b"\x00\x01", b"plain"]

    topics.send_json(f"{prefix}j", 0, orders([7]))
    table = {"bootstrap_servers": cluster.bootstrap, "topics": [f"{prefix}j"]}
    inferring = KafkaSource.from_config(
        KafkaSourceConfig.parse(table, env),
        validate_format({"type": "json"}),
        BuildContext(env=env, batch_size=10, flow_name="reader-test"),
    )
    assert set(inferring.infer_schema().names) == {"id", "customer"}


def test_partitions_of_two_topics_are_read_each_into_its_own_split(env, cluster, topics, prefix):
    topics.send_json(f"{prefix}a", 0, orders(range(0, 5)))
    topics.send_json(f"{prefix}a", 1, orders(range(5, 8)))
    topics.send_json(f"{prefix}b", 0, orders(range(10, 13)))
    _, reader = reader_of(env, cluster, f"{prefix}a")
    splits = [
        PartitionSplit(f"{prefix}a", 0, 0),
        PartitionSplit(f"{prefix}a", 1, 0),
        PartitionSplit(f"{prefix}b", 0, 1),
    ]
    reader.handle_splits_changes(splits, [])
    try:
        batches = read_until(reader, 10)
    finally:
        reader.close()
    ids: dict[str, list[int]] = {}
    for b in batches:
        ids[b.split_id] = ids.get(b.split_id, []) + b.records.column("id").to_pylist()
    assert ids == {f"{prefix}a:0": [0, 1, 2, 3, 4], f"{prefix}a:1": [5, 6, 7], f"{prefix}b:0": [11, 12]}
    assert {b.split_id: b.end.position for b in batches} == {
        f"{prefix}a:0": 5,
        f"{prefix}a:1": 3,
        f"{prefix}b:0": 3,
    }


def ids_of(batches) -> list[int]:
    return [i for b in batches for i in b.records.column("id").to_pylist()]


def test_the_next_slice_goes_on_with_the_consumer_the_last_one_kept(env, cluster, topics, prefix):
    """A reader lives one time slice; its consumer stays open for the next slice of the same
    reader in the process, which goes on from the checkpoint the kept one reached."""
    topics.send_json(prefix, 1, orders(range(10)))
    source, first = reader_of(env, cluster, prefix)
    first.handle_splits_changes([PartitionSplit(prefix, 1, 0)], [])
    assert ids_of(read_until(first, 10)) == list(range(10))
    consumer = first.consumer
    first.close()
    topics.send_json(prefix, 1, orders(range(10, 20)))

    second = source.create_reader(_Context()).split_reader
    second.handle_splits_changes([PartitionSplit(prefix, 1, 10)], [])
    try:
        batches = read_until(second, 10)
        assert second.consumer is consumer
    finally:
        second.close()
    assert ids_of(batches) == list(range(10, 20))


def test_a_checkpoint_behind_the_kept_consumer_is_read_again_from_the_checkpoint(
    env, cluster, topics, prefix
):
    """What the last slice handed out but never committed (its reader died before the
    commit) is read again: the kept consumer is assigned again at the checkpoint."""
    topics.send_json(prefix, 2, orders(range(10)))
    source, first = reader_of(env, cluster, prefix)
    first.handle_splits_changes([PartitionSplit(prefix, 2, 0)], [])
    assert ids_of(read_until(first, 10)) == list(range(10))
    first.close()
    topics.send_json(prefix, 2, orders(range(10, 12)))

    second = source.create_reader(_Context()).split_reader
    second.handle_splits_changes([PartitionSplit(prefix, 2, 4)], [])  # committed up to offset 4
    try:
        batches = read_until(second, 8)
    finally:
        second.close()
    assert ids_of(batches) == list(range(4, 12))
    assert batches[0].start.position == 4


def test_a_kept_partition_that_no_split_asks_for_is_not_read(env, cluster, topics, prefix):
    """A split that went to another reader while the consumer was kept: its partition is
    unassigned, and only the splits this reader now holds are read."""
    topics.send_json(prefix, 0, orders(range(3)))
    topics.send_json(prefix, 3, orders(range(100, 103)))
    source, first = reader_of(env, cluster, prefix)
    first.handle_splits_changes([PartitionSplit(prefix, 0, 0)], [])
    assert ids_of(read_until(first, 3)) == [0, 1, 2]
    first.close()
    topics.send_json(prefix, 0, orders(range(3, 6)))

    second = source.create_reader(_Context()).split_reader
    second.handle_splits_changes([PartitionSplit(prefix, 3, 0)], [])
    try:
        batches = read_until(second, 3)
        batches += second.fetch(100, 0.5)  # nothing of partition 0 comes after them
    finally:
        second.close()
    assert ids_of(batches) == [100, 101, 102]
    assert {b.split_id for b in batches} == {f"{prefix}:3"}


def test_a_partition_the_kept_consumer_had_at_an_earlier_offset_is_not_taken_for_a_reset(
    env, cluster, topics, prefix
):
    """The kept consumer last fetched the partition at offset 3; another reader has read
    it to 10 since. The high watermark the consumer remembers (3) is from then, not a
    partition gone back below the checkpoint."""
    topics.send_json(prefix, 1, orders(range(3)))
    source, first = reader_of(env, cluster, prefix)
    first.handle_splits_changes([PartitionSplit(prefix, 1, 0)], [])
    assert ids_of(read_until(first, 3)) == [0, 1, 2]
    first.close()
    topics.send_json(prefix, 1, orders(range(3, 10)))  # read by another reader meanwhile

    second = source.create_reader(_Context()).split_reader
    second.handle_splits_changes([PartitionSplit(prefix, 1, 10)], [])
    try:
        assert second.fetch(100, 0.2) == []
        topics.send_json(prefix, 1, orders(range(10, 12)))
        batches = read_until(second, 2)
    finally:
        second.close()
    assert ids_of(batches) == [10, 11]
