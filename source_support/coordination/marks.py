"""Run-wide marks: keys whose presence says something to every process of the run (a job
is queued, a report is due, the readers must wait), and the leases of the run's jobs."""

from __future__ import annotations

from collections.abc import Generator
from contextlib import contextmanager

from source_support.coordination.keys import Keys, Mark
from source_support.coordination.leases import HeldLease, LeaseScripts, hold_lease
from source_support.coordination.redis_commands import RedisCommands


class Marks:
    """The marks of one run; each lives until cleared, its time-to-live, or the run's purge."""

    def __init__(self, client: RedisCommands, keys: Keys, scripts: LeaseScripts) -> None:
        self.redis, self.keys, self.scripts = client, keys, scripts

    def set(self, mark: Mark, *, ttl_ms: int | None = None) -> None:
        """Sets ``mark``, for ``ttl_ms`` if given."""
        self.redis.set(self.keys.mark(mark), 1, px=ttl_ms)

    def once(self, mark: Mark, ttl_ms: int) -> bool:
        """Sets ``mark`` unless it is set; True if this call set it."""
        return bool(self.redis.set(self.keys.mark(mark), 1, nx=True, px=ttl_ms))

    def first_seen(self, mark: Mark) -> float:
        """The time ``mark`` was first set (now if it is not set yet), on Redis's clock."""
        return float(self.scripts.stamp.text(keys=[self.keys.mark(mark)], args=["nx"]) or 0)

    def clear(self, mark: Mark) -> bool:
        """Removes ``mark``; True if it was set."""
        return bool(self.redis.delete(self.keys.mark(mark)))

    def is_set(self, mark: Mark) -> bool:
        return bool(self.redis.exists(self.keys.mark(mark)))

    @contextmanager
    def held_lease(self, mark: Mark, ttl_ms: int) -> Generator[HeldLease]:
        """Holds lease ``mark`` while the block runs (see ``hold_lease``)."""
        with hold_lease(self.redis, self.scripts, self.keys.mark(mark), ttl_ms, name=mark.value) as lease:
            yield lease
