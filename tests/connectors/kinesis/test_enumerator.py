"""The kinesis enumerator against the module's moto server (the stand-in for Kinesis):
each shard a split, a reshard's children handed out only once their parents are finished
(a split, then a merge), a finish whose report was lost found at a later discovery, and
all of it kept across a snapshot."""

from __future__ import annotations

import pytest

from connectors.kinesis.config import KinesisSourceConfig
from connectors.kinesis.reader import SHARD_FINISHED, SHARD_PROGRESS
from connectors.kinesis.source import KinesisSource
from connectors.kinesis.split import AFTER_SEQUENCE_NUMBER, AT_TIMESTAMP, TRIM_HORIZON
from source_support.api import SourceEvent
from source_support.formats import validate_format
from source_support.registry import BuildContext
from tests.connectors.kinesis.conftest import shard_ids, source_table
from tests.source_support.fakes import RecordingContext

HALF = str(2**127)


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture()
def clock() -> Clock:
    return Clock()


def enumerator_of(env, moto, stream, context, clock, *, state=None, stop=None, **extra):
    table = source_table(moto, stream, discovery_interval_ms=1000, **extra)
    source = KinesisSource.from_config(
        KinesisSourceConfig.parse(table, env),
        validate_format({"type": "json", "schema": "id BIGINT"}),
        BuildContext(env=env, batch_size=10, stop=stop or {}),
    )
    source.clock = clock
    return source.restore_enumerator(context, state)


def assigned(context) -> list[str]:
    return [split.shard_id for _, split in context.assigned]


def finish(enumerator, context, shard: str) -> None:
    """What the runtime does once a reader commits a shard's end: the split is no longer
    held, and the reader reports it."""
    context.held.pop(shard, None)
    enumerator.handle_source_event(0, SourceEvent(SHARD_FINISHED, {"shard": shard}))


@pytest.mark.slow
def test_each_shard_is_a_split_spread_over_the_readers(env, moto, kinesis, stream_name, clock):
    kinesis.create_stream(StreamName=stream_name, ShardCount=4)
    context = RecordingContext(parallelism=2)

    enumerator_of(env, moto, stream_name, context, clock).start()

    assert sorted(assigned(context)) == shard_ids(kinesis, stream_name)
    assert sorted(subtask for subtask, _ in context.assigned) == [0, 0, 1, 1]
    assert {split.anchor.kind for _, split in context.assigned} == {TRIM_HORIZON}


def test_children_are_handed_out_only_after_their_parents_finish(env, moto, kinesis, stream_name, clock):
    kinesis.create_stream(StreamName=stream_name, ShardCount=1)
    context = RecordingContext(parallelism=2)
    enumerator = enumerator_of(env, moto, stream_name, context, clock)
    enumerator.start()
    (parent,) = assigned(context)

    kinesis.split_shard(StreamName=stream_name, ShardToSplit=parent, NewStartingHashKey=HALF)
    clock.now += 2
    enumerator.start()
    assert assigned(context) == [parent], "the children wait while their parent is read"
    assert enumerator.pending_count() == 2

    finish(enumerator, context, parent)
    left, right = (s for s in shard_ids(kinesis, stream_name) if s != parent)
    assert sorted(assigned(context)[1:]) == [left, right]
    assert {split.anchor.kind for _, split in context.assigned[1:]} == {TRIM_HORIZON}

    kinesis.merge_shards(StreamName=stream_name, ShardToMerge=left, AdjacentShardToMerge=right)
    clock.now += 2
    enumerator.start()
    finish(enumerator, context, left)
    assert len(assigned(context)) == 3, "a merge's child waits for both its parents"
    finish(enumerator, context, right)
    (merged,) = set(shard_ids(kinesis, stream_name)) - {parent, left, right}
    assert assigned(context)[3:] == [merged]


