"""RedisRunCoordinator and the Redis contexts, against the real Redis at REDIS_URL."""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from typing import Any

import pytest
import redis

from connectors.files.split import FileSplit, FileSplitSerializer
from source_support.api import SourceEvent
from source_support.coordination import Mark, RedisRunCoordinator, RunEnumeratorContext, RunReaderContext

SHORT_LEASE_MS = 300


@pytest.fixture()
def client() -> redis.Redis:
    client = redis.Redis.from_url(os.environ["REDIS_URL"])
    yield client
    client.close()


@pytest.fixture()
def make_coordinator(client):
    """Coordinators of fresh runs (a uuid run key each), purged after the test."""
    made: list[RedisRunCoordinator] = []

    def make(run_key: str | None = None, **kwargs) -> RedisRunCoordinator:
        coordinator = RedisRunCoordinator(client, run_key or uuid.uuid4().hex, **kwargs)
        made.append(coordinator)
        return coordinator

    yield make
    for coordinator in made:
        coordinator.purge()


@pytest.fixture()
def coordinator(make_coordinator) -> RedisRunCoordinator:
    return make_coordinator()


def run_keys(client: redis.Redis, coordinator: RedisRunCoordinator) -> set[str]:
    return {k.decode() for k in client.scan_iter(match=coordinator.keys.pattern)}


# Reader instances


def test_acquire_reader_gives_a_token_and_refuses_a_second_instance(coordinator):
    token = coordinator.acquire_reader(0, None, "host-a")

    assert token
    assert coordinator.acquire_reader(0, None, "host-b") is None
    assert coordinator.live_readers(1) == {0: token}


def test_subtasks_are_acquired_independently(coordinator):
    first = coordinator.acquire_reader(0, None)
    second = coordinator.acquire_reader(1, None)

    assert first and second and first != second
    assert coordinator.live_readers(3) == {0: first, 1: second}


def test_acquire_with_its_own_token_keeps_the_subtask(coordinator):
    token = coordinator.acquire_reader(2, None)

    assert coordinator.acquire_reader(2, token) == token
    assert coordinator.acquire_reader(2, "someone-else") is None
    assert coordinator.live_readers(3) == {2: token}


def test_acquire_with_a_token_does_not_take_a_free_subtask(coordinator):
    assert coordinator.acquire_reader(0, "stale-token") is None
    assert coordinator.live_readers(1) == {}


def test_acquire_registers_the_reader_and_its_location(coordinator):
    coordinator.acquire_reader(0, None, "host-a:1")
    coordinator.acquire_reader(3, None, "host-b:2")

    assert coordinator.reader_locations() == {0: "host-a:1", 3: "host-b:2"}
    assert coordinator.collect_pass(4).registrations == [0, 3]
    assert coordinator.collect_pass(4).registrations == []


def test_a_lease_expires_after_lease_ms_without_heartbeats(make_coordinator):
    coordinator = make_coordinator(lease_ms=SHORT_LEASE_MS)
    lost = coordinator.acquire_reader(0, None)

    time.sleep(SHORT_LEASE_MS / 1000 * 2)

    assert coordinator.live_readers(1) == {}
    assert coordinator.heartbeat(0, lost) is False
    successor = coordinator.acquire_reader(0, None)
    assert successor and successor != lost
    assert coordinator.acquire_reader(0, lost) is None


def test_heartbeats_keep_a_lease_past_its_first_expiry(make_coordinator, client):
    coordinator = make_coordinator(lease_ms=SHORT_LEASE_MS)
    token = coordinator.acquire_reader(0, None)

    for _ in range(12):
        time.sleep(0.05)
        assert coordinator.heartbeat(0, token) is True

    assert coordinator.live_readers(1) == {0: token}
    assert client.pttl(coordinator.keys.reader(0)) > SHORT_LEASE_MS / 2


def test_a_heartbeat_with_another_token_does_not_renew(make_coordinator, client):
    coordinator = make_coordinator(lease_ms=SHORT_LEASE_MS)
    token = coordinator.acquire_reader(0, None)
    client.pexpire(coordinator.keys.reader(0), 50)

    assert coordinator.heartbeat(0, "impostor") is False
    time.sleep(0.2)

    assert coordinator.live_readers(1) == {}
    assert coordinator.heartbeat(0, token) is False


