"""The contexts of the source model, run on Redis.

Redis holds what is short-lived and shared between processes: which reader instance owns
which subtask (a key with a time-to-live that heartbeats renew), split requests, assignment
notices, source events, the per-flow enumerator lock. What must survive a crash (splits,
checkpoints, who was assigned what) is kept by a ``SplitStore`` the runtime provides.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

import redis

from source_support.api import (
    ReaderInfo,
    SourceEvent,
    SourceReaderContext,
    SourceSplit,
    SplitBacklog,
    SplitEnumeratorContext,
    SplitSerializer,
)

log = logging.getLogger(__name__)

#: How long run-wide marks live in Redis at most (a run's keys are purged when it ends).
DAY_MS = 24 * 3600 * 1000

# Renew or release a key only while it still holds our token.
_RENEW = """
if redis.call('get', KEYS[1]) == ARGV[1] then
  return redis.call('pexpire', KEYS[1], ARGV[2])
end
return 0
"""
# Renew a job's lease, or take it back if it vanished (Redis restarted empty, key deleted):
# 1 held, 0 another holder has it.
_RENEW_OR_RETAKE = """
local holder = redis.call('get', KEYS[1])
if holder == ARGV[1] then
  return redis.call('pexpire', KEYS[1], ARGV[2])
end
if not holder then
  redis.call('set', KEYS[1], ARGV[1], 'px', ARGV[2])
  return 1
end
return 0
"""
_RELEASE = """
if redis.call('get', KEYS[1]) == ARGV[1] then
  return redis.call('del', KEYS[1])
