"""What the enumerator and the source ask the brokers: topics and their partitions,
watermarks, offsets by time (each a metadata or ListOffsets request, no consumer group)."""

from __future__ import annotations

import threading
from typing import Protocol

from confluent_kafka import Consumer, KafkaException, TopicPartition

from connectors.kafka.connection import REQUEST_TIMEOUT_S

#: Errors that a later request may not meet (a broker away, a leader moving).
TRANSIENT = (KafkaException, RuntimeError)


class KafkaMetadata(Protocol):
    """The brokers as the enumerator sees them."""

    def partitions(self) -> dict[str, int]:
        """Each topic (internal ones left out) and how many partitions it has."""
        ...

    def watermarks(self, topic: str, partition: int) -> tuple[int, int]:
        """(the first offset kept, the offset the next record will get)."""
        ...

    def offset_for_time(self, topic: str, partition: int, time_ms: int) -> int | None:
        """The first offset whose record's timestamp is at or after ``time_ms``; None when
        there is none yet."""
        ...


class BrokerMetadata:
    """``KafkaMetadata`` over a consumer that is assigned nothing."""

    def __init__(self, consumer: Consumer) -> None:
        self.consumer = consumer
        self._lock = threading.Lock()

    def partitions(self, timeout_s: float = REQUEST_TIMEOUT_S) -> dict[str, int]:
        with self._lock:
            listed = self.consumer.list_topics(timeout=timeout_s)
        return {
            name: len(topic.partitions)
            for name, topic in listed.topics.items()
            if topic.error is None and not name.startswith("__")
        }

    def watermarks(self, topic: str, partition: int) -> tuple[int, int]:
        with self._lock:
            low, high = self.consumer.get_watermark_offsets(
                TopicPartition(topic, partition), timeout=REQUEST_TIMEOUT_S, cached=False
            )
        return int(low), int(high)

    def offset_for_time(self, topic: str, partition: int, time_ms: int) -> int | None:
        with self._lock:
            (found,) = self.consumer.offsets_for_times(
                [TopicPartition(topic, partition, time_ms)], timeout=REQUEST_TIMEOUT_S
            )
        if found.error is not None:
            raise KafkaException(found.error)
        return None if found.offset < 0 else int(found.offset)