def test_release_frees_the_subtask_for_a_new_instance(coordinator):
    token = coordinator.acquire_reader(0, None)

    coordinator.release_reader(0, token, done=False)

    assert coordinator.live_readers(1) == {}
    assert coordinator.done_readers() == set()
    assert coordinator.acquire_reader(0, None) is not None


def test_release_with_another_token_leaves_the_owner_in_place(coordinator):
    token = coordinator.acquire_reader(0, None)

    coordinator.release_reader(0, "impostor", done=False)

    assert coordinator.live_readers(1) == {0: token}


def test_a_reader_released_as_done_is_done_until_it_is_acquired_again(coordinator):
    token = coordinator.acquire_reader(1, None)

    coordinator.release_reader(1, token, done=True)
    assert coordinator.done_readers() == {1}

    coordinator.acquire_reader(1, None)
    assert coordinator.done_readers() == set()


def test_live_readers_looks_only_at_subtasks_below_the_parallelism(coordinator):
    coordinator.acquire_reader(0, None)
    coordinator.acquire_reader(5, None)

    assert set(coordinator.live_readers(2)) == {0}
    assert coordinator.live_readers(0) == {}


def test_claim_spawn_succeeds_once_per_subtask_per_lease(make_coordinator):
    coordinator = make_coordinator(lease_ms=SHORT_LEASE_MS)

    assert coordinator.claim_spawn(0) is True
    assert coordinator.claim_spawn(0) is False
    assert coordinator.claim_spawn(1) is True
    time.sleep(SHORT_LEASE_MS / 1000 * 2)
    assert coordinator.claim_spawn(0) is True


# Split requests and assignment notices


def test_a_pass_takes_requests_of_live_readers_once_in_order_without_repeats(coordinator):
    for subtask in (0, 1, 2):
        coordinator.acquire_reader(subtask, None)
    for subtask in (2, 0, 2, 5, 1, 0):
        coordinator.request_split(subtask)

    assert coordinator.collect_pass(6).requests == [2, 0, 1]
    assert coordinator.collect_pass(6).requests == []


def test_a_pass_knows_whether_a_reader_of_the_last_pass_is_gone(make_coordinator):
    coordinator = make_coordinator(lease_ms=SHORT_LEASE_MS)
    assert coordinator.collect_pass(2).readers_gone is True  # nothing known yet
    first = coordinator.acquire_reader(0, None)
    coordinator.remember_live(coordinator.collect_pass(2).live)

    second = coordinator.acquire_reader(1, None)
    coordinator.heartbeat(0, first)
    assert coordinator.collect_pass(2).readers_gone is False  # one came, none left
    coordinator.remember_live({0: first, 1: second})

    time.sleep(SHORT_LEASE_MS / 1000 * 2)
    assert coordinator.collect_pass(2).readers_gone is True


def _assigned(split_id: str, position: int = 0) -> tuple[str, dict[str, Any], int]:
    return (split_id, {"path": f"/d/{split_id}"}, position)


def test_wait_assigned_returns_the_splits_notified_since_the_last_call(coordinator):
    coordinator.notify_assigned(0, [_assigned("a"), _assigned("b", 7)])
    coordinator.notify_assigned(0, [_assigned("c")])
    coordinator.notify_assigned(1, [_assigned("other")])

    assert coordinator.wait_assigned(0, 1.0) == [_assigned("a"), _assigned("b", 7), _assigned("c")]
    assert coordinator.wait_assigned(0, 0) == []
    assert coordinator.wait_assigned(1, 0) == [_assigned("other")]


def test_one_notice_carries_a_whole_assignment_and_single_split_notices_still_read(coordinator):
    splits = [_assigned(f"s{i}", i) for i in range(300)]
    coordinator.notify_assigned(0, splits)
    assert coordinator.redis.llen(coordinator.keys.assigned(0)) == 1
    # A notice of one split alone, as a reader of an earlier version may still find.
    coordinator.redis.rpush(coordinator.keys.assigned(0), json.dumps(_assigned("old", 5)))

    assert coordinator.wait_assigned(0, 1.0) == [*splits, _assigned("old", 5)]


