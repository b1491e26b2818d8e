"""Whether celery beat is alive: it stamps its last tick on Redis's clock (the one clock of
the fleet, whatever each machine's says), and ``/healthz``, ``/metrics`` and the dashboard
read how long ago that was. Flows' ticks, schedules and webhook retries all come from beat:
without it nothing fails, everything just stops happening."""

from __future__ import annotations

import math
from dataclasses import dataclass

import redis
from django.conf import settings

from dataflow.redis_client import get_redis


def _last_tick_key() -> str:
    return f"{settings.DATAFLOW_REDIS_NAMESPACE}:beat:last-tick"


def beat_tick_note(*, client: redis.Redis | None = None) -> None:
    """Records that beat ticked now (on Redis's clock); beat's scheduler calls it each loop."""
    client = client or get_redis()
    seconds, microseconds = client.time()  # pyright: ignore[reportGeneralTypeIssues] - sync client: a tuple
    client.set(_last_tick_key(), f"{seconds}.{microseconds:06d}")


@dataclass(frozen=True)
class BeatHealth:
    """How long ago beat last ticked (``inf`` if it never did) and whether that is too long."""

    seconds_since_tick: float

    @property
    def stale(self) -> bool:
        return self.seconds_since_tick > settings.DATAFLOW_BEAT_STALE_SECONDS

    @property
    def summary(self) -> str:
        """ "ok", or what is wrong, as /healthz and the dashboard say it."""
        if not self.stale:
            return "ok"
        if math.isinf(self.seconds_since_tick):
            return "no tick recorded: is celery beat running?"
        return f"no tick for {int(self.seconds_since_tick)} s: is celery beat running?"


def beat_health(*, client: redis.Redis | None = None) -> BeatHealth:
    """How long ago beat last ticked, measured on Redis's clock (raises redis.RedisError)."""
    client = client or get_redis()
    pipe = client.pipeline(transaction=False)
    pipe.time()
    pipe.get(_last_tick_key())
    (seconds, microseconds), last = pipe.execute()
    if last is None:
        return BeatHealth(math.inf)
    return BeatHealth(max(0.0, seconds + microseconds / 1_000_000 - float(last)))
