"""The contexts of the source model, run on Redis.

Redis holds what is short-lived and shared between processes: which reader instance owns
which subtask (a key with a time-to-live that heartbeats renew), split requests, assignment
notices, source events, the per-flow enumerator lock. What must survive a crash (splits,
checkpoints, who was assigned what) is kept by a ``SplitStore`` the runtime provides.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from typing import Any, Protocol

import redis

from source_support.api import (
    ReaderInfo,
    SourceEvent,
    SourceReaderContext,
    SourceSplit,
    SplitEnumeratorContext,
    SplitSerializer,
)

# Renew or release a key only while it still holds our token.
_RENEW = """
if redis.call('get', KEYS[1]) == ARGV[1] then
  return redis.call('pexpire', KEYS[1], ARGV[2])
end
return 0
"""
_RELEASE = """
if redis.call('get', KEYS[1]) == ARGV[1] then
  return redis.call('del', KEYS[1])
end
return 0
"""


class SplitStore(Protocol):
    """Durable split state: what was assigned to whom, and how far each split was read."""

    def record_assignments(
        self,
        assignments: dict[int, list[tuple[str, dict[str, Any], int]]],
        tokens: dict[int, str],
    ) -> None:
        """Persists (split_id, payload, position) triples as owned by each subtask's token."""

    def owned_splits(self, subtask: int, token: str) -> list[tuple[dict[str, Any], int]]:
        """The (payload, checkpointed position) of each unfinished split this token owns."""

    def reclaim_expired(self, live: dict[int, str]) -> dict[int, list[tuple[dict[str, Any], int]]]:
        """Ends assignments whose reader is not in ``live``; returns their splits by subtask."""


