"""Redis clients for the source and the sink, and URLs as they may be shown (no password)."""

from __future__ import annotations

import re
import threading
from typing import Any

import redis
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

from source_support.connections import ConnectionTarget
from source_support.errors import ConfigError
from source_support.typed_redis import execute_command, info, ping, scan_keys

#: Longest single block of a read; a socket waits this long plus a margin.
MAX_BLOCK_MS = 10_000
SOCKET_TIMEOUT_S = MAX_BLOCK_MS / 1000 + 10
CONNECT_TIMEOUT_S = 5
URL_SCHEMES = ("redis://", "rediss://", "unix://")
_PASSWORD_QUERY = re.compile(r"(^|&)(password=)[^&]*", re.IGNORECASE)


def mask_url(url: str) -> str:
    """``url`` with its password (in the user part or the query) replaced by ``***``."""
    scheme, sep, rest = url.partition("://")
    address, query_sep, query = rest.partition("?")
    if sep and "@" in address:
        user_info, host = address.rsplit("@", 1)  # a password may hold an unescaped @
        user = user_info.split(":", 1)[0] if ":" in user_info else ""
        address = f"{user}:***@{host}" if user else f"***@{host}"
    query = _PASSWORD_QUERY.sub(r"\1\2***", query)
    return f"{scheme}{sep}{address}{query_sep}{query}"


def connect(url: str, *, raw_ranges: bool = False) -> redis.Redis:
    """A client of its own (its own pool): socket timeouts above the longest block, a
    few quick retries of a dropped connection before an error reaches the caller.
    Replies are parsed by hiredis (in requirements.txt; redis-py uses it when installed):
    an XREAD of 10,000 entries has over 100,000 elements, and redis-py's pure-Python
    parser spent most of a reader's time on them.

    No ``health_check_interval``: the retries already replace a dropped connection, and
    with them redis-py's health check recurses until RecursionError against a server that
    takes connections and closes them (redis-py#2866), instead of failing at once."""
    # redis-py leaves the options of from_url (its **kwargs) untyped.
    client = redis.Redis.from_url(  # pyright: ignore[reportUnknownMemberType]
        url,
        socket_timeout=SOCKET_TIMEOUT_S,
        socket_connect_timeout=CONNECT_TIMEOUT_S,
        retry=Retry(ExponentialBackoff(cap=1.0, base=0.05), 3),
        retry_on_error=[redis.ConnectionError, redis.TimeoutError],
    )
    # Replies as Redis sends them: redis-py would build a dict per entry. (redis-py types
    # the callback as a bare Callable.)
    client.set_response_callback("XREAD", _as_sent)  # pyright: ignore[reportUnknownMemberType]
    if raw_ranges:  # a preview's XRANGE / XREVRANGE: entries as XREAD gives them
        for command in ("XRANGE", "XREVRANGE"):
            client.set_response_callback(command, _as_sent)  # pyright: ignore[reportUnknownMemberType]
    return client


def _as_sent(response: Any, **options: Any) -> Any:
    """A response callback that keeps the reply as parsed (nested lists of bytes)."""
    return response


_shared: dict[str, redis.Redis] = {}
_shared_lock = threading.Lock()


def shared_client(url: str) -> redis.Redis:
    """One client per URL for the process (enumerator ticks, schema sampling, sinks):
    its pool is thread-safe and resets itself after a fork."""
    with _shared_lock:
        client = _shared.get(url)
        if client is None:
            client = _shared[url] = connect(url)
        return client


def server_major_version(client: redis.Redis) -> int:
    """The Redis server's major version (7 has ``ENTRIESREAD`` and trimming marks)."""
    version = info(client, "server").get("redis_version", "0")
    return int(str(version).split(".")[0] or 0)


def connection_reason(exc: Exception) -> str:
    """An error from redis-py in words, without the URL."""
    return str(exc).strip() or type(exc).__name__


#: The most streams a test of a connection lists.
MAX_LISTED_STREAMS = 100


def connection_check(target: ConnectionTarget) -> list[str]:
    """A test of a Redis connection: the server's version, then the streams its patterns
    match (at most ``MAX_LISTED_STREAMS``) with their lengths; ConfigError naming
    ``connection`` with what failed (the URL shown without its password)."""
    client = connect(target.url)
    masked = mask_url(target.url)
    patterns = target.key_patterns or ("*",)
    try:
        ping(client)
        lines = [f"{masked}: Redis {server_major_version(client)} answers"]
        found: set[str] = set()
        for pattern in patterns:
            for key in scan_keys(client, match=pattern, count=1000, type_name="stream"):
                name = key.decode()
                if target.allows_key(name):
                    found.add(name)
                if len(found) >= MAX_LISTED_STREAMS:
                    break
        more = f" (the first {MAX_LISTED_STREAMS})" if len(found) >= MAX_LISTED_STREAMS else ""
        lines.append(f"{len(found)} streams match {', '.join(patterns)}{more}")
        lines += [f"{name}: {execute_command(client, 'XLEN', name)} entries" for name in sorted(found)]
    except redis.RedisError as exc:
        reason = connection_reason(exc).replace(target.url, masked)
        raise ConfigError("connection", f"cannot connect to {masked}: {reason}") from None
    finally:
        client.close()
    return lines
