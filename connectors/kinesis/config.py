"""The ``[source]`` table of a kinesis source. Nothing here connects to Kinesis: a flow
may be defined before its endpoint is up (``Source.check_input`` connects when a run
starts)."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Self

from connectors.aws import AwsAddress
from source_support.config import option
from source_support.durations import parse_instant_ms
from source_support.errors import ConfigError
from source_support.registry import Environment

START_POSITIONS = ("TRIM_HORIZON", "LATEST", "AT_TIMESTAMP")
#: Kinesis's own rule for stream names.
STREAM_NAME_RE = re.compile(r"[a-zA-Z0-9_.-]{1,128}")


class KinesisSourceConfig(AwsAddress):
    """A validated ``[source]`` table of a kinesis source."""

    stream_name: str = option("The Kinesis data stream to read.", example="orders", scoped=True)
    start: str = option(
        "Where the shards found when the run starts are first read: TRIM_HORIZON (the oldest "
        "record kept), LATEST (records put after the run starts) or AT_TIMESTAMP (start_timestamp). "
        "Shards made later by a reshard are read from their start.",
        default="TRIM_HORIZON",
        choices=START_POSITIONS,
    )
    start_timestamp: str | None = option(
        "With start = AT_TIMESTAMP: an ISO-8601 time; records that arrived at or after it are read.",
        default=None,
        example="2026-11-01T00:00:00Z",
    )
    discovery_interval_ms: int = option(
        "How often, in milliseconds, shards made by a reshard are looked for while the flow runs.",
        default=10_000,
        minimum=100,
        maximum=86_400_000,
    )
    metadata: bool = option(
        "Whether each record gets the columns _shard, _seq (its sequence number), _ts (its "
        "approximate arrival time) and _partition_key.",
        default=False,
    )

    def validate(self, env: Environment) -> Self:
        name = self.stream_name.strip()
        if not STREAM_NAME_RE.fullmatch(name):
            raise ConfigError(
                "source.stream_name", f"{name!r} is not a stream name (1-128 of a-z, A-Z, 0-9, _ . -)"
            )
        stamp = self.start_timestamp
        if self.start == "AT_TIMESTAMP":
            if stamp is None:
                raise ConfigError("source.start_timestamp", "is required with start = AT_TIMESTAMP")
            start_timestamp_ms(stamp)
        elif stamp is not None:
            raise ConfigError("source.start_timestamp", "is only read with start = AT_TIMESTAMP")
        return replace(super().validate(env), stream_name=name)


def start_timestamp_ms(text: str) -> int:
    """Milliseconds since the epoch of ``start_timestamp``; ConfigError naming it otherwise."""
    try:
        return parse_instant_ms(text)
    except ValueError as exc:
        raise ConfigError("source.start_timestamp", str(exc)) from None
