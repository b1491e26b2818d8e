"""The ``[source]`` table of a redis_streams source and the ``[sink]`` table of a
redis_stream sink. Nothing here connects to Redis: a flow may be defined before its Redis
is up (``Source.check_input`` connects when a run starts)."""

from __future__ import annotations

import fnmatch
from dataclasses import replace
from typing import Any, Self

from connectors.redis_streams.connection import URL_SCHEMES, mask_url
from connectors.redis_streams.split import (
    MAX_POSITION,
    EntryIdOutOfRange,
    encode_id,
    last_position_before_ms,
)
from source_support.config import ConfigBase, connection_field, option
from source_support.connections import ConnectionTarget
from source_support.durations import parse_instant_ms
from source_support.errors import ConfigError
from source_support.registry import Environment
from source_support.typed_redis import check_url

#: The kind of named connection a ``url`` may be replaced by.
CONNECTION_KIND = "redis"
START_WORDS = ("earliest", "latest")
GLOB_CHARS = "*?["


def _url_option() -> Any:
    return option(
        "The Redis server, such as redis://:password@host:6379/0 (also rediss:// and unix://); for staff "
        "and the operator only (others name a connection). Left out with no connection: the deployment's "
        "Redis (REDIS_URL), for staff and the operator only.",
        default=None,
        secret="url",
        example="redis://127.0.0.1:6379/0",
        address=CONNECTION_KIND,
    )


class RedisAddress(ConfigBase):
    """Where a source or sink connects: a named connection, its ``url``, or (neither given)
    the deployment's Redis (``Environment.redis_url``), resolved when it is built."""

    connection: str | None = connection_field(CONNECTION_KIND)
    url: str | None = _url_option()

    def validate(self, env: Environment) -> Self:
        if self.connection is not None and not self.connection.strip():
            raise ConfigError(f"{self.SECTION}.connection", "must name a connection")
        if self.connection is not None and self.url is not None:
            raise ConfigError(
                f"{self.SECTION}.connection",
                f"give {self.SECTION}.connection or {self.SECTION}.url, not both",
            )
        if self.url is None:
            return self
        return replace(self, url=validate_url(self.url, f"{self.SECTION}.url"))


class RedisStreamsSourceConfig(RedisAddress):
    """A validated ``[source]`` table of a redis_streams source. Does not connect: a flow may
    be defined before its Redis is up."""

    streams: str = option(
        "A stream key or a glob over keys; each matching stream is a split, streams that appear later too.",
        example="orders:*",
        scoped=True,
    )
    start: str = option(
        "Where a stream is first read: earliest, latest, an entry id (1700000000000-0) or an ISO-8601 "
        "time (2024-05-01T12:00:00Z).",
        default="earliest",
    )
    discovery_interval_ms: int = option(
        "How often, in milliseconds, streams that newly match are looked for while the flow runs.",
        default=10_000,
        minimum=100,
        maximum=86_400_000,
    )
    metadata: bool = option(
        "Whether each record gets the columns _stream (its stream key) and _id (its entry id).",
        default=False,
    )

    def validate(self, env: Environment) -> Self:
        start = self.start.strip()
        start_position(start)  # refuses what is not a start
        return replace(super().validate(env), start=start)


class RedisStreamSinkConfig(RedisAddress, section="sink"):
    """A validated ``[sink]`` table of a redis_stream sink."""

    key: str = option(
        "The stream each row is appended to, as one entry.", example="orders:large", scoped=True
    )
    maxlen: int | None = option(
        "Trims the stream to about this many entries as rows are appended (XADD MAXLEN ~); "
        "left out, the stream is not trimmed.",
        default=None,
        minimum=1,
        example=1_000_000,
    )


def validate_url(url: str, field: str) -> str:
    """``url`` if it names a Redis server (redis://, rediss:// or unix://); the error shows
    it without its password."""
    url = url.strip()
    if not url.startswith(URL_SCHEMES):
        raise ConfigError(field, f"{mask_url(url)!r} must start with {', '.join(URL_SCHEMES)}")
    try:
        check_url(url)
    except ValueError as exc:
        raise ConfigError(field, f"{mask_url(url)!r} is not a Redis URL: {_masked(str(exc), url)}") from None
    return url


def _masked(text: str, url: str) -> str:
    return text.replace(url, mask_url(url))


def start_position(start: str) -> tuple[str, int | None]:
    """What ``start`` means: ("earliest"|"latest", None), ("id", position before that
    entry) or ("time", position before that millisecond); ConfigError otherwise."""
    if start in START_WORDS:
        return start, None
    if start and start[0].isdigit() and "T" not in start and ":" not in start:
        try:
            return "id", max(0, encode_id(start) - 1)
        except EntryIdOutOfRange as exc:
            raise ConfigError("source.start", str(exc)) from None
        except ValueError:
            pass  # a date such as 2024-05-01 is a time
    try:
        ms = parse_instant_ms(start)
    except ValueError:
        raise ConfigError(
            "source.start",
            f"{start!r} is not earliest, latest, an entry id (1700000000000-0) "
            "or an ISO-8601 time (2024-05-01T12:00:00Z)",
        ) from None
    position = last_position_before_ms(ms)
    if position > MAX_POSITION:
        raise ConfigError("source.start", f"{start!r} is too far in the future for an entry id")
    return "time", position


def redis_target(config: dict[str, Any], env: Environment, section: str) -> ConnectionTarget:
    """Where a source or sink config connects, the key patterns it is limited to and the
    keys it may never touch there (the deployment's own, on the deployment's Redis): its
    named connection (resolved in ``env``), its ``url``, or the deployment's Redis."""
    name = config.get("connection")
    if name:
        target = env.connection(name, f"{section}.connection")
    else:
        target = ConnectionTarget("", CONNECTION_KIND, config.get("url") or env.redis_url)
    return replace(target, reserved_keys=env.reserved_keys_at(target.url))


def _where(config: dict[str, Any], env: Environment) -> str:
    """What identifies the Redis a config names, without resolving a connection."""
    return (
        f"connection:{config['connection']}"
        if config.get("connection")
        else config.get("url") or env.redis_url
    )


def is_pattern(streams: str) -> bool:
    return any(char in streams for char in GLOB_CHARS)


def sink_reads_back(source: dict[str, Any], sink_type: str, sink: dict[str, Any], env: Environment) -> str:
    """Why a ``redis_stream`` sink would feed the flow's own source (its key matches
    ``source.streams`` on the same Redis: every row read would be read again, for ever);
    empty when it does not."""
    if sink_type != "redis_stream" or _where(source, env) != _where(sink, env):
        return ""
    if not fnmatch.fnmatchcase(sink["key"], source["streams"]):
        return ""
    return (
        f"{sink['key']} matches source.streams {source['streams']!r} on the same Redis: the flow "
        "would read its own output again, for ever; write to a key the pattern does not match"
    )