end
return 0
"""


#: The event that tells a reader to drop splits that were moved to another reader; the
#: runtime handles it, a connector never sees it.
SPLITS_REVOKED = "splits-revoked"

#: A split as assigned: (split_id, serialized split, checkpointed position).
AssignedSplit = tuple[str, dict[str, Any], int]


def decode_notices(raw: Sequence[bytes]) -> list[AssignedSplit]:
    """The splits in assignment notices; an empty notice is only a wake-up."""
    return [tuple(json.loads(notice)) for notice in raw if notice]


class HeldLease:
    """What ``RunCoordinator.held_lease`` yields: true while this process got the lease."""

    def __init__(self, held: bool) -> None:
        self.held = held
        #: Set once another process holds the lease (taken after it lapsed or was purged).
        self.lost = threading.Event()

    def __bool__(self) -> bool:
        return self.held


@dataclass
class ReaderInbox:
    stopped: bool
    paused: bool
    #: Records the run's readers committed (counted where a rule needs it; 0 otherwise).
    records_committed: int
    events: list[SourceEvent]
    assigned: list[AssignedSplit]


@dataclass
class PassInputs:
    live: dict[int, str]
    #: True if a reader seen by the last pass has no lease any more (or no pass ran yet)
    readers_gone: bool
    registrations: list[int]
    events: list[tuple[int | None, SourceEvent]]
    #: subtasks of live readers that asked for splits, each once, in order
    requests: list[int]


class SplitStore(Protocol):
    """Durable split state: what was assigned to whom, and how far each split was read."""

    def record_assignments(
        self,
        assignments: dict[int, list[AssignedSplit]],
        tokens: dict[int, str],
        locations: dict[int, str],
    ) -> dict[int, list[AssignedSplit]]:
        """Persists the splits as owned by each subtask's token; returns those it assigned,
        each with its stored checkpoint (a split that is out with a reader is refused)."""

    def owned_splits(self, subtask: int, token: str) -> list[AssignedSplit]:
        """Each unfinished split this token owns, at its checkpoint."""

    def reclaim_expired(self, live: dict[int, str]) -> dict[int, list[AssignedSplit]]:
        """Ends assignments whose reader is not in ``live``; returns their splits by subtask."""

    def revoke_splits(self, split_ids: Sequence[str]) -> list[tuple[int, AssignedSplit]]:
        """Takes the assigned splits among ``split_ids`` back from their owners; returns
        (old owner subtask, split at its checkpoint) for each."""

    def backlog_add(self, payloads: Sequence[dict[str, Any]], *, front: bool) -> None:
        """Queues serialized splits at the tail (or, in order, at the head)."""

    def backlog_head(self, count: int) -> list[tuple[int, dict[str, Any]]]:
        """Up to ``count`` (key, serialized split) pairs from the head, left in place."""

    def backlog_remove(self, keys: Sequence[int]) -> None:
        """Removes the splits of those keys (they were handed out)."""


class RunCoordinator:
    """Redis keys and operations of one run of one flow."""

    def __init__(
        self, client: redis.Redis, run_key: str, *, lease_ms: int = 10_000, namespace: str = "adf"
    ) -> None:
        self.redis = client
        # ``run_key`` must never repeat (a run's random uid, not its database id): a fresh or
        # restored database next to an old Redis must not meet an older run's marks.
        self.prefix = f"{namespace}:run:{run_key}:"
        self.lease_ms = lease_ms
        self._renew = client.register_script(_RENEW)
        self._release = client.register_script(_RELEASE)
        self._renew_or_retake = client.register_script(_RENEW_OR_RETAKE)

    def key(self, *parts: object) -> str:
        return self.prefix + ":".join(str(p) for p in parts)

    # Reader instances: one live token per subtask, kept alive by heartbeats.

    def acquire_reader(self, subtask: int, token: str | None, location: str = "") -> str | None:
        """Takes (or, with ``token``, keeps) the subtask; None if another instance holds it."""
        key = self.key("reader", subtask)
        if token is not None:
            if not self._renew(keys=[key], args=[token, self.lease_ms]):
                return None
            self.redis.hset(self.key("locations"), subtask, location)  # a slice may run elsewhere
            self.note_reader_alive()
            return token
        token = uuid.uuid4().hex
        if not self.redis.set(key, token, nx=True, px=self.lease_ms):
            return None
        pipe = self.redis.pipeline()
        pipe.hset(self.key("locations"), subtask, location)
        pipe.srem(self.key("done"), subtask)
        pipe.rpush(self.key("registrations"), subtask)
        pipe.set(self.key("reader-alive-at"), time.time())
        pipe.execute()
        return token

    def heartbeat(self, subtask: int, token: str, *, ttl_ms: int | None = None) -> bool:
        """Renews the reader's lease, for ``ttl_ms`` if given (e.g. while it waits in a queue)."""
        ttl = ttl_ms or self.lease_ms
        renewed = bool(self._renew(keys=[self.key("reader", subtask)], args=[token, ttl]))
        if renewed:
            self.note_reader_alive()
        return renewed

    def note_reader_alive(self, at: float | None = None) -> None:
        """Records that a reader of the run was alive (or, as a run starts or resumes, is
        expected from) ``at``, by default now: a reader's lease lapses without a trace, and
        a view must still tell, with no tick running, since when the run has had none."""
        self.redis.set(self.key("reader-alive-at"), time.time() if at is None else at)

    def reader_alive_at(self) -> float | None:
        """When a reader of the run was last alive (see ``note_reader_alive``); None if unknown."""
        value = self.redis.get(self.key("reader-alive-at"))
        return float(value) if value is not None else None

    def release_reader(self, subtask: int, token: str, *, done: bool) -> None:
        if done:
            self.redis.sadd(self.key("done"), subtask)
        self._release(keys=[self.key("reader", subtask)], args=[token])

    def live_readers(self, parallelism: int) -> dict[int, str]:
        keys = [self.key("reader", i) for i in range(parallelism)]
        tokens = self.redis.mget(keys) if keys else []
        return {i: t.decode() for i, t in enumerate(tokens) if t is not None}

    def collect_pass(self, parallelism: int) -> PassInputs:
        """What an enumerator pass works on, taken from Redis in one round trip: the live
        readers, and the registrations, source events and split requests since the last
        pass (taken off their queues)."""
        pipe = self.redis.pipeline()
        pipe.mget([self.key("reader", i) for i in range(parallelism)])
        pipe.get(self.key("live-at-last-pass"))
        queues = [self.key("registrations"), self.key("events", "enumerator"), self.key("requests")]
        for key in queues:
            pipe.lrange(key, 0, -1)
        pipe.delete(*queues)
        tokens, last, registrations, events, requests, _ = pipe.execute()
        live = {i: t.decode() for i, t in enumerate(tokens) if t is not None}
        return PassInputs(
            live=live,
            readers_gone=last is None or not set(json.loads(last)) <= set(live.values()),
            registrations=[int(s) for s in registrations],
            events=[self._decode_event(raw) for raw in events],
            requests=[s for s in dict.fromkeys(int(s) for s in requests) if s in live],
        )

    def remember_live(self, live: dict[int, str]) -> None:
        """Records the readers a pass saw (after its assignments are committed): the next
        pass looks for expired leases only if one of them is gone."""
        self.redis.set(self.key("live-at-last-pass"), json.dumps(sorted(live.values())), px=DAY_MS)

    def reader_locations(self) -> dict[int, str]:
        raw = self.redis.hgetall(self.key("locations"))
        return {int(k): v.decode() for k, v in raw.items()}

    def done_readers(self) -> set[int]:
        return {int(s) for s in self.redis.smembers(self.key("done"))}

    def claim_spawn(self, subtask: int) -> bool:
        """True at most once per lease period per subtask, so a queued reader is not doubled."""
        return bool(self.redis.set(self.key("spawned", subtask), 1, nx=True, px=self.lease_ms))

    # Split requests and assignment notices.

    def request_split(self, subtask: int) -> None:
        self.redis.rpush(self.key("requests"), subtask)

    def push_back_split_requests(self, subtasks: Sequence[int]) -> None:
        """Returns requests a pass did not serve to the head of the queue, for the next pass."""
        pipe = self.redis.pipeline()
        pipe.lpush(self.key("requests"), *reversed(subtasks))
        pipe.set(self.key("enum-dirty"), 1)
        pipe.execute()

    def notify_assigned(self, subtask: int, splits: Sequence[AssignedSplit]) -> None:
        """Hands the reader its new splits (payload and checkpoint as stored), waking it;
        an empty list only wakes it (e.g. no more splits)."""
        notices = [json.dumps(split) for split in splits] or [""]
        self.redis.rpush(self.key("assigned", subtask), *notices)

    def wait_assigned(self, subtask: int, timeout_s: float) -> list[AssignedSplit]:
        """Splits assigned since the last call, waiting up to ``timeout_s`` for the first."""
        key = self.key("assigned", subtask)
        first = self.redis.blpop([key], timeout=max(timeout_s, 0.01)) if timeout_s > 0 else None
        rest = self._drain(key)
        return decode_notices(([first[1]] if first else []) + rest)

    def signal_no_more_splits(self, subtask: int, token: str) -> None:
        self.redis.set(self.key("nomore", subtask), token, px=DAY_MS)

    def no_more_splits(self, subtask: int, token: str) -> bool:
        value = self.redis.get(self.key("nomore", subtask))
        return value is not None and value.decode() == token

    # Source events, both ways.

    def send_event(self, target: str, event: SourceEvent, origin: int | None = None) -> None:
        body = {"kind": event.kind, "payload": event.payload, "origin": origin}
        self.redis.rpush(self.key("events", target), json.dumps(body))

    def reader_inbox(self, subtask: int) -> ReaderInbox:
        """What reached reader ``subtask`` since the last call, taken off its queues in one
        round trip: whether the run was stopped or paused (backpressure or a user's hold),
        the enumerator's events and new assignments (a reader of a stream holds its splits
        for good, so it must see a new split while it reads the others)."""
        events, assigned = self.key("events", f"reader:{subtask}"), self.key("assigned", subtask)
        pipe = self.redis.pipeline()
        pipe.exists(self.key("stopped"))
        pipe.exists(self.key("paused"), self.key("held"))
        pipe.get(self.key("records-committed"))
        pipe.lrange(events, 0, -1)
        pipe.lrange(assigned, 0, -1)
        pipe.delete(events, assigned)
        stopped, paused, committed, raw_events, notices, _ = pipe.execute()
        return ReaderInbox(
            stopped=bool(stopped),
            paused=bool(paused),
            records_committed=int(committed or 0),
            events=[self._decode_event(item)[1] for item in raw_events],
            assigned=decode_notices(notices),
        )

    def count_committed(self, records: int) -> None:
        """Adds to the run's count of committed records (for ``after_records``)."""
        pipe = self.redis.pipeline()
        pipe.incrby(self.key("records-committed"), records)
        pipe.pexpire(self.key("records-committed"), DAY_MS)
        pipe.execute()

    def pause(self, paused: bool) -> None:
        """Pauses every reader of the run (backpressure) or lets them go on."""
        if paused:
            self.redis.set(self.key("paused"), 1, px=DAY_MS)
        else:
            self.redis.delete(self.key("paused"))

    def hold(self, held: bool) -> None:
        """Holds every reader of the run (a user's pause) or lets them go on. Apart from the
        backpressure pause, so that the transform catching up never ends a user's pause;
        kept until the run's keys are purged, and set again from the database by each tick."""
        if held:
            self.redis.set(self.key("held"), 1)
        else:
            self.redis.delete(self.key("held"))

    def pop_events(self, target: str) -> list[tuple[int | None, SourceEvent]]:
        return [self._decode_event(raw) for raw in self._drain(self.key("events", target))]

    @staticmethod
    def _decode_event(raw: bytes) -> tuple[int | None, SourceEvent]:
        body = json.loads(raw)
        return body["origin"], SourceEvent(body["kind"], body["payload"])

    # Run-wide flags.

    def stop(self) -> None:
        """Tells every reader of the run to stop; the mark expires after a day."""
        self.redis.set(self.key("stopped"), 1, px=DAY_MS)

    def is_stopped(self) -> bool:
        return bool(self.redis.exists(self.key("stopped")))

    @contextmanager
    def enumerator_lock(self):
        """Holds the run's enumerator lock, yielding False when another tick has it.

        The lock lives for a reader lease and is renewed while held, so a tick whose
        process dies or loses Redis frees it as soon as a lost reader's splits could go
        elsewhere. (Ticks are also serialized by the store, which locks the run's state.)
        A tick that finds the lock taken leaves a ``dirty`` mark; the holder loops once
        more before it lets go, so no request waits for the next periodic tick.
        """
        with self.held_lease("enum-lock", self.lease_ms) as held:
            if not held:
                self.redis.set(self.key("enum-dirty"), 1)
            yield bool(held)

    # Marks and leases of the run's own jobs (queued ticks, the transform).

    def mark_once(self, name: str, ttl_ms: int) -> bool:
        """Sets mark ``name`` unless it is set; True if this call set it."""
        return bool(self.redis.set(self.key(name), 1, nx=True, px=ttl_ms))

    def first_seen(self, name: str, now: float) -> float:
        """The time mark ``name`` was first set (to ``now`` if it is not set yet)."""
        self.redis.set(self.key(name), now, nx=True)
        return float(self.redis.get(self.key(name)) or now)

    def clear_mark(self, name: str) -> None:
        self.redis.delete(self.key(name))

    def is_set(self, name: str) -> bool:
        return bool(self.redis.exists(self.key(name)))

    @contextmanager
    def held_lease(self, name: str, ttl_ms: int):
        """Holds lease ``name`` while the block runs, renewed by a thread; yields a
        ``HeldLease`` that is false if another process holds it, and whose ``lost`` is set
        once another process has taken it (a long job then stops at its next step). A crash
        lets it lapse after ``ttl_ms``.

        A lease that vanished (Redis restarted empty, the key deleted) is taken back if no
        one else took it. A lease only keeps a second process from starting the same work;
        whatever publishes must also be fenced in the database.
        """
        key, token = self.key(name), uuid.uuid4().hex
        if not self.redis.set(key, token, nx=True, px=ttl_ms):
            yield HeldLease(False)
            return
        stop = threading.Event()
        lease = HeldLease(True)

        def renew() -> None:
            while not stop.wait(ttl_ms / 3000):
                try:
                    held = self._renew_or_retake(keys=[key], args=[token, ttl_ms])
                except redis.RedisError as error:  # the lease lapses unless Redis comes back
                    log.warning("could not renew %s: %s", key, error)
                    continue
                if not held and not lease.lost.is_set():
                    log.warning("lease %s was taken by another process", key)
                    lease.lost.set()

        renewer = threading.Thread(target=renew, name=f"lease-{name}", daemon=True)
        renewer.start()
        try:
            yield lease
        finally:
            stop.set()
            renewer.join()
            self._release(keys=[key], args=[token])

    def take_dirty(self) -> bool:
        return bool(self.redis.delete(self.key("enum-dirty")))

    def purge(self) -> None:
        """Deletes every key of this run."""
        for key in self.redis.scan_iter(match=self.prefix + "*", count=1000):
            self.redis.delete(key)

    def _drain(self, key: str) -> list[bytes]:
        pipe = self.redis.pipeline()
        pipe.lrange(key, 0, -1)
        pipe.delete(key)
        items, _ = pipe.execute()
        return items