def test_wait_assigned_without_timeout_does_not_block_and_drains(coordinator):
    assert coordinator.wait_assigned(0, 0) == []

    coordinator.notify_assigned(0, [_assigned("a")])
    assert coordinator.wait_assigned(0, 0) == [_assigned("a")]


def test_wait_assigned_wakes_when_splits_are_assigned_while_it_waits(coordinator):
    got: list[list] = []
    waiter = threading.Thread(target=lambda: got.append(coordinator.wait_assigned(0, 30)))
    waiter.start()
    time.sleep(0.1)

    coordinator.notify_assigned(0, [_assigned("a")])

    # A waiter that was not woken would sit out its 30 s timeout.
    waiter.join(timeout=10)
    assert not waiter.is_alive()
    assert got == [[_assigned("a")]]


def test_a_commit_wakes_the_transform_waiting_for_one(coordinator):
    got: list[bool] = []
    waiter = threading.Thread(target=lambda: got.append(coordinator.wait_committed(30)))
    waiter.start()
    time.sleep(0.1)

    coordinator.note_committed()

    # A waiter that was not woken would sit out its 30 s timeout.
    waiter.join(timeout=10)
    assert not waiter.is_alive()
    assert got == [True]


def test_commits_made_before_a_look_are_seen_once_and_many_count_as_one(coordinator, client):
    for _ in range(5):
        coordinator.note_committed()

    assert client.llen(coordinator.keys.committed) == 1
    assert coordinator.take_committed() is True
    assert coordinator.take_committed() is False
    assert coordinator.wait_committed(0) is False

    coordinator.note_committed()
    assert coordinator.wait_committed(0.01) is True
    assert coordinator.wait_committed(0.01) is False


def test_push_back_split_requests_serves_them_first_in_the_next_pass(coordinator):
    for subtask in (1, 2, 3, 4):
        coordinator.acquire_reader(subtask, None)
    for subtask in (1, 2, 3):
        coordinator.request_split(subtask)
    served, rest = coordinator.collect_pass(5).requests[:1], [2, 3]
    coordinator.request_split(4)

    coordinator.push_back_split_requests(rest)

    assert served == [1]
    assert coordinator.take_dirty() is True
    assert coordinator.collect_pass(5).requests == [2, 3, 4]


def test_an_empty_assignment_only_wakes_the_waiter(coordinator, client):
    got: list[list[str]] = []
    waiter = threading.Thread(target=lambda: got.append(coordinator.wait_assigned(3, 30)))
    waiter.start()
    time.sleep(0.1)

    coordinator.notify_assigned(3, [])

    waiter.join(timeout=10)
    assert not waiter.is_alive()
    assert got == [[]]
    assert client.llen(coordinator.keys.assigned(3)) == 0


def test_no_more_splits_is_signalled_to_one_reader_instance(coordinator):
    first = coordinator.acquire_reader(0, None)
    coordinator.signal_no_more_splits(0, first)

    assert coordinator.no_more_splits(0, first) is True
    assert coordinator.no_more_splits(0, "a-later-instance") is False
    assert coordinator.no_more_splits(1, first) is False


# Source events


def test_reader_events_reach_the_enumerator_with_their_origin(coordinator):
    coordinator.send_to_enumerator(SourceEvent("progress", {"files": 3}), origin=2)
    coordinator.send_to_enumerator(SourceEvent("hello"), origin=0)

    assert coordinator.collect_pass(1).events == [
        (2, SourceEvent("progress", {"files": 3})),
        (0, SourceEvent("hello", {})),
    ]
    assert coordinator.collect_pass(1).events == []


def test_enumerator_events_reach_only_their_reader(coordinator):
    coordinator.send_to_reader(1, SourceEvent("rescan", {"path": "/d"}))

    assert coordinator.reader_inbox(0).events == []
    assert coordinator.reader_inbox(1).events == [SourceEvent("rescan", {"path": "/d"})]


# Run-wide flags, the enumerator lock, purge


def test_stop_is_seen_by_every_coordinator_of_the_run(make_coordinator):
    run_key = uuid.uuid4().hex
    one, other = make_coordinator(run_key), make_coordinator(run_key)

    assert other.is_stopped() is False
    one.stop()

    assert other.is_stopped() is True
    assert make_coordinator().is_stopped() is False


