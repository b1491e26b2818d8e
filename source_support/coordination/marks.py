"""Run-wide marks: keys whose presence says something to every process of the run (a job
is queued, a report is due, the readers must wait), and the leases of the run's jobs."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import redis

from source_support.coordination.keys import Keys
from source_support.coordination.leases import HeldLease, LeaseScripts, hold_lease


class Marks:
    """The marks of one run; each lives until cleared, its time-to-live, or the run's purge."""

    def __init__(self, client: redis.Redis, keys: Keys, scripts: LeaseScripts) -> None:
        self.redis, self.keys, self.scripts = client, keys, scripts

    def set(self, name: str, *, ttl_ms: int | None = None) -> None:
        """Sets mark ``name``, for ``ttl_ms`` if given."""
        self.redis.set(self.keys.mark(name), 1, px=ttl_ms)

    def once(self, name: str, ttl_ms: int) -> bool:
        """Sets mark ``name`` unless it is set; True if this call set it."""
        return bool(self.redis.set(self.keys.mark(name), 1, nx=True, px=ttl_ms))

    def first_seen(self, name: str, now: float) -> float:
        """The time mark ``name`` was first set (to ``now`` if it is not set yet)."""
        key = self.keys.mark(name)
        self.redis.set(key, now, nx=True)
        return float(self.redis.get(key) or now)

    def clear(self, name: str) -> bool:
        """Removes mark ``name``; True if it was set."""
        return bool(self.redis.delete(self.keys.mark(name)))

    def is_set(self, name: str) -> bool:
        return bool(self.redis.exists(self.keys.mark(name)))

    @contextmanager
    def held_lease(self, name: str, ttl_ms: int) -> Iterator[HeldLease]:
        """Holds lease ``name`` while the block runs (see ``hold_lease``)."""
        with hold_lease(self.redis, self.scripts, self.keys.mark(name), ttl_ms, name=name) as lease:
            yield lease
