"""The ``redis_stream`` sink: each row becomes one entry of a stream, exactly once.

Rows are first written to a staging stream of their own; publishing moves them into the
target stream in chunks, each chunk's XADDs in one MULTI/EXEC with the move's progress in
a marker hash, under WATCH. So a publication that dies half way is finished by the next
attempt (which moves the same staged entries on from the marker, not its own), a second
publication of the same run or batch adds nothing, and two racing attempts never move a
chunk twice.

Values are written as text (numbers as Arrow prints them, timestamps as ISO-8601, nested
values as JSON, binary as it is); a null is left out of its entry. A stream entry needs a
field, so a row whose values are all null is written with its first column empty.
"""

from __future__ import annotations

import hashlib
import json
import logging
import uuid
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
import redis
from redis.client import Pipeline

from connectors.redis_streams.config import redis_target
from connectors.redis_streams.connection import connection_reason, mask_url, shared_client
from source_support.errors import ConfigError
from source_support.registry import Environment, Publish
from source_support.typed_redis import (
    Arg,
    execute_command,
    hash_field,
    hash_fields,
    hash_set,
    pipeline,
    sync_reply,
    watch,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger("connectors.redis_streams")

NAMESPACE = "adf:sink"
#: Entries per pipeline when staging, and per MULTI/EXEC when publishing.
CHUNK_ROWS = 5_000
#: A staging stream outlives a crashed attempt by this much; a marker outlives its
#: publication by a week, so a late replay of the same batch still finds it.
STAGING_TTL_S = 24 * 3600
MARKER_TTL_S = 7 * 24 * 3600


class RedisStreamSink:
    @staticmethod
    def write(
        df: DataFrame | pa.Table,
        config: dict[str, Any],
        *,
        attempt_key: str,
        publish: Publish,
        env: Environment,
    ) -> bool:
        """Stages the result, then lets ``publish`` move it into the stream (``swap``);
        returns whether it was published. Every attempt of one run publishes through one
        marker, so the run's rows reach the stream once, whichever attempts crash."""
        client = _client_for(config, env)
        run_prefix = attempt_key.rsplit("-", 1)[0]
        target = StreamTarget(client, config, marker=f"run:{run_prefix}")
        return _publish_through(target, target.stage(_arrow_of(df), attempt_key), publish)

    @staticmethod
    def append(
        df: DataFrame | pa.Table,
        config: dict[str, Any],
        *,
        epoch_key: str,
        publish: Publish,
        env: Environment,
    ) -> bool:
        """Adds one epoch of a streaming transform through the caller's fence
        (``SinkConnector.append``): staged, then moved by ``publish``'s swap, once per
        ``epoch_key`` whatever attempts crash or repeat."""
        client = _client_for(config, env)
        target = StreamTarget(client, config, marker=f"epoch:{epoch_key}")
        staging = target.pending_staging() or target.stage(_arrow_of(df), epoch_key)
        return _publish_through(target, staging, publish)


def _client_for(config: dict[str, Any], env: Environment) -> redis.Redis:
    """The client of the sink's Redis; a ConfigError if its key is outside its
    connection's patterns or is one the deployment uses (checked when the flow was saved,
    and here again before writing: a connection may have changed since)."""
    target = redis_target(config, env, "sink")
    refusal = target.key_refusal(config["key"], "sink.key")
    if refusal is not None:
        raise refusal
    return shared_client(target.url)


def check(config: dict[str, Any], env: Environment) -> list[str]:
    """The sink's stream and its length, or that the first run makes it."""
    target = redis_target(config, env, "sink")
    client = _client_for(config, env)
    try:
        length = int(execute_command(client, "XLEN", config["key"]))
    except redis.RedisError as exc:
        reason = connection_reason(exc).replace(target.url, mask_url(target.url))
        field = "sink.connection" if config.get("connection") else "sink.url"
        raise ConfigError(field, f"cannot connect to {mask_url(target.url)}: {reason}") from None
    if length == 0 and not execute_command(client, "EXISTS", config["key"]):
        return [f"stream {config['key']}: does not exist yet (the first run makes it)"]
    return [f"stream {config['key']}: {length} entries"]


def append_batch(
    df: DataFrame | pa.Table, config: dict[str, Any], *, batch_key: str, env: Environment
) -> int:
    """Appends the rows of ``df`` (one micro-batch of a streaming transform) to the stream
    once per ``batch_key``: returns how many entries this call added, 0 if the batch was
    already written. A call that finds the batch half written finishes it."""
    client = _client_for(config, env)
    target = StreamTarget(client, config, marker=f"batch:{batch_key}")
    pending = target.pending_staging()
    if pending is None:
        if target.is_done():
            return 0
        pending = target.stage(_arrow_of(df), batch_key)
    return target.publish(pending)


class StreamTarget:
    """The target stream of a sink, with the marker of one publication."""

    def __init__(self, client: redis.Redis, config: dict[str, Any], *, marker: str) -> None:
        self.client = client
        self.key = config["key"]
        self.maxlen = config.get("maxlen")
        digest = hashlib.sha256(self.key.encode()).hexdigest()[:16]
        self.marker = f"{NAMESPACE}:marker:{digest}:{marker}"
        self.staged_rows = 0

    def stage(self, table: pa.Table, name: str) -> str:
        """Writes ``table`` to a new staging stream; returns its key."""
        staging = f"{NAMESPACE}:staging:{name}:{uuid.uuid4().hex[:12]}"
        self.staged_rows = 0
        for offset in range(0, table.num_rows, CHUNK_ROWS):
            pipe = pipeline(self.client, transaction=False)
            for fields in entry_fields(table.slice(offset, CHUNK_ROWS)):
                execute_command(pipe, "XADD", staging, "*", *fields)
                self.staged_rows += 1
            pipe.expire(staging, STAGING_TTL_S)
            pipe.execute()
        return staging

    def discard(self, staging: str) -> None:
        """Drops a staging stream unless a publication began to move it (the next attempt
        finishes that one)."""
        if hash_field(self.client, self.marker, "staging") != staging.encode():
            self.client.delete(staging)

    def is_done(self) -> bool:
        return hash_field(self.client, self.marker, "done") == b"1"

    def pending_staging(self) -> str | None:
        """The staging stream a publication under this marker began to move, if it still
        waits to be finished."""
        state = hash_fields(self.client, self.marker)
        staging = state.get(b"staging")
        if staging and state.get(b"done") != b"1" and self.client.exists(staging):
            return staging.decode()
        return None

    def publish(self, staging: str) -> int:
        """Moves ``staging`` into the stream, chunk by chunk, unless this marker's
        publication is done; continues the staging stream an earlier attempt began to
        move instead of ours. Returns how many entries this call moved."""
        moving = self._claim(staging)
        if moving is None:
            self.client.delete(staging)  # the publication is done: ours is not needed
            return 0
        staging = moving
        moved = 0
        while True:
            step = self._move_chunk(staging)
            if step is None:
                return moved
            moved += step

    def _claim(self, staging: str) -> str | None:
        """The staging stream to move: ours, or the one an earlier attempt began to move;
        None if the publication is done."""
        with pipeline(self.client) as pipe:
            while True:
                try:
                    watch(pipe, self.marker)
                    state = hash_fields(pipe, self.marker)
                    if state.get(b"done") == b"1":
                        return None
                    began = (state.get(b"staging") or b"").decode()
                    if began and pipe.exists(began):
                        if began != staging:
                            self.client.delete(staging)
                        return began
                    pipe.multi()
                    hash_set(pipe, self.marker, {"staging": staging, "cursor": "0-0"})
                    pipe.expire(self.marker, MARKER_TTL_S)
                    pipe.expire(staging, MARKER_TTL_S)  # kept while its publication may be resumed
                    pipe.execute()
                    return staging
                except redis.WatchError:
                    continue

    def _move_chunk(self, staging: str) -> int | None:
        """Moves the next chunk after the marker's cursor, in one MULTI/EXEC that also
        moves the cursor; marks the publication done (and drops the staging stream) when
        nothing is left. Returns how many entries it moved, None once done."""
        with pipeline(self.client) as pipe:
            while True:
                try:
                    watch(pipe, self.marker)
                    state = hash_fields(pipe, self.marker)
                    if state.get(b"done") == b"1" or state.get(b"staging", b"").decode() != staging:
                        return None
                    cursor = state[b"cursor"].decode()
                    # Watched: the pipeline runs commands at once until multi().
                    entries: list[tuple[bytes, dict[bytes, bytes]]] = sync_reply(
                        pipe.xrange(staging, min=f"({cursor}", count=CHUNK_ROWS)
                    )
                    pipe.multi()
                    if not entries:
                        hash_set(pipe, self.marker, {"done": "1"})
                        pipe.delete(staging)
                    for _, fields in entries:
                        self._xadd(pipe, fields)
                    if entries:
                        hash_set(pipe, self.marker, {"cursor": entries[-1][0]})
                    pipe.expire(self.marker, MARKER_TTL_S)
                    pipe.execute()
                    return len(entries) if entries else None
                except redis.WatchError:
                    continue

    def _xadd(self, pipe: Pipeline, fields: dict[bytes, bytes]) -> None:
        trim: list[Arg] = ["MAXLEN", "~", self.maxlen] if self.maxlen else []
        flat = [item for pair in fields.items() for item in pair]
        execute_command(pipe, "XADD", self.key, *trim, "*", *flat)


def _arrow_of(df: DataFrame | pa.Table) -> pa.Table:
    """The rows of a Spark DataFrame (or an Arrow table, as given) on the driver."""
    if isinstance(df, pa.Table):
        return df
    return df.toArrow()


def entry_fields(table: pa.Table) -> Iterator[list[str | bytes]]:
    """Each row of ``table`` as the flat field/value list of an entry (nulls left out)."""
    names = table.column_names
    columns = [_texts(table.column(i).combine_chunks()) for i in range(table.num_columns)]
    for row in range(table.num_rows):
        fields: list[str | bytes] = []
        for name, values in zip(names, columns, strict=True):
            value = values[row]
            if value is not None:
                fields += (name, value)
        yield fields or [names[0], ""]


def _texts(values: pa.Array[Any]) -> Sequence[str | bytes | None]:
    """A column's values as entry values: text, bytes as they are, nested values as JSON."""
    t = values.type
    if pa.types.is_nested(t):
        return [None if v is None else json.dumps(v, default=str) for v in values.to_pylist()]
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_string(t):
        return values.to_pylist()
    if pa.types.is_timestamp(t):
        texts = values.cast(pa.string())
        return pc.replace_substring(texts, " ", "T", max_replacements=1).to_pylist()
    return values.cast(pa.string()).to_pylist()


def _publish_through(target: StreamTarget, staging: str, publish: Publish) -> bool:
    """Moves the staged entries into the target through the caller's fence; the staging
    stream goes if the caller did not publish."""
    published = False
    try:
        published = publish(target.staged_rows, lambda: target.publish(staging))
    finally:
        if not published:
            target.discard(staging)
    return published
