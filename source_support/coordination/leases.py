"""Leases on Redis: a key that holds its holder's token for a time-to-live, renewed while
held. Reader leases say which instance owns which subtask (heartbeats renew them); job
leases (``hold_lease``) keep a second process from starting the same job."""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Generator
from contextlib import contextmanager

import redis

from source_support.coordination.keys import Keys
from source_support.coordination.redis_commands import RedisCommands

log = logging.getLogger(__name__)

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
# Sets KEYS[1] to the server's clock (seconds since the epoch), unless ARGV[1] is "nx" and it
# is set already; returns the key's value. The time is Redis's, never a worker's: workers
# whose clocks disagree must still agree on how long ago something happened.
_STAMP = """
local t = redis.call('TIME')
local now = string.format('%d.%06d', t[1], t[2])
if ARGV[1] == 'nx' then
  redis.call('set', KEYS[1], now, 'NX')
  return redis.call('get', KEYS[1])
end
redis.call('set', KEYS[1], now)
return now
"""
_RELEASE = """
if redis.call('get', KEYS[1]) == ARGV[1] then
  return redis.call('del', KEYS[1])
end
return 0
"""


class LeaseScripts:
    """The Lua scripts that renew and release a lease only while it holds our token."""

    def __init__(self, client: RedisCommands) -> None:
        self.renew = client.script(_RENEW)
        self.release = client.script(_RELEASE)
        self.renew_or_retake = client.script(_RENEW_OR_RETAKE)
        self.stamp = client.script(_STAMP)


class HeldLease:
    """What ``hold_lease`` yields: true while this process got the lease."""

    def __init__(self, held: bool) -> None:
        self.held = held
        #: Set once another process holds the lease (taken after it lapsed or was purged).
        self.lost = threading.Event()

    def __bool__(self) -> bool:
        return self.held


@contextmanager
def hold_lease(
    client: RedisCommands, scripts: LeaseScripts, key: str, ttl_ms: int, *, name: str
) -> Generator[HeldLease]:
    """Holds the lease ``key`` while the block runs, renewed by a thread; yields a
    ``HeldLease`` that is false if another process holds it, and whose ``lost`` is set
    once another process has taken it (a long job then stops at its next step). A crash
    lets it lapse after ``ttl_ms``.

    A lease that vanished (Redis restarted empty, the key deleted) is taken back if no
    one else took it. A lease only keeps a second process from starting the same work;
    whatever publishes must also be fenced in the database.
    """
    token = uuid.uuid4().hex
    if not client.set(key, token, nx=True, px=ttl_ms):
        yield HeldLease(False)
        return
    stop = threading.Event()
    lease = HeldLease(True)

    def renew() -> None:
        while not stop.wait(ttl_ms / 3000):
            try:
                held = scripts.renew_or_retake(keys=[key], args=[token, ttl_ms])
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
        scripts.release(keys=[key], args=[token])


class ReaderLeases:
    """Reader instances: one live token per subtask, kept alive by heartbeats."""

    def __init__(self, client: RedisCommands, keys: Keys, scripts: LeaseScripts, lease_ms: int) -> None:
        self.redis, self.keys, self.scripts, self.lease_ms = client, keys, scripts, lease_ms

    def acquire(self, subtask: int, token: str | None, location: str = "") -> str | None:
        """Takes (or, with ``token``, keeps) the subtask; None if another instance holds it."""
        key = self.keys.reader(subtask)
        if token is not None:
            if not self.scripts.renew(keys=[key], args=[token, self.lease_ms]):
                return None
            self.redis.hset(self.keys.locations, str(subtask), location)  # a slice may run elsewhere
            self.note_alive()
            return token
        token = uuid.uuid4().hex
        if not self.redis.set(key, token, nx=True, px=self.lease_ms):
            return None
        pipe = self.redis.pipeline()
        pipe.hset(self.keys.locations, str(subtask), location)
        pipe.srem(self.keys.done, subtask)
        pipe.rpush(self.keys.registrations, subtask)
        pipe.execute()
        self.note_alive()
        return token

    def heartbeat(self, subtask: int, token: str, *, ttl_ms: int | None = None) -> bool:
        """Renews the reader's lease, for ``ttl_ms`` if given (e.g. while it waits in a queue)."""
        ttl = ttl_ms or self.lease_ms
        renewed = bool(self.scripts.renew(keys=[self.keys.reader(subtask)], args=[token, ttl]))
        if renewed:
            self.note_alive()
        return renewed

    def note_alive(self, at: float | None = None) -> None:
        """Records that a reader of the run was alive (or, as a run starts or resumes, is
        expected from) ``at``, by default now on Redis's clock (``RedisCommands.time``; a
        given ``at`` must be on that clock too): a reader's lease lapses without a trace,
        and a view must still tell, with no tick running, since when the run has had none."""
        if at is None:
            self.scripts.stamp(keys=[self.keys.reader_alive_at], args=[""])
        else:
            self.redis.set(self.keys.reader_alive_at, at)

    def alive_since(self) -> float:
        """When a reader of the run was last alive (see ``note_alive``), on Redis's clock;
        if nothing says (Redis lost the key), from now on."""
        return float(self.scripts.stamp.text(keys=[self.keys.reader_alive_at], args=["nx"]) or 0)

    def alive_at(self) -> float | None:
        """When a reader of the run was last alive (see ``note_alive``); None if unknown."""
        value = self.redis.get(self.keys.reader_alive_at)
        return float(value) if value is not None else None

    def release(self, subtask: int, token: str, *, done: bool) -> None:
        """Gives the subtask up; ``done`` records that its reader has no more splits."""
        if done:
            self.redis.sadd(self.keys.done, subtask)
        self.scripts.release(keys=[self.keys.reader(subtask)], args=[token])

    def live(self, parallelism: int) -> dict[int, str]:
        """The token of each subtask's live reader."""
        keys = [self.keys.reader(i) for i in range(parallelism)]
        tokens = self.redis.mget(keys) if keys else []
        return {i: t.decode() for i, t in enumerate(tokens) if t is not None}

    def locations(self) -> dict[int, str]:
        """Where each subtask's reader runs (or last ran)."""
        raw = self.redis.hgetall(self.keys.locations)
        return {int(k): v.decode() for k, v in raw.items()}

    def done(self) -> set[int]:
        """The subtasks whose reader had no more splits."""
        return {int(s) for s in self.redis.smembers(self.keys.done)}

    def claim_spawn(self, subtask: int) -> bool:
        """True at most once per lease period per subtask, so a queued reader is not doubled."""
        return bool(self.redis.set(self.keys.spawned(subtask), 1, nx=True, px=self.lease_ms))