def test_the_enumerator_lock_is_held_by_one_tick_at_a_time(make_coordinator):
    run_key = uuid.uuid4().hex
    tick, other_tick = make_coordinator(run_key), make_coordinator(run_key)

    with tick.enumerator_lock() as held:
        assert held is True
        with other_tick.enumerator_lock() as other_held:
            assert other_held is False

    with other_tick.enumerator_lock() as held_after_release:
        assert held_after_release is True


def test_a_tick_refused_the_lock_marks_the_run_dirty_once(coordinator):
    assert coordinator.take_dirty() is False

    with coordinator.enumerator_lock() as held:
        assert held
        with coordinator.enumerator_lock() as refused:
            assert refused is False
        with coordinator.enumerator_lock():
            pass
        assert coordinator.take_dirty() is True
        assert coordinator.take_dirty() is False


def test_the_enumerator_lock_is_released_when_the_holder_raises(coordinator):
    with pytest.raises(RuntimeError), coordinator.enumerator_lock() as held:
        assert held
        raise RuntimeError("tick failed")

    with coordinator.enumerator_lock() as held_again:
        assert held_again is True


def test_an_old_holder_leaving_keeps_the_new_holders_lock(make_coordinator, client):
    run_key = uuid.uuid4().hex
    old, new = make_coordinator(run_key, lease_ms=300), make_coordinator(run_key, lease_ms=300)
    old_lock = old.enumerator_lock()
    assert old_lock.__enter__() is True
    client.delete(old.keys.mark(Mark.ENUMERATOR_LOCK))  # as if it lapsed while its holder had no Redis
    new_lock = new.enumerator_lock()
    assert new_lock.__enter__() is True

    old_lock.__exit__(None, None, None)

    with old.enumerator_lock() as held:
        assert held is False
    new_lock.__exit__(None, None, None)


def test_the_enumerator_lock_lives_a_lease_and_is_renewed_while_held(make_coordinator, client):
    coordinator = make_coordinator(lease_ms=SHORT_LEASE_MS)

    with coordinator.enumerator_lock() as held:
        assert held is True
        assert 0 < client.pttl(coordinator.keys.mark(Mark.ENUMERATOR_LOCK)) <= SHORT_LEASE_MS
        time.sleep(SHORT_LEASE_MS / 1000 * 3)
        with coordinator.enumerator_lock() as other:
            assert other is False

    assert not coordinator.is_set(Mark.ENUMERATOR_LOCK)


def test_backpressure_ending_never_ends_a_users_hold(coordinator):
    coordinator.user_hold_set(True)
    coordinator.backpressure_set(True)
    assert coordinator.reader_inbox(0).paused

    coordinator.backpressure_set(False)  # the transform caught up

    assert (coordinator.backpressure_on(), coordinator.user_hold_on()) == (False, True)
    assert coordinator.reader_inbox(0).paused
    coordinator.user_hold_set(False)  # the user resumed
    assert not coordinator.reader_inbox(0).paused


def test_purge_deletes_every_key_of_the_run_and_no_other(make_coordinator, client):
    coordinator, neighbour = make_coordinator(), make_coordinator()
    for c in (coordinator, neighbour):
        token = c.acquire_reader(0, None, "here")
        c.request_split(0)
        c.notify_assigned(0, [_assigned("a")])
        c.signal_no_more_splits(0, token)
        c.send_to_enumerator(SourceEvent("x"), origin=0)
        c.claim_spawn(0)
        c.stop()
    neighbour_keys = run_keys(client, neighbour)
    assert len(run_keys(client, coordinator)) == len(neighbour_keys) >= 8

    coordinator.purge()

    assert run_keys(client, coordinator) == set()
    assert run_keys(client, neighbour) == neighbour_keys


# The Redis contexts


class InMemorySplitStore:
    """A SplitStore (a Protocol we own) kept in a list, to see what the context records.
    It assigns what it is given, except split ids in ``refuse`` (as if out with a reader)."""

    def __init__(self, refuse: set[str] = frozenset()) -> None:
        self.recorded: list[tuple[dict[int, list[tuple[str, dict[str, Any], int]]], dict[int, str]]] = []
        self.refuse = refuse

    def record_assignments(self, assignments, tokens, locations):
        self.recorded.append((assignments, dict(tokens)))
        return {s: [row for row in rows if row[0] not in self.refuse] for s, rows in assignments.items()}

    def owned_splits(self, subtask, token):
        return []

    def reclaim_expired(self, live):
        return {}


