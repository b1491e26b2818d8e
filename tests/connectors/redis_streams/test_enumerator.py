"""Discovery, start and stop positions, and balanced sticky assignment of streams, against
a real Redis with the in-memory enumerator context."""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import replace

from connectors.redis_streams.split import StreamSplit, encode_id, last_position_before_ms
from source_support.connections import ConnectionTarget
from tests.connectors.redis_streams.conftest import build_source
from tests.helpers import wait_until
from tests.source_support.fakes import RecordingContext


def add(rds, key: str, count: int = 1, **fields) -> list[bytes]:
    return [rds.xadd(key, {"id": i, **fields}) for i in range(count)]


def streams_assigned(rds, prefix: str, env, *, streams: int, parallelism: int):
    """``streams`` streams ``<prefix>0`` ... under an enumerator that assigned them to
    ``parallelism`` readers in one tick: the source, the context and the enumerator."""
    for i in range(streams):
        add(rds, f"{prefix}{i}")
    source = build_source(env, {"streams": f"{prefix}*"})
    context = RecordingContext(parallelism=parallelism)
    return source, context, tick(source, context)


def tick(source, context, enumerator=None):
    """One enumerator tick as the runtime runs it: rebuilt from its saved state, started."""
    state = None if enumerator is None else json.loads(json.dumps(enumerator.snapshot_state()))
    rebuilt = (
        source.create_enumerator(context) if state is None else source.restore_enumerator(context, state)
    )
    rebuilt.start()
    return rebuilt


def owners(context: RecordingContext) -> dict[str, int]:
    return {split_id: subtask for split_id, (subtask, _) in context.held.items()}


def test_discovery_finds_the_matching_streams_only_and_spreads_them(rds, prefix, env):
    for i in range(5):
        add(rds, f"{prefix}orders:{i}")
    rds.hset(f"{prefix}orders:hash", "a", 1)  # not a stream
    add(rds, f"{prefix}other:1")
    source = build_source(env, {"streams": f"{prefix}orders:*"})
    context = RecordingContext(parallelism=2)

    tick(source, context)

    assert sorted(owners(context)) == [f"{prefix}orders:{i}" for i in range(5)]
    assert sorted(Counter(owners(context).values()).values()) == [2, 3]
    assert all(split.position == 0 for _, split in context.assigned)


def test_a_key_without_glob_characters_is_that_one_stream(rds, prefix, env):
    add(rds, f"{prefix}orders")
    add(rds, f"{prefix}orders2")
    source = build_source(env, {"streams": f"{prefix}orders"})
    context = RecordingContext(parallelism=1)

    tick(source, context)

    assert list(owners(context)) == [f"{prefix}orders"]


def test_start_positions_at_the_first_discovery(rds, prefix, env):
    ids = add(rds, f"{prefix}s", 3)
    cases = {
        "earliest": 0,
        "latest": encode_id(ids[-1]),
        ids[1].decode(): encode_id(ids[1]) - 1,  # an entry id: that entry is read
        "2000-01-01T00:00:00Z": last_position_before_ms(946_684_800_000),
    }
    for start, expected in cases.items():
        context = RecordingContext(parallelism=1)

        tick(build_source(env, {"streams": f"{prefix}s", "start": start}), context)

        assert [split.position for _, split in context.assigned] == [expected], start


def test_a_rebuilt_enumerator_does_not_discover_or_assign_again(rds, prefix, env):
    add(rds, f"{prefix}a")
    source = build_source(env, {"streams": f"{prefix}*"})
    context = RecordingContext(parallelism=2)
    enumerator = tick(source, context)
    add(rds, f"{prefix}b")  # appears before the discovery interval has passed

    enumerator = tick(source, context, enumerator)
    enumerator = tick(source, context, enumerator)

    assert [split.split_id for _, split in context.assigned] == [f"{prefix}a"]
    assert enumerator.pending_count() == 0


