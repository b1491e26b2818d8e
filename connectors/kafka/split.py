"""A topic partition: the unit of work of the kafka source (Flink ``KafkaPartitionSplit``).

A position is the offset of the next record to read, the offset Kafka itself commits: a
replay from it reads the same records again, none lost and none twice.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from source_support.api import SplitSerializer
from source_support.streams.split import PositionedSplit


@dataclass(frozen=True)
class PartitionSplit(PositionedSplit):
    """The records of ``topic`` partition ``partition`` from offset ``position``, up to (not
    including) ``stop_offset`` if set; ``stop_time_ms``: the records up to a ``[stop] at``
    time (the first record after it ends the split); ``start_time_ms``: the ``source.start``
    time its start was looked up for; records before it at the split's start are dropped
    (a broker's lookup may answer an offset before the time: issue 25)."""

    topic: str
    partition: int
    position: int
    stop_offset: int | None = None
    stop_time_ms: int | None = None
    start_time_ms: int | None = None

    @property
    def split_id(self) -> str:
        return partition_split_id(self.topic, self.partition)

    @property
    def stopped(self) -> bool:
        return self.stop_offset is not None and self.position >= self.stop_offset


def partition_split_id(topic: str, partition: int) -> str:
    return f"{topic}:{partition}"


class PartitionSplitSerializer(SplitSerializer[PartitionSplit]):
    def serialize(self, split: PartitionSplit) -> dict[str, Any]:
        data: dict[str, Any] = {
            "topic": split.topic,
            "partition": split.partition,
            "position": split.position,
        }
        if split.stop_offset is not None:
            data["stop_offset"] = split.stop_offset
        if split.stop_time_ms is not None:
            data["stop_time_ms"] = split.stop_time_ms
        if split.start_time_ms is not None:
            data["start_time_ms"] = split.start_time_ms
        return data

    def deserialize(self, data: dict[str, Any]) -> PartitionSplit:
        return PartitionSplit(
            data["topic"],
            data["partition"],
            data["position"],
            data.get("stop_offset"),
            data.get("stop_time_ms"),
            data.get("start_time_ms"),
        )