def test_enumerator_context_records_queued_assignments_at_flush_then_wakes_the_readers(coordinator):
    token = coordinator.acquire_reader(0, None, "host-a")
    store = InMemorySplitStore()
    context = RunEnumeratorContext(coordinator, store, FileSplitSerializer(), parallelism=2, live={0: token})
    split = FileSplit("/d/a.csv", 0, 100, 40)

    context.assign_split(split, 0)
    assert store.recorded == [] and coordinator.wait_assigned(0, 0) == []
    assert context.queued == 1
    assert context.flush() == 1

    row = ("/d/a.csv@0", FileSplitSerializer().serialize(split), 40)
    assert store.recorded == [({0: [row]}, {0: token})]
    assert coordinator.wait_assigned(0, 0) == [row]
    assert context.registered_readers()[0].location == "host-a"
    assert context.current_parallelism == 2
    assert context.queued == 0


def test_enumerator_context_announces_only_what_the_store_assigned(coordinator):
    token = coordinator.acquire_reader(0, None)
    store = InMemorySplitStore(refuse={"/d/a.csv@0"})
    context = RunEnumeratorContext(coordinator, store, FileSplitSerializer(), parallelism=1, live={0: token})

    context.assign_splits({0: [FileSplit("/d/a.csv", 0, 100, 0), FileSplit("/d/b.csv", 0, 100, 0)]})

    assert context.flush() == 1
    assert [split_id for split_id, _, _ in coordinator.wait_assigned(0, 0)] == ["/d/b.csv@0"]


def test_enumerator_context_refuses_to_assign_to_an_unregistered_reader(coordinator):
    store = InMemorySplitStore()
    context = RunEnumeratorContext(coordinator, store, FileSplitSerializer(), parallelism=2, live={})

    with pytest.raises(ValueError, match="not registered"):
        context.assign_split(FileSplit("/d/a.csv", 0, 100, 0), 1)

    assert store.recorded == []
    assert coordinator.wait_assigned(1, 0) == []


def test_enumerator_context_signals_no_more_splits_to_the_live_instance_and_wakes_it(coordinator):
    token = coordinator.acquire_reader(1, None)
    context = RunEnumeratorContext(
        coordinator, InMemorySplitStore(), FileSplitSerializer(), parallelism=2, live={1: token}
    )

    context.signal_no_more_splits(1)

    assert coordinator.no_more_splits(1, token) is True
    assert coordinator.redis.llen(coordinator.keys.assigned(1)) == 1


def test_reader_context_requests_a_split_and_a_prompt_tick(coordinator):
    ticks: list[str] = []
    context = RunReaderContext(coordinator, 4, lambda: ticks.append("tick"))

    context.send_split_request()
    context.send_source_event_to_coordinator(SourceEvent("done", {"n": 1}))

    coordinator.acquire_reader(4, None)
    inputs = coordinator.collect_pass(5)
    assert inputs.requests == [4]
    assert inputs.events == [(4, SourceEvent("done", {"n": 1}))]
    assert ticks == ["tick", "tick"]
    assert context.subtask == 4


def test_held_lease_is_exclusive_outlives_its_ttl_while_held_and_is_released(coordinator):
    with coordinator.held_lease(Mark.TRANSFORM_LEASE, 300) as first:
        with coordinator.held_lease(Mark.TRANSFORM_LEASE, 300) as second:
            assert (bool(first), bool(second)) == (True, False)
        time.sleep(0.8)  # more than two time-to-lives: the renewing thread keeps it
        assert coordinator.is_set(Mark.TRANSFORM_LEASE)
    assert not coordinator.is_set(Mark.TRANSFORM_LEASE)


def test_held_lease_says_when_another_process_took_it(coordinator):
    from tests.helpers import wait_until

    with coordinator.held_lease(Mark.TRANSFORM_LEASE, 300) as held:
        coordinator.purge()  # e.g. a resume purges a stopped run's keys...
        coordinator.redis.set(
            coordinator.keys.mark(Mark.TRANSFORM_LEASE), "another-driver", px=10_000
        )  # ...and one takes it
        wait_until(held.lost.is_set, 5, lambda: "the lease was not seen lost")

        assert (
            coordinator.redis.get(coordinator.keys.mark(Mark.TRANSFORM_LEASE)) == b"another-driver"
        )  # not taken back