class RedisEnumeratorContext(SplitEnumeratorContext):
    """The enumerator's view of the run: assignments go to the store, then to Redis."""

    def __init__(
        self,
        coordinator: RunCoordinator,
        store: SplitStore,
        serializer: SplitSerializer,
        *,
        parallelism: int,
        live: dict[int, str],
    ) -> None:
        self.coordinator = coordinator
        self.store = store
        self.serializer = serializer
        self.parallelism = parallelism
        self.live = live
        self._queued: dict[int, list[SourceSplit]] = {}
        #: How many splits were assigned since the last ``flush``.
        self.queued = 0
        self._backlog: StoreBacklog | None = None
        self._locations: dict[int, str] | None = None

    @property
    def current_parallelism(self) -> int:
        return self.parallelism

    def locations(self) -> dict[int, str]:
        """Where each reader runs, read from Redis once per tick."""
        if self._locations is None:
            self._locations = self.coordinator.reader_locations()
        return self._locations

    def registered_readers(self) -> dict[int, ReaderInfo]:
        locations = self.locations()
        return {s: ReaderInfo(s, locations.get(s, "")) for s in self.live}

    def assign_splits(self, assignment: dict[int, Sequence[SourceSplit]]) -> None:
        """Queues the assignment; ``flush`` stores every queued one in a single write."""
        unknown = set(assignment) - set(self.live)
        if unknown:
            raise ValueError(f"cannot assign splits to readers that are not registered: {unknown}")
        for subtask, splits in assignment.items():
            self._queued.setdefault(subtask, []).extend(splits)
            self.queued += len(splits)

    def flush(self) -> int:
        """Stores the queued assignments, then notifies their readers; returns how many."""
        if self._backlog is not None:
            self._backlog.flush()
        if not self._queued:
            return 0
        rows = {
            subtask: [(s.split_id, self.serializer.serialize(s), s.offset.position) for s in splits]
            for subtask, splits in self._queued.items()
            if splits
        }
        self._queued, self.queued = {}, 0
        assigned = self.store.record_assignments(rows, self.live, self.locations())
        for subtask, splits in assigned.items():
            if splits:
                self.coordinator.notify_assigned(subtask, splits)
        return sum(len(splits) for splits in assigned.values())

    def backlog(self) -> StoreBacklog:
        if self._backlog is None:
            self._backlog = StoreBacklog(self.store, self.serializer)
        return self._backlog

    def signal_no_more_splits(self, subtask: int) -> None:
        if subtask not in self.live:
            return  # gone: a reader that registers again asks again
        self.coordinator.signal_no_more_splits(subtask, self.live[subtask])
        self.coordinator.notify_assigned(subtask, [])

    def send_event_to_source_reader(self, subtask: int, event: SourceEvent) -> None:
        self.coordinator.send_event(f"reader:{subtask}", event)

    def revoke_splits(self, split_ids: Sequence[str]) -> list[SourceSplit]:
        self.flush()  # a split queued for a reader in this pass is in the store before it moves
        revoked = self.store.revoke_splits(split_ids)
        by_owner: dict[int, list[str]] = {}
        for owner, (split_id, _, _) in revoked:
            by_owner.setdefault(owner, []).append(split_id)
        for owner, ids in by_owner.items():
            self.coordinator.send_event(f"reader:{owner}", SourceEvent(SPLITS_REVOKED, {"split_ids": ids}))
        return [self.serializer.deserialize(payload).at(position) for _, (_, payload, position) in revoked]