class RunCoordinator:
    """Redis keys and operations of one run of one flow."""

    def __init__(self, client: redis.Redis, run_key: str, *, lease_ms: int = 10_000) -> None:
        self.redis = client
        self.prefix = f"adf:run:{run_key}:"
        self.lease_ms = lease_ms
        self._renew = client.register_script(_RENEW)
        self._release = client.register_script(_RELEASE)

    def key(self, *parts: object) -> str:
        return self.prefix + ":".join(str(p) for p in parts)

    # Reader instances: one live token per subtask, kept alive by heartbeats.

    def acquire_reader(self, subtask: int, token: str | None, location: str = "") -> str | None:
        """Takes (or, with ``token``, keeps) the subtask; None if another instance holds it."""
        key = self.key("reader", subtask)
        if token is not None:
            return token if self._renew(keys=[key], args=[token, self.lease_ms]) else None
        token = uuid.uuid4().hex
        if not self.redis.set(key, token, nx=True, px=self.lease_ms):
            return None
        pipe = self.redis.pipeline()
        pipe.hset(
            self.key("readers"),
            subtask,
            json.dumps({"token": token, "location": location}),
        )
        pipe.srem(self.key("done"), subtask)
        pipe.rpush(self.key("registrations"), subtask)
        pipe.execute()
        return token

    def heartbeat(self, subtask: int, token: str, *, ttl_ms: int | None = None) -> bool:
        """Renews the reader's lease, for ``ttl_ms`` if given (e.g. while it waits in a queue)."""
        ttl = ttl_ms or self.lease_ms
        return bool(self._renew(keys=[self.key("reader", subtask)], args=[token, ttl]))

    def release_reader(self, subtask: int, token: str, *, done: bool) -> None:
        if done:
            self.redis.sadd(self.key("done"), subtask)
        self._release(keys=[self.key("reader", subtask)], args=[token])

    def live_readers(self, parallelism: int) -> dict[int, str]:
        keys = [self.key("reader", i) for i in range(parallelism)]
        tokens = self.redis.mget(keys) if keys else []
        return {i: t.decode() for i, t in enumerate(tokens) if t is not None}

    def reader_locations(self) -> dict[int, str]:
        raw = self.redis.hgetall(self.key("readers"))
        return {int(k): json.loads(v).get("location", "") for k, v in raw.items()}

    def done_readers(self) -> set[int]:
        return {int(s) for s in self.redis.smembers(self.key("done"))}

    def pop_registrations(self) -> list[int]:
        return [int(s) for s in self._drain(self.key("registrations"))]

    def claim_spawn(self, subtask: int) -> bool:
        """True at most once per lease period per subtask, so a queued reader is not doubled."""
        return bool(self.redis.set(self.key("spawned", subtask), 1, nx=True, px=self.lease_ms))

    # Split requests and assignment notices.

    def request_split(self, subtask: int) -> None:
        self.redis.rpush(self.key("requests"), subtask)

    def pop_split_requests(self) -> list[int]:
        return list(dict.fromkeys(int(s) for s in self._drain(self.key("requests"))))

    def notify_assigned(self, subtask: int, split_ids: Sequence[str]) -> None:
        """Wakes the subtask's reader; an empty list only wakes it (e.g. no more splits)."""
        self.redis.rpush(self.key("assigned", subtask), *(split_ids or [""]))

    def wait_assigned(self, subtask: int, timeout_s: float) -> list[str]:
        """Split ids assigned since the last call, waiting up to ``timeout_s`` for the first."""
        key = self.key("assigned", subtask)
        first = self.redis.blpop([key], timeout=max(timeout_s, 0.01)) if timeout_s > 0 else None
        rest = self._drain(key)
        ids = ([first[1]] if first else []) + rest
        return [i.decode() for i in ids if i]

    def signal_no_more_splits(self, subtask: int, token: str) -> None:
        self.redis.set(self.key("nomore", subtask), token, px=24 * 3600 * 1000)

    def no_more_splits(self, subtask: int, token: str) -> bool:
        value = self.redis.get(self.key("nomore", subtask))
        return value is not None and value.decode() == token

    # Source events, both ways.

    def send_event(self, target: str, event: SourceEvent, origin: int | None = None) -> None:
        body = {"kind": event.kind, "payload": event.payload, "origin": origin}
        self.redis.rpush(self.key("events", target), json.dumps(body))

    def pop_events(self, target: str) -> list[tuple[int | None, SourceEvent]]:
        out = []
        for raw in self._drain(self.key("events", target)):
            body = json.loads(raw)
            out.append((body["origin"], SourceEvent(body["kind"], body["payload"])))
        return out

    # Run-wide flags.

    def stop(self) -> None:
        """Tells every reader of the run to stop; the mark expires after a day."""
        self.redis.set(self.key("stopped"), 1, px=24 * 3600 * 1000)

    def is_stopped(self) -> bool:
        return bool(self.redis.exists(self.key("stopped")))

    @contextmanager
    def enumerator_lock(self, timeout_ms: int = 60_000):
        """Holds the run's enumerator lock, yielding False when another tick has it.

        A tick that finds the lock taken leaves a ``dirty`` mark; the holder loops once
        more before it lets go, so no request waits for the next periodic tick.
        """
        key, token = self.key("enum-lock"), uuid.uuid4().hex
        if not self.redis.set(key, token, nx=True, px=timeout_ms):
            self.redis.set(self.key("enum-dirty"), 1)
            yield False
            return
        try:
            yield True
        finally:
            self._release(keys=[key], args=[token])

    # Marks and leases of the run's own jobs (queued ticks, the transform).

    def mark_once(self, name: str, ttl_ms: int) -> bool:
        """Sets mark ``name`` unless it is set; True if this call set it."""
        return bool(self.redis.set(self.key(name), 1, nx=True, px=ttl_ms))

    def clear_mark(self, name: str) -> None:
        self.redis.delete(self.key(name))

    def is_set(self, name: str) -> bool:
        return bool(self.redis.exists(self.key(name)))

    @contextmanager
    def held_lease(self, name: str, ttl_ms: int):
        """Holds lease ``name`` while the block runs, renewed by a thread; yields False if
        another process holds it. A crash lets it lapse after ``ttl_ms``."""
        key, token = self.key(name), uuid.uuid4().hex
        if not self.redis.set(key, token, nx=True, px=ttl_ms):
            yield False
            return
        stop = threading.Event()

        def renew() -> None:
            while not stop.wait(ttl_ms / 3000):
                self._renew(keys=[key], args=[token, ttl_ms])

        renewer = threading.Thread(target=renew, name=f"lease-{name}", daemon=True)
        renewer.start()
        try:
            yield True
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

    @property
    def current_parallelism(self) -> int:
        return self.parallelism

    def registered_readers(self) -> dict[int, ReaderInfo]:
        locations = self.coordinator.reader_locations()
        return {s: ReaderInfo(s, locations.get(s, "")) for s in self.live}

    def assign_splits(self, assignment: dict[int, Sequence[SourceSplit]]) -> None:
        """Queues the assignment; ``flush`` stores every queued one in a single write."""
        unknown = set(assignment) - set(self.live)
        if unknown:
            raise ValueError(f"cannot assign splits to readers that are not registered: {unknown}")
        for subtask, splits in assignment.items():
            self._queued.setdefault(subtask, []).extend(splits)

    def flush(self) -> int:
        """Stores the queued assignments, then notifies their readers; returns how many."""
        if not self._queued:
            return 0
        rows = {
            subtask: [(s.split_id, self.serializer.serialize(s), s.offset.position) for s in splits]
            for subtask, splits in self._queued.items()
        }
        self.store.record_assignments(rows, self.live, self.coordinator.reader_locations())
        for subtask, splits in self._queued.items():
            if splits:
                self.coordinator.notify_assigned(subtask, [s.split_id for s in splits])
        count = sum(len(splits) for splits in self._queued.values())
        self._queued = {}
        return count

    def signal_no_more_splits(self, subtask: int) -> None:
        self.coordinator.signal_no_more_splits(subtask, self.live[subtask])
        self.coordinator.notify_assigned(subtask, [])

    def send_event_to_source_reader(self, subtask: int, event: SourceEvent) -> None:
        self.coordinator.send_event(f"reader:{subtask}", event)


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
