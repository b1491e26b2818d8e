"""A shard of a Kinesis data stream: the unit of work of the kinesis source.

A Kinesis sequence number has up to 129 digits, more than a checkpoint (a 64-bit integer)
holds, so a position counts records: position n means the shard's first n records from
its start (``origin``) are read. Where reading resumes is found from the ``anchor``: a
place in the shard (its start, a time, or after a sequence number) and the position it
stands for; a reader that does not know the sequence number at the position reads on
from the anchor and skips the records up to the position. The enumerator moves the
anchor up as readers report their progress, so that skip stays short.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from source_support.api import SplitSerializer
from source_support.streams.split import PositionedSplit

TRIM_HORIZON = "TRIM_HORIZON"
AT_TIMESTAMP = "AT_TIMESTAMP"
AFTER_SEQUENCE_NUMBER = "AFTER_SEQUENCE_NUMBER"


@dataclass(frozen=True)
class Anchor:
    """A place in a shard a reader can get an iterator at (``kind``: TRIM_HORIZON,
    AT_TIMESTAMP with ``value`` in ms, AFTER_SEQUENCE_NUMBER with ``value`` a sequence
    number), and the position (records read) it stands for."""

    kind: str
    value: str = ""
    position: int = 0

    def to_list(self) -> list[Any]:
        return [self.kind, self.value, self.position]

    @classmethod
    def of(cls, data: list[Any]) -> Anchor:
        return cls(str(data[0]), str(data[1]), int(data[2]))


@dataclass(frozen=True)
class ShardSplit(PositionedSplit):
    """The records of shard ``shard_id`` of ``stream`` after ``position``; ``origin``
    names where its position 0 is (the run's start, fixed when the run first saw the
    shard); ``stop_ms``: a ``[stop]`` time (records that arrived after it are not read)."""

    stream: str
    shard_id: str
    position: int
    origin: str
    anchor: Anchor
    stop_ms: int | None = None

    @property
    def split_id(self) -> str:
        return self.shard_id


class ShardSplitSerializer(SplitSerializer[ShardSplit]):
    def serialize(self, split: ShardSplit) -> dict[str, Any]:
        data: dict[str, Any] = {
            "stream": split.stream,
            "shard_id": split.shard_id,
            "position": split.position,
            "origin": split.origin,
            "anchor": split.anchor.to_list(),
        }
        if split.stop_ms is not None:
            data["stop_ms"] = split.stop_ms
        return data

    def deserialize(self, data: dict[str, Any]) -> ShardSplit:
        return ShardSplit(
            data["stream"],
            data["shard_id"],
            data["position"],
            data["origin"],
            Anchor.of(data["anchor"]),
            data.get("stop_ms"),
        )
