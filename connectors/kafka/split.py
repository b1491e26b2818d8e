"""A topic partition: the unit of work of the kafka source (Flink ``KafkaPartitionSplit``).

A position is the offset of the next record to read, the offset Kafka itself commits: a
replay from it reads the same records again, none lost and none twice.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from source_support.api import SplitSerializer
from source_support.streams.split import PositionedSplit, generation_key, generation_split_id


@dataclass(frozen=True)
class PartitionSplit(PositionedSplit):
    """The records of ``topic`` partition ``partition`` from offset ``position``, up to (not
    including) ``stop_offset`` if set; ``stop_time_ms``: the records up to a ``[stop] at``
    time (the first record after it ends the split); ``start_time_ms``: the ``source.start``
    time its start was looked up for; records before it at the split's start are dropped
    (a broker's lookup may answer an offset before the time: issue 25).

    ``generation`` counts the logs the partition had while the run read it: under
    ``source.on_reset = "restart"``, a partition whose offsets went back (its topic deleted
    and made again, its broker restarted empty, its log start past the checkpoint) is read
    again from the new log's start as the next generation, a split of its own (offsets
    start over, so its landed files and checkpoint must not mix with the old one's).
    ``topic_id``: the topic's id (KIP-516) when the split was found, where the brokers tell
    it; a topic made again under the same name has another."""

    topic: str
    partition: int
    position: int
    stop_offset: int | None = None
    stop_time_ms: int | None = None
    start_time_ms: int | None = None
    generation: int = 0
    topic_id: str | None = None

    @property
    def split_id(self) -> str:
        return generation_split_id(self.place, self.generation)

    @property
    def place(self) -> str:
        """``topic:partition``, whatever the generation."""
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
        if split.generation:
            data["generation"] = split.generation
        if split.topic_id is not None:
            data["topic_id"] = split.topic_id
        return data

    def deserialize(self, data: dict[str, Any]) -> PartitionSplit:
        return PartitionSplit(
            data["topic"],
            data["partition"],
            data["position"],
            data.get("stop_offset"),
            data.get("stop_time_ms"),
            data.get("start_time_ms"),
            data.get("generation", 0),
            data.get("topic_id"),
        )


def split_place(split_id: str) -> str:
    """The ``topic:partition`` of a split id of any generation."""
    return generation_key(split_id)