def test_a_snapshot_keeps_finished_parents_so_children_are_released_after_a_restore(
    env, moto, kinesis, stream_name, clock
):
    kinesis.create_stream(StreamName=stream_name, ShardCount=2)
    context = RecordingContext(parallelism=1)
    enumerator = enumerator_of(env, moto, stream_name, context, clock)
    enumerator.start()
    first, second = shard_ids(kinesis, stream_name)
    kinesis.merge_shards(StreamName=stream_name, ShardToMerge=first, AdjacentShardToMerge=second)
    clock.now += 2
    enumerator.start()
    finish(enumerator, context, first)

    restored = enumerator_of(env, moto, stream_name, context, clock, state=enumerator.snapshot_state())
    restored.start()
    assert len(assigned(context)) == 2, "the child still waits for its second parent"
    finish(restored, context, second)

    (merged,) = set(shard_ids(kinesis, stream_name)) - {first, second}
    assert assigned(context)[2:] == [merged]
    assert restored.snapshot_state()["finished"] == sorted([first, second])


def test_a_finish_whose_report_was_lost_is_found_at_a_later_discovery(env, moto, kinesis, stream_name, clock):
    kinesis.create_stream(StreamName=stream_name, ShardCount=2)
    context = RecordingContext(parallelism=2)
    enumerator = enumerator_of(env, moto, stream_name, context, clock)
    enumerator.start()
    done, reading = shard_ids(kinesis, stream_name)
    kinesis.split_shard(StreamName=stream_name, ShardToSplit=done, NewStartingHashKey=str(2**126))
    kinesis.split_shard(StreamName=stream_name, ShardToSplit=reading, NewStartingHashKey=str(3 * 2**126))
    clock.now += 2
    enumerator.start()  # sees both parents closed
    context.held.pop(done)  # its reader committed its end and died before reporting it
    owner_of_reading = context.held[reading][0]

    clock.now += 2
    enumerator.start()

    children_of_done = [
        s["ShardId"]
        for s in kinesis.list_shards(StreamName=stream_name)["Shards"]
        if s.get("ParentShardId") == done
    ]
    assert sorted(set(assigned(context)[2:]) - {reading}) == sorted(children_of_done)
    assert context.held[reading][0] == owner_of_reading, "a parent still read goes back to its reader"
    assert [split.shard_id for _, split in context.revoked] == [reading]


def test_latest_is_fixed_as_the_first_discoverys_time_and_progress_moves_the_anchor(
    env, moto, kinesis, stream_name, clock
):
    kinesis.create_stream(StreamName=stream_name, ShardCount=1)
    context = RecordingContext(parallelism=1)
    enumerator = enumerator_of(env, moto, stream_name, context, clock, start="LATEST")
    enumerator.start()
    ((_, split),) = context.assigned
    assert (split.anchor.kind, split.anchor.value) == (AT_TIMESTAMP, str(int(clock.now * 1000)))

    enumerator.handle_source_event(
        0, SourceEvent(SHARD_PROGRESS, {"shard": split.shard_id, "position": 7, "seq": "9"})
    )
    enumerator.add_splits_back([split.at(9)], 0)

    returned = context.assigned[-1][1]
    assert (returned.position, returned.anchor.kind, returned.anchor.value, returned.anchor.position) == (
        9,
        AFTER_SEQUENCE_NUMBER,
        "9",
        7,
    )


def test_a_stop_ends_discovery_and_the_enumerator_once_every_shard_is_out(
    env, moto, kinesis, stream_name, clock
):
    kinesis.create_stream(StreamName=stream_name, ShardCount=2)
    context = RecordingContext(parallelism=1)
    enumerator = enumerator_of(
        env, moto, stream_name, context, clock, stop={"at": "latest", "kind": "latest"}
    )
    enumerator.start()
    assert {split.stop_ms for _, split in context.assigned} == {int(clock.now * 1000)}
    assert not enumerator.is_exhausted(), "a discovery after the stop is still to come"

    clock.now += 5
    enumerator.start()

    assert enumerator.is_exhausted()
