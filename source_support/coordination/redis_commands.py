"""The Redis commands the coordinator sends, with the types their replies have on a
synchronous client that does not decode replies (text comes back as bytes).

redis-py types every reply for its sync and asyncio clients at once (``Awaitable[Any] |
Any``, or a bare ``list`` or ``dict``) and leaves some arguments untyped, so code that uses
it directly cannot be checked strictly. ``RedisCommands`` says what each command used here
returns, and keeps the untyped client to itself.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import redis

#: A command's argument (redis-py encodes each).
Arg = str | bytes | int | float


class LuaScript:
    """A Lua script registered on a client (sent by its hash, or whole the first time)."""

    def __init__(self, script: Any) -> None:
        self._script = script

    def __call__(self, keys: list[str], args: list[Arg]) -> int:
        return self._script(keys=keys, args=args)

    def text(self, keys: list[str], args: list[Arg]) -> bytes | None:
        """Runs a script that returns a string (or nil)."""
        return self._script(keys=keys, args=args)


class RedisCommands:
    """The commands of a ``redis.Redis`` client (or of a pipeline: see ``RedisPipeline``)."""

    def __init__(self, client: redis.Redis) -> None:
        # redis-py's own types for the client's methods: see the module's docstring.
        self._client: Any = client

    def get(self, key: str) -> bytes | None:
        return self._client.get(key)

    def time(self) -> float:
        """The server's clock (``TIME``), in seconds since the epoch: the one clock that
        every process sharing the server reads alike, whatever its own clock says."""
        seconds, microseconds = self._client.time()
        return seconds + microseconds / 1_000_000

    def set(self, key: str, value: Arg, *, nx: bool = False, px: int | None = None) -> bool | None:
        """True once set; None when ``nx`` kept it from being set."""
        return self._client.set(key, value, nx=nx, px=px)

    def mget(self, keys: list[str]) -> list[bytes | None]:
        return self._client.mget(keys)

    def delete(self, *keys: str | bytes) -> int:
        """How many of ``keys`` there were."""
        return self._client.delete(*keys)

    def exists(self, *keys: str) -> int:
        """How many of ``keys`` there are."""
        return self._client.exists(*keys)

    def incrby(self, key: str, amount: int) -> int:
        return self._client.incrby(key, amount)

    def pexpire(self, key: str, ttl_ms: int) -> bool:
        return self._client.pexpire(key, ttl_ms)

    def hset(self, key: str, field: str, value: Arg) -> int:
        return self._client.hset(key, field, value)

    def hgetall(self, key: str) -> dict[bytes, bytes]:
        return self._client.hgetall(key)

    def sadd(self, key: str, *members: Arg) -> int:
        return self._client.sadd(key, *members)

    def srem(self, key: str, *members: Arg) -> int:
        return self._client.srem(key, *members)

    def smembers(self, key: str) -> set[bytes]:
        return self._client.smembers(key)

    def rpush(self, key: str, *values: Arg) -> int:
        return self._client.rpush(key, *values)

    def lpush(self, key: str, *values: Arg) -> int:
        return self._client.lpush(key, *values)

    def lrange(self, key: str, start: int, end: int) -> list[bytes]:
        return self._client.lrange(key, start, end)

    def ltrim(self, key: str, start: int, end: int) -> bool:
        return self._client.ltrim(key, start, end)

    def blpop(self, keys: list[str], timeout: float) -> tuple[bytes, bytes] | None:
        """The key and the first item of the first of ``keys`` to have one, waiting up to
        ``timeout`` seconds; None if none had one by then."""
        return self._client.blpop(keys, timeout=timeout)

    def scan_iter(self, *, match: str, count: int) -> Iterator[bytes]:
        return self._client.scan_iter(match=match, count=count)

    def script(self, source: str) -> LuaScript:
        return LuaScript(self._client.register_script(source))

    def pipeline(self, *, transaction: bool = True) -> RedisPipeline:
        return RedisPipeline(self._client.pipeline(transaction=transaction))


class RedisPipeline(RedisCommands):
    """Commands queued to be sent in one round trip by ``execute``. A queued command's reply
    is not there yet: what its method returns is not the reply (use ``execute``'s)."""

    def execute(self) -> list[Any]:
        """Sends the queued commands; their replies, in order (their shapes are the
        commands': the callers say them)."""
        return self._client.execute()