def test_mark_once_is_set_by_one_caller_until_cleared(coordinator):
    assert coordinator.mark_once(Mark.TICK_QUEUED, 10_000) is True
    assert coordinator.mark_once(Mark.TICK_QUEUED, 10_000) is False
    coordinator.clear_mark(Mark.TICK_QUEUED)
    assert coordinator.mark_once(Mark.TICK_QUEUED, 10_000) is True


def test_lease_keeper_keeps_the_lease_through_a_block_longer_than_the_lease(make_coordinator):
    from source_support.runtime import LeaseKeeper

    coordinator = make_coordinator(lease_ms=300)
    token = coordinator.acquire_reader(0, None)
    keeper = LeaseKeeper(coordinator, 0, token)
    keeper.start()
    try:
        time.sleep(1.2)  # a parse four leases long: no heartbeat from the reader loop meanwhile

        assert coordinator.acquire_reader(0, None) is None  # still ours
        assert not keeper.lost.is_set()
        coordinator.redis.delete(coordinator.keys.reader(0))  # e.g. Redis restarted empty
        coordinator.acquire_reader(0, None)  # ... and another instance took the reader
        assert keeper.lost.wait(10)
    finally:
        keeper.stop()


def test_a_batch_reaches_redis_when_its_block_ends_and_not_after_an_error(coordinator):
    with coordinator.batched() as batch:
        batch.notify_assigned(0, [_assigned("a")])
        assert coordinator.wait_assigned(0, 0) == []  # queued, not sent yet
    assert coordinator.wait_assigned(0, 0) == [_assigned("a")]

    with pytest.raises(RuntimeError), coordinator.batched() as batch:
        batch.notify_assigned(0, [_assigned("b")])
        raise RuntimeError("the pass failed")
    assert coordinator.wait_assigned(0, 0) == []


def test_the_key_layout_is_the_one_running_deployments_have_in_redis():
    keys = RedisRunCoordinator(redis.Redis(), "r1").keys

    assert [
        keys.reader(2),
        keys.spawned(2),
        keys.assigned(2),
        keys.no_more_splits(2),
        keys.reader_events(2),
    ] == [
        "adf:run:r1:reader:2",
        "adf:run:r1:spawned:2",
        "adf:run:r1:assigned:2",
        "adf:run:r1:nomore:2",
        "adf:run:r1:events:reader:2",
    ]
    assert [
        keys.locations,
        keys.done,
        keys.registrations,
        keys.requests,
        keys.enumerator_events,
        keys.reader_alive_at,
        keys.live_at_last_pass,
        keys.records_committed,
        keys.committed,
        keys.pattern,
    ] == [
        "adf:run:r1:locations",
        "adf:run:r1:done",
        "adf:run:r1:registrations",
        "adf:run:r1:requests",
        "adf:run:r1:events:enumerator",
        "adf:run:r1:reader-alive-at",
        "adf:run:r1:live-at-last-pass",
        "adf:run:r1:records-committed",
        "adf:run:r1:committed",
        "adf:run:r1:*",
    ]


def test_the_marks_keep_the_key_names_running_deployments_have_in_redis():
    keys = RedisRunCoordinator(redis.Redis(), "r1").keys

    assert {mark.name: keys.mark(mark) for mark in Mark} == {
        "STOPPED": "adf:run:r1:stopped",
        "BACKPRESSURE": "adf:run:r1:paused",
        "USER_HOLD": "adf:run:r1:held",
        "ENUMERATOR_LOCK": "adf:run:r1:enum-lock",
        "ENUMERATOR_DIRTY": "adf:run:r1:enum-dirty",
        "TICK_QUEUED": "adf:run:r1:tick-queued",
        "METRICS_DUE": "adf:run:r1:metrics-due",
        "CHECKPOINT_DUE": "adf:run:r1:checkpoint-due",
        "NO_READER_SINCE": "adf:run:r1:no-reader-since",
        "TRANSFORM_LEASE": "adf:run:r1:transform-lease",
        "TRANSFORM_QUEUED": "adf:run:r1:transform-queued",
    }