class StoreBacklog(SplitBacklog):
    """The backlog in the ``SplitStore``, written in the tick's transaction.

    Takes are served from a block read once per pass and removed from the store together
    at ``flush``, so a pass that answers many requests makes two statements, not two per
    request.
    """

    BLOCK = 2_000

    def __init__(self, store: SplitStore, serializer: SplitSerializer) -> None:
        self.store, self.serializer = store, serializer
        self._block: list[tuple[int, dict[str, Any]]] = []  # (key, payload) read, not yet taken
        self._taken: list[int] = []

    def append(self, splits: Sequence[SourceSplit]) -> None:
        self.flush()
        self.store.backlog_add([self.serializer.serialize(s) for s in splits], front=False)

    def prepend(self, splits: Sequence[SourceSplit]) -> None:
        self.flush()
        self.store.backlog_add([self.serializer.serialize(s) for s in splits], front=True)

    def take(self, count: int) -> list[SourceSplit]:
        if len(self._block) < count:
            self.flush()
            self._block = self.store.backlog_head(max(count, self.BLOCK))
        given, self._block = self._block[:count], self._block[count:]
        self._taken += [key for key, _ in given]
        return [self.serializer.deserialize(payload) for _, payload in given]

    def flush(self) -> None:
        """Removes what was taken from the store, and forgets what was read ahead."""
        if self._taken:
            self.store.backlog_remove(self._taken)
        self._block, self._taken = [], []


class RedisReaderContext(SourceReaderContext):
    """A reader's view of the run; a split request also asks for a prompt enumerator tick."""

    def __init__(
        self,
        coordinator: RunCoordinator,
        subtask: int,
        on_split_request: Callable[[], None],
    ) -> None:
        self.coordinator = coordinator
        self._subtask = subtask
        self.on_split_request = on_split_request

    @property
    def subtask(self) -> int:
        return self._subtask

    def send_split_request(self) -> None:
        self.coordinator.request_split(self._subtask)
        self.on_split_request()

    def send_source_event_to_coordinator(self, event: SourceEvent) -> None:
        self.coordinator.send_event("enumerator", event, origin=self._subtask)
        self.on_split_request()