def test_streams_created_later_are_found_and_read_from_their_beginning(rds, prefix, env):
    add(rds, f"{prefix}a", 2)
    source = build_source(env, {"streams": f"{prefix}*", "start": "latest", "discovery_interval_ms": 100})
    context = RecordingContext(parallelism=2)
    state = {"enumerator": tick(source, context)}
    add(rds, f"{prefix}b", 2)

    def found() -> bool:
        state["enumerator"] = tick(source, context, state["enumerator"])
        return f"{prefix}b" in owners(context)

    wait_until(found, 10, lambda: f"not discovered: {owners(context)}")
    positions = {split.split_id: split.position for _, split in context.assigned}
    assert positions[f"{prefix}a"] > 0  # latest, at the first discovery
    assert positions[f"{prefix}b"] == 0  # from its beginning
    assert set(owners(context).values()) == {0, 1}


def test_stop_latest_ends_each_stream_at_its_last_entry_and_then_says_no_more(rds, prefix, env):
    ids = add(rds, f"{prefix}a", 3)
    source = build_source(env, {"streams": f"{prefix}*"}, stop={"kind": "latest", "at": "latest"})
    context = RecordingContext(parallelism=2)

    enumerator = tick(source, context)

    assert [(s.split_id, s.stop_position) for _, s in context.assigned] == [
        (f"{prefix}a", encode_id(ids[-1]))
    ]
    assert enumerator.is_exhausted()
    enumerator.handle_split_request(1)
    assert context.no_more == [1]


def test_stop_latest_gives_streams_found_later_nothing_after_the_first_discovery(rds, prefix, env):
    add(rds, f"{prefix}a")
    source = build_source(env, {"streams": f"{prefix}*"}, stop={"kind": "latest", "at": "latest"})
    context = RecordingContext(parallelism=1)
    enumerator = tick(source, context)
    first_ms = enumerator.first_discovery_ms

    assert enumerator._stop_for("later", None) == last_position_before_ms(first_ms)


def test_stop_at_a_time_or_an_entry_id(rds, prefix, env):
    for ms in (1000, 2000, 3000):
        rds.xadd(f"{prefix}a", {"id": ms}, id=f"{ms}-0")
    for stop, expected in (
        ({"kind": "time", "at": "1970-01-01T00:00:02Z", "time_ms": 2000}, encode_id("2000", last_seq=True)),
        ({"kind": "position", "at": "2000-0"}, encode_id("2000-0")),
    ):
        context = RecordingContext(parallelism=1)

        enumerator = tick(build_source(env, {"streams": f"{prefix}*"}, stop=stop), context)

        assert [s.stop_position for _, s in context.assigned] == [expected]
        assert enumerator.is_exhausted()  # the stop is past: no stream created now can have entries before it


def test_a_stream_that_starts_after_its_stop_gets_no_split(rds, prefix, env):
    add(rds, f"{prefix}a")  # ids of now, after the stop
    stop = {"kind": "time", "at": "2000-01-01T00:00:00Z", "time_ms": 946_684_800_000}
    context = RecordingContext(parallelism=1)

    enumerator = tick(build_source(env, {"streams": f"{prefix}*", "start": "latest"}, stop=stop), context)

    assert context.assigned == []
    assert enumerator.is_exhausted()


def test_a_stop_in_the_future_keeps_discovering(rds, prefix, env):
    add(rds, f"{prefix}a")
    stop = {"kind": "time", "at": "2999-01-01T00:00:00Z", "time_ms": 32_472_144_000_000}
    context = RecordingContext(parallelism=1)

    enumerator = tick(build_source(env, {"streams": f"{prefix}*"}, stop=stop), context)
    enumerator.handle_split_request(0)

    assert not enumerator.is_exhausted()
    assert context.no_more == []


def test_without_a_stop_rule_readers_are_never_told_no_more(rds, prefix, env):
    context = RecordingContext(parallelism=2)
    enumerator = tick(build_source(env, {"streams": f"{prefix}none*"}), context)

    enumerator.handle_split_request(0)

    assert not enumerator.is_exhausted()
    assert context.no_more == []


