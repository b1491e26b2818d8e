"""Against Tansu (a real Kafka-protocol broker; tests/tansu_broker.py): what a run trusts
when the brokers' answers disagree or go backwards (issue 25).

- ListOffsets(latest) on Tansu is short by the last producer batch: a ``[stop] at =
  "latest"`` ends each split at the high watermark fetches report, and lag counts to it.
- Tansu restarted empty (memory storage) under a stream run, its topic made again with
  fewer records than the checkpoint: the split fails naming the partition and both offsets.
- Tansu answers a lookup by time with the log's start: a ``start`` time reads only the
  records at or after it.
"""

from __future__ import annotations

import json
import uuid

import pytest
from confluent_kafka import Consumer, TopicPartition

from source_support.testing.harness import SourceHarness
from tests.connectors.kafka.conftest import Topics, kafka_source
from tests.helpers import logs_of

PARTITIONS = 4
#: Producer batches per partition: Tansu's ListOffsets misses the last of them.
BATCHES, PER_BATCH = 4, 25


def write_batches(topics: Topics, topic: str, start_id: int = 0) -> int:
    """``BATCHES`` producer batches of ``PER_BATCH`` records into each partition; the
    records written."""
    next_id = start_id
    for _ in range(BATCHES):
        for partition in range(PARTITIONS):
            values = [json.dumps({"id": i}).encode() for i in range(next_id, next_id + PER_BATCH)]
            for value in values:
                topics.producer.produce(topic, value, partition=partition)
            next_id += PER_BATCH
        assert topics.producer.flush(30) == 0  # each partition's batch goes as one
    return next_id - start_id


def listed_ends(broker, topic: str) -> list[int]:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "probe"})
    try:
        return [
            consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)[1]
            for p in range(PARTITIONS)
        ]
    finally:
        consumer.close()


def test_a_stop_at_latest_reads_to_the_fetch_high_watermark_and_lag_counts_to_it(tansu, env, caplog):
    topic = f"s{uuid.uuid4().hex[:10]}"
    topics = Topics(tansu)
    topics.make(topic)
    written = write_batches(topics, topic)
    per_partition = written // PARTITIONS
    # What the fix is for: Tansu's ListOffsets(latest) misses the last producer batch.
    assert all(end < per_partition for end in listed_ends(tansu, topic))

    source = kafka_source(env, tansu, topic)
    with logs_of(caplog, "connectors.kafka"):
        lags = source.split_lags(
            {f"{topic}:{p}": ({"topic": topic, "partition": p}, 10) for p in range(PARTITIONS)}
        )
    assert lags == {f"{topic}:{p}": per_partition - 10 for p in range(PARTITIONS)}
    assert (
        f"ListOffsets(latest) {listed_ends(tansu, topic)[0]}, but a fetch reports high watermark"
        in caplog.text
    )

    harness = SourceHarness(
        kafka_source(env, tansu, topic, stop={"at": "latest", "kind": "latest"}), readers=2
    )
    write_batches(topics, topic, start_id=written)  # after the run's ends were fixed
    harness.run()

    ids = sorted(r["id"] for r in harness.records())
    assert ids == list(range(written))


def test_a_broker_restarted_empty_fails_the_split_naming_the_partition_and_both_offsets(tansu, env):
    topic = f"r{uuid.uuid4().hex[:10]}"
    topics = Topics(tansu)
    topics.make(topic)
    written = write_batches(topics, topic)
    harness = SourceHarness(kafka_source(env, tansu, topic), readers=1, poll_timeout_s=0.05)
    harness.run(until=lambda h: len(h.records()) == written)

    tansu.restart()  # empty: its storage is memory
    topics = Topics(tansu)
    topics.make(topic)
    topics.send_json(topic, 0, [{"id": i} for i in range(10)])  # below the checkpoint, 100
    harness.run(until=lambda h: any(s.failed for s in h.store.state.splits.values()))

    (split_id, message), *_ = [(k, s.failed) for k, s in harness.store.state.splits.items() if s.failed]
    partition = int(split_id.rpartition(":")[2])
    high = 10 if partition == 0 else 0  # what the new log holds
    assert f"topic {topic} partition {partition} went back below the checkpoint" in message
    # Which of two checks tells it first depends on timing: the fetch's high watermark, or
    # the topic's id (KIP-516) asked every CHECK_EVERY_S. Either names the checkpoint.
    checkpoint = written // PARTITIONS
    assert (
        f"high watermark {high}, the checkpoint is at offset {checkpoint}" in message
        or "its topic's id is now" in message
        and f"the checkpoint (offset {checkpoint})" in message
    ), message


@pytest.mark.slow
def test_a_start_time_reads_only_records_at_or_after_it_when_the_lookup_answers_earlier(tansu, env):
    topic = f"t{uuid.uuid4().hex[:10]}"
    topics = Topics(tansu)
    topics.make(topic)
    base = 1_700_000_000_000
    for i in range(20):  # one a second
        topics.send_json(topic, i % PARTITIONS, [{"id": i}], ts_ms=base + i * 1000)
    # What the fix is for: Tansu's lookup by time answers offset 0 even past the last record.
    consumer = Consumer({"bootstrap.servers": tansu.bootstrap, "group.id": "probe"})
    try:
        (found,) = consumer.offsets_for_times([TopicPartition(topic, 0, base + 100_000)], timeout=10)
    finally:
        consumer.close()
    assert found.offset == 0

    middle = SourceHarness(kafka_source(env, tansu, topic, start="2023-11-14T22:13:30Z"), poll_timeout_s=0.05)
    middle.run(until=lambda h: len(h.records()) >= 10, rounds=None)
    middle.run(rounds=20)  # nothing more comes
    assert sorted(r["id"] for r in middle.records()) == list(range(10, 20))  # base + 10 s on

    past = SourceHarness(kafka_source(env, tansu, topic, start="2023-11-14T23:00:00Z"), poll_timeout_s=0.05)
    past.run(rounds=40)
    assert past.records() == []
    topics.send_json(topic, 0, [{"id": 100}], ts_ms=base + 3 * 3600_000)  # after the start time
    past.run(until=lambda h: len(h.records()) >= 1)
    past.run(rounds=20)
    assert [r["id"] for r in past.records()] == [100]
