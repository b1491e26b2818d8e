"""redis-py's calls and replies with the types they have on a synchronous client.

redis-py types its replies for its sync and asyncio clients at once (``Awaitable[Any] |
Any``, a bare ``dict`` or ``list``; ``HGET`` as ``str`` though a client without
``decode_responses`` returns bytes), and leaves some arguments untyped (``pipeline``'s
``shard_hint``, ``execute_command``'s options, ``**kwargs`` of ``info``, ``ping`` and
``scan_iter``). The functions here send one command each and say what its reply is, so the
code that talks to Redis is checked strictly and the workaround is in one place. The
clients here never decode replies: text comes back as bytes.
"""

from __future__ import annotations

from collections.abc import Awaitable, Iterator, Mapping
from typing import Any

import redis
from redis import connection
from redis.client import Pipeline

#: A command's argument (redis-py encodes each).
Arg = str | bytes | int | float


def check_url(url: str) -> None:
    """A ValueError saying why, unless ``url`` is a URL redis-py can connect to."""
    # redis-py leaves parse_url untyped.
    connection.parse_url(url)  # pyright: ignore[reportUnknownMemberType]


def sync_reply(response: Awaitable[Any] | Any) -> Any:
    """The reply of a synchronous client's command as redis-py parsed it (its shape is the
    command's: the callers say it)."""
    if isinstance(response, Awaitable):
        raise TypeError("an asyncio client's reply: these calls take a synchronous client")
    return response


def pipeline(client: redis.Redis, *, transaction: bool = True) -> Pipeline:
    """``client.pipeline``."""
    # redis-py leaves ``shard_hint`` untyped.
    return client.pipeline(transaction=transaction)  # pyright: ignore[reportUnknownMemberType]


def execute(pipe: Pipeline, *, raise_on_error: bool = True) -> list[Any]:
    """Sends a pipeline's commands; their replies in order (with ``raise_on_error=False``,
    the error of a command that failed in its place)."""
    # redis-py leaves Pipeline.execute untyped.
    return pipe.execute(raise_on_error=raise_on_error)  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]


def watch(pipe: Pipeline, *keys: str) -> None:
    """``WATCH``: the pipeline's next MULTI/EXEC fails (WatchError) if a key changes."""
    # redis-py leaves Pipeline.watch untyped.
    pipe.watch(*keys)  # pyright: ignore[reportUnknownMemberType]


def execute_command(client: redis.Redis, *args: Arg) -> Any:
    """Sends a command as given; its reply as Redis sent it (on a pipeline: queued)."""
    # redis-py leaves the arguments of execute_command untyped.
    return client.execute_command(*args)  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]


def info(client: redis.Redis, section: str) -> dict[str, Any]:
    """``INFO section`` as a dict of its fields."""
    # redis-py leaves the **kwargs of info untyped.
    return sync_reply(client.info(section))  # pyright: ignore[reportUnknownMemberType]


def ping(client: redis.Redis) -> bool:
    """``PING``: True, or a ConnectionError."""
    # redis-py leaves the **kwargs of ping untyped.
    return bool(sync_reply(client.ping()))  # pyright: ignore[reportUnknownMemberType]


def scan_keys(client: redis.Redis, *, match: str, count: int, type_name: str) -> Iterator[bytes]:
    """The keys matching ``match`` of type ``type_name``, by ``SCAN``."""
    # redis-py leaves the **kwargs of scan_iter, and the items it yields, untyped.
    keys: Iterator[bytes] = client.scan_iter(match=match, count=count, _type=type_name)  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
    return keys


def server_time_ms(client: redis.Redis) -> int:
    """The server's clock (``TIME``), in ms since the Unix epoch."""
    # redis-py leaves the **kwargs of time untyped.
    return time_ms(sync_reply(client.time()))  # pyright: ignore[reportUnknownMemberType]


def time_ms(reply: tuple[int, int]) -> int:
    """A ``TIME`` reply (seconds, microseconds) in ms since the Unix epoch."""
    seconds, micros = reply
    return int(seconds) * 1000 + int(micros) // 1000


def hash_fields(client: redis.Redis, key: str) -> dict[bytes, bytes]:
    """``HGETALL``: the fields of a hash (empty if there is none)."""
    # redis-py types the reply as a bare dict.
    return sync_reply(client.hgetall(key))  # pyright: ignore[reportUnknownMemberType, reportUnknownArgumentType]


def hash_set(client: redis.Redis, key: str, fields: Mapping[str, Arg]) -> None:
    """``HSET``: sets fields of a hash (on a pipeline: queued)."""
    execute_command(client, "HSET", key, *(item for pair in fields.items() for item in pair))


def hash_field(client: redis.Redis, key: str, field: str) -> bytes | None:
    """``HGET``: one field of a hash."""
    # redis-py types the reply as str; without decode_responses it is bytes.
    return sync_reply(client.hget(key, field))