def test_a_reader_that_joins_takes_its_share_and_nothing_else_moves(rds, prefix, env):
    source, context, enumerator = streams_assigned(rds, prefix, env, streams=6, parallelism=2)
    before = owners(context)

    context.parallelism = 3
    enumerator = tick(source, context, enumerator)
    enumerator.add_reader(2)

    after = owners(context)
    moved = {k for k in after if after[k] != before[k]}
    assert sorted(Counter(after.values()).values()) == [2, 2, 2]
    assert len(moved) == 2 and {after[k] for k in moved} == {2}
    assert sorted(split.split_id for _, split in context.revoked) == sorted(moved)


def test_the_splits_of_a_gone_reader_wait_for_their_return_then_go_to_the_others(rds, prefix, env):
    source, context, enumerator = streams_assigned(rds, prefix, env, streams=4, parallelism=2)
    of_reader_1 = [k for k, owner in owners(context).items() if owner == 1]

    context.parallelism = 1  # reader 1 is gone
    enumerator = tick(source, context, enumerator)
    assert context.revoked == []  # its splits are not moved while the runtime still has them

    enumerator.add_splits_back([StreamSplit(k, 5) for k in of_reader_1], 1)

    assert set(owners(context).values()) == {0}
    assert sorted(owners(context)) == sorted(f"{prefix}{i}" for i in range(4))
    assert enumerator.pending_count() == 0


def test_a_split_no_reader_holds_any_more_is_done_when_it_would_move(rds, prefix, env):
    source, context, enumerator = streams_assigned(rds, prefix, env, streams=2, parallelism=1)
    del context.held[f"{prefix}1"]  # it finished (the split that a new reader would take)

    context.parallelism = 2
    enumerator.add_reader(1)

    assert f"{prefix}1" in enumerator.done
    assert owners(context) == {f"{prefix}0": 0}
    assert enumerator.pending_count() == 0


def test_no_readers_no_assignment(rds, prefix, env):
    add(rds, f"{prefix}a")
    context = RecordingContext(parallelism=0)

    enumerator = tick(build_source(env, {"streams": f"{prefix}*"}), context)

    assert context.assigned == []
    assert enumerator.pending_count() == 1


def test_a_due_discovery_waits_its_interval(rds, prefix, env):
    source = build_source(env, {"streams": f"{prefix}*", "discovery_interval_ms": 100})
    context = RecordingContext(parallelism=1)
    enumerator = tick(source, context)
    first = enumerator.last_discovery_ms
    time.sleep(0.15)

    enumerator = tick(source, context, enumerator)

    assert enumerator.last_discovery_ms > first


def test_a_split_given_back_after_it_was_taken_for_done_is_read_again(rds, prefix, env):
    add(rds, f"{prefix}a")
    context = RecordingContext(parallelism=1)
    source = build_source(env, {"streams": f"{prefix}*"})
    enumerator = tick(source, context)
    enumerator.splits.pop(f"{prefix}a")
    enumerator.done.add(f"{prefix}a")

    enumerator.add_splits_back([StreamSplit(f"{prefix}a", 7)], 0)

    assert f"{prefix}a" not in enumerator.done
    assert context.assigned[-1][1].split_id == f"{prefix}a"


def test_a_discovered_stream_outside_the_connections_patterns_is_never_read(rds, prefix, env):
    # A connection narrowed while a flow runs (its glob was inside the old patterns):
    # discovery keeps to the patterns the run resolved, whatever the glob matches.
    add(rds, f"{prefix}alice:orders")
    add(rds, f"{prefix}bob:orders", customer="bob")
    connection = ConnectionTarget("alice-redis", "redis", env.redis_url, key_patterns=(f"{prefix}alice:*",))
    narrowed = replace(env, connections={"alice-redis": connection})
    source = build_source(narrowed, {"streams": f"{prefix}*", "connection": "alice-redis"})
    context = RecordingContext(parallelism=1)

    tick(source, context)

    assert list(owners(context)) == [f"{prefix}alice:orders"]
    assert rds.xinfo_groups(f"{prefix}bob:orders") == []
    assert "bob" not in str(source._sample())  # schema inference samples only alice's stream
