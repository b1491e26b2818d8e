"""The ``nats`` sink: each row is published as one JSON message, effectively once.

Every row carries a ``Nats-Msg-Id`` fixed by the run (a bounded run) or the epoch (a
stream's transform) and the row's index, so JetStream drops a row published again within
the stream's duplicate window: an attempt that repeats or crashes half way adds nothing.
A stream named by ``sink.stream`` that does not exist is created over ``sink.subject``
with ``sink.duplicate_window``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
from nats.js import JetStreamContext
from nats.js.api import StreamConfig

from connectors.nats.config import NatsSinkConfig, duplicate_window_s, nats_target
from connectors.nats.connection import NatsClient, shared_client
from connectors.nats.jetstream import stream_info
from source_support.connections import key_allowed
from source_support.errors import ConfigError
from source_support.registry import Environment, Publish

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

#: Rows in flight at once (published, their acks awaited together).
WINDOW_ROWS = 2_000
#: The longest a publication waits for the stream's acks of one window.
ACK_TIMEOUT_S = 30.0


class NatsSink:
    @staticmethod
    def write(
        df: DataFrame | pa.Table,
        config: dict[str, Any],
        *,
        attempt_key: str,
        publish: Publish,
        env: Environment,
    ) -> bool:
        """Publishes a bounded run's rows through ``publish``; every attempt of one run
        uses the same message ids, so the rows reach the stream once."""
        run_prefix = attempt_key.rsplit("-", 1)[0]
        return _publish_through(df, config, env, f"run:{run_prefix}", publish)

    @staticmethod
    def append(
        df: DataFrame | pa.Table,
        config: dict[str, Any],
        *,
        epoch_key: str,
        publish: Publish,
        env: Environment,
    ) -> bool:
        """Adds one epoch of a streaming transform, once per ``epoch_key``."""
        return _publish_through(df, config, env, f"epoch:{epoch_key}", publish)


def _publish_through(
    df: DataFrame | pa.Table, config: dict[str, Any], env: Environment, id_prefix: str, publish: Publish
) -> bool:
    table = df if isinstance(df, pa.Table) else df.toArrow()
    client = _client_for(config, env, table)
    return publish(table.num_rows, lambda: publish_rows(client, table, config, id_prefix))


def _client_for(config: dict[str, Any], env: Environment, table: pa.Table) -> NatsClient:
    """The sink's client; a ConfigError if a subject is outside its connection's
    patterns, or ``subject_column`` is not a column."""
    servers, patterns = nats_target(config, env, "sink")
    column = config.get("subject_column")
    if column is not None and column not in table.column_names:
        raise ConfigError("sink.subject_column", f"{column!r} is not a column of the result")
    if column is not None and table.column(column).null_count:
        raise ConfigError(
            "sink.subject_column", f"{table.column(column).null_count} row(s) have no subject in {column!r}"
        )
    subjects = [config["subject"]] if config.get("subject") else _distinct(table, column)
    outside = [s for s in subjects if not key_allowed(s, patterns)]
    if outside:
        raise ConfigError(
            "sink.subject",
            f"{outside[0]!r} is outside the subjects connection {config.get('connection')!r} allows",
        )
    return shared_client(servers)


def _distinct(table: pa.Table, column: str | None) -> list[str]:
    if column is None:
        return []
    return [str(v) for v in pc.unique(table.column(column)).to_pylist() if v is not None]


def publish_rows(client: NatsClient, table: pa.Table, config: dict[str, Any], id_prefix: str) -> int:
    """Publishes every row of ``table`` with the message id ``<id_prefix>:<row>``;
    returns how many the stream took as new (0 when all were there already)."""
    return client.run(_publish(client.js, table, config, id_prefix), None)


async def _publish(js: JetStreamContext, table: pa.Table, config: dict[str, Any], id_prefix: str) -> int:
    stream = config.get("stream")
    if stream:
        await _ensure_stream(js, config)
    column = config.get("subject_column")
    subjects = table.column(column).to_pylist() if column else None
    added = 0
    for start, bodies in _windows(table):
        acks = await asyncio.gather(
            *(
                js.publish(
                    str(subjects[start + i]) if subjects is not None else config["subject"],
                    body,
                    stream=stream,
                    headers={"Nats-Msg-Id": f"{id_prefix}:{start + i}"},
                    timeout=ACK_TIMEOUT_S,
                )
                for i, body in enumerate(bodies)
            )
        )
        added += sum(1 for ack in acks if not ack.duplicate)
    return added


async def _ensure_stream(js: JetStreamContext, config: dict[str, Any]) -> None:
    stream = config["stream"]
    if await stream_info(js, stream) is not None:
        return
    if not config.get("subject"):
        raise ConfigError(
            "sink.stream",
            f"stream {stream!r} does not exist; with subject_column it must exist, capturing the column's subjects",
        )
    await js.add_stream(  # pyright: ignore[reportUnknownMemberType] - **params untyped
        StreamConfig(
            name=stream,
            subjects=[config["subject"]],
            duplicate_window=duplicate_window_s(NatsSinkConfig.from_dict(config).duplicate_window),
        )
    )


def _windows(table: pa.Table) -> Iterator[tuple[int, list[bytes]]]:
    for start in range(0, table.num_rows, WINDOW_ROWS):
        rows = table.slice(start, WINDOW_ROWS).to_pylist()
        yield start, [json.dumps(row, default=_json_value, ensure_ascii=False).encode() for row in rows]


def _json_value(value: Any) -> Any:
    """Values JSON has no type for: bytes as text (UTF-8, else latin-1), the rest as text
    (timestamps in ISO-8601)."""
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return value.decode("latin-1")
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return str(value)
