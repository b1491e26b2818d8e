"""NATS clients for the source and the sink: nats-py is asyncio, the runtime is not.

Each process keeps one connection per server list, with its own event loop in a thread
of its own (``NatsClient``): readers, the enumerator's ticks and sinks hand it coroutines
and wait for their results. The loop keeps reading the socket while a reader parses or
lands a batch, and a reader's next slice finds the connection open.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Coroutine
from concurrent.futures import Future
from typing import Any, TypeVar
from urllib.parse import urlsplit

import nats
import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.js import JetStreamContext

from source_support.connections import ConnectionTarget
from source_support.errors import ConfigError
from source_support.options import mask_url_credentials

T = TypeVar("T")
URL_SCHEMES = ("nats://", "tls://", "ws://", "wss://")
CONNECT_TIMEOUT_S = 5
#: The port of a server URL that names none, by scheme.
DEFAULT_PORTS = {"nats": 4222, "tls": 4222, "ws": 80, "wss": 443}
#: How long a call waits for the server before it fails (the client reconnects meanwhile).
REQUEST_TIMEOUT_S = 10.0
#: How long a look that is only a check waits for the server (an idle split's consumer and
#: stream, a discovery's stream): one that goes unanswered is asked again at the next
#: check or tick, so a server that stops answering holds a reader or a tick this long per
#: look, not ``REQUEST_TIMEOUT_S``.
CHECK_TIMEOUT_S = 3.0


def server_list(servers: str) -> list[str]:
    """The servers of a comma-separated list, each stripped."""
    return [s.strip() for s in servers.split(",") if s.strip()]


def mask_servers(servers: str) -> str:
    """``servers`` with every password and token masked."""
    return ",".join(mask_url_credentials(url) for url in server_list(servers))


class NatsClient:
    """One NATS connection and the event loop that drives it, in a daemon thread."""

    def __init__(self, servers: str) -> None:
        self.servers = servers
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="nats-loop", daemon=True)
        self._thread.start()
        self._nc: Client | None = None
        self._lock = threading.Lock()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    @property
    def alive(self) -> bool:
        """Whether the loop's thread runs (not after a fork: a child makes its own)."""
        return self._thread.is_alive()

    def submit(self, coro: Coroutine[Any, Any, T]) -> Future[T]:
        """Runs ``coro`` on the loop; its future."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, T], timeout_s: float | None = REQUEST_TIMEOUT_S) -> T:
        """Runs ``coro`` on the loop and waits for its result."""
        return self.submit(coro).result(timeout_s)

    @property
    def nc(self) -> Client:
        """The connection, made on first use; it reconnects by itself for ever."""
        with self._lock:
            if self._nc is None or self._nc.is_closed:
                self._nc = self.run(self._connect(), CONNECT_TIMEOUT_S * 3)
            return self._nc

    @property
    def js(self) -> JetStreamContext:
        # nats-py leaves the options of jetstream() and connect() (**opts) untyped.
        return self.nc.jetstream(timeout=REQUEST_TIMEOUT_S)  # pyright: ignore[reportUnknownMemberType]

    async def _connect(self) -> Client:
        # nats-py's first connect, told to reconnect for ever, tries for ever: a server that
        # is not there must fail the caller at once (a run that cannot start says why).
        await _any_server_listens(self.servers)
        return await nats.connect(  # pyright: ignore[reportUnknownMemberType]
            servers=server_list(self.servers),
            connect_timeout=CONNECT_TIMEOUT_S,
            max_reconnect_attempts=-1,
            reconnect_time_wait=0.5,
            allow_reconnect=True,
            # A first connect that fails is an error at once (a run that cannot start says why).
            error_cb=_quiet,
            disconnected_cb=_quiet_event,
            reconnected_cb=_quiet_event,
            closed_cb=_quiet_event,
        )

    def close(self) -> None:
        with self._lock:
            nc, self._nc = self._nc, None
        if nc is not None and not nc.is_closed:
            with contextlib.suppress(Exception):  # closing a connection that is gone
                self.run(nc.close(), REQUEST_TIMEOUT_S)
        self.loop.call_soon_threadsafe(self.loop.stop)


async def _any_server_listens(servers: str) -> None:
    """Returns once one of ``servers`` accepts a TCP connection (closed at once); raises
    ``ConnectionError`` naming each, masked, with why it did not, otherwise."""
    reasons: list[str] = []
    for url in server_list(servers):
        parsed = urlsplit(url)
        host = parsed.hostname or ""
        try:
            port = parsed.port or DEFAULT_PORTS.get(parsed.scheme, 4222)
            _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), CONNECT_TIMEOUT_S)
        except (OSError, ValueError, TimeoutError) as exc:
            reasons.append(f"{mask_url_credentials(url)}: {connection_reason(exc)}")
            continue
        writer.close()
        return
    if len(reasons) == 1:
        raise ConnectionError(reasons[0].split(": ", 1)[1])
    raise ConnectionError("; ".join(reasons))


async def _quiet(exc: Exception) -> None:
    """nats-py logs connection errors itself; the caller sees the failed request."""


async def _quiet_event() -> None:
    """Reconnects are the client's business; reads that fail meanwhile are retried."""


_shared: dict[str, NatsClient] = {}
_shared_lock = threading.Lock()


def shared_client(servers: str) -> NatsClient:
    """One client per server list for the process."""
    with _shared_lock:
        client = _shared.get(servers)
        if client is None or not client.alive:
            client = _shared[servers] = NatsClient(servers)
        return client


def connection_reason(exc: BaseException) -> str:
    """An error of nats-py in words."""
    return str(exc).strip() or type(exc).__name__


#: The most streams a test of a connection lists.
MAX_LISTED_STREAMS = 100


def connection_check(target: ConnectionTarget) -> list[str]:
    """A test of a NATS connection: the JetStream streams whose subjects its patterns
    allow (all without patterns; at most ``MAX_LISTED_STREAMS``), each with its message
    count and subjects; ConfigError naming ``connection`` with what failed."""
    client = NatsClient(target.url)
    try:
        streams = client.run(client.js.streams_info())
    except (ConnectionError, TimeoutError, nats.errors.Error, nats.js.errors.Error) as exc:
        raise ConfigError(
            "connection", f"cannot reach NATS at {mask_servers(target.url)}: {connection_reason(exc)}"
        ) from None
    finally:
        client.close()
    lines = [f"{mask_servers(target.url)}: JetStream answers"]
    listed = [
        info for info in streams if any(target.allows_key(subject) for subject in info.config.subjects or [])
    ][:MAX_LISTED_STREAMS]
    lines.append(f"{len(listed)} streams with subjects the connection allows")
    for info in listed:
        subjects = ", ".join(info.config.subjects or [])
        lines.append(f"stream {info.config.name}: {info.state.messages} messages, subjects {subjects}")
    return lines
