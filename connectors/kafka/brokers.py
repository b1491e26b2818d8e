"""What the enumerator and the source ask the brokers: topics and their partitions,
watermarks, offsets by time (each a metadata or ListOffsets request, no consumer group)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable
from concurrent.futures import Future
from typing import Any, Protocol

from confluent_kafka import Consumer, KafkaException, TopicCollection, TopicPartition
from confluent_kafka.admin import AdminClient

from connectors.kafka.connection import REQUEST_TIMEOUT_S, client_config, new_consumer
from connectors.kafka.outages import broker_log

log = logging.getLogger("connectors.kafka")

#: Errors that a later request may not meet (a broker away, a leader moving).
TRANSIENT = (KafkaException, RuntimeError)
#: How long a fetch that asks the brokers for high watermarks waits for their answers.
FETCH_PROBE_S = 5.0
#: (topic, partition)
Partition = tuple[str, int]
#: The partitions whose short ListOffsets answer was said, by (servers, topic, partition).
_SAID_SHORT: set[tuple[str, str, int]] = set()
#: How long a lookup of topic ids waits (brokers that do not know the request never answer).
TOPIC_IDS_TIMEOUT_S = 2.0
#: The brokers, by servers, that told no topic id (asked no more by this process).
_NO_TOPIC_IDS: set[str] = set()


class KafkaMetadata(Protocol):
    """The brokers as the enumerator sees them."""

    def partitions(self) -> dict[str, int]:
        """Each topic (internal ones left out) and how many partitions it has."""
        ...

    def watermarks(self, topic: str, partition: int) -> tuple[int, int]:
        """(the first offset kept, the offset the next record will get)."""
        ...

    def ends(self, partitions: Iterable[Partition]) -> dict[Partition, tuple[int, int]]:
        """``watermarks`` of each partition, the end never below the high watermark a
        fetch reports (where the brokers answer one)."""
        ...

    def offset_for_time(self, topic: str, partition: int, time_ms: int) -> int | None:
        """The first offset whose record's timestamp is at or after ``time_ms``; None when
        there is none yet."""
        ...

    def topic_ids(self, topics: Iterable[str]) -> dict[str, str]:
        """The id (KIP-516) of each topic whose id the brokers tell (``topic_ids``)."""
        ...


class BrokerMetadata:
    """``KafkaMetadata`` over a consumer that is assigned nothing."""

    def __init__(self, consumer: Consumer, servers: str | None = None) -> None:
        """``servers``: the brokers, for a consumer of its own that fetches (``ends``);
        None: ``ends`` trusts ListOffsets."""
        self.consumer = consumer
        self.servers = servers
        self._lock = threading.Lock()

    def partitions(self, timeout_s: float = REQUEST_TIMEOUT_S) -> dict[str, int]:
        with self._lock:
            listed = self.consumer.list_topics(timeout=timeout_s)
        self._answered()
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

    def ends(self, partitions: Iterable[Partition]) -> dict[Partition, tuple[int, int]]:
        """``watermarks`` of each partition, the end raised to the high watermark a fetch
        reports where that is higher, with a warning: some brokers (Tansu 0.6) answer
        ListOffsets(LATEST) short by the last producer batch, and a stop or a lag taken from
        it would leave records unread and unsaid (issue 25)."""
        found = {key: self.watermarks(*key) for key in partitions}
        if not found or self.servers is None:
            return found
        fetched = fetched_high_watermarks(self.servers, {key: high for key, (_, high) in found.items()})
        for key, high in fetched.items():
            low, listed = found[key]
            if high > listed:
                said = (self.servers, *key) in _SAID_SHORT
                _SAID_SHORT.add((self.servers, *key))
                log.log(
                    logging.DEBUG if said else logging.WARNING,
                    "topic %s partition %d: the brokers answer ListOffsets(latest) %d, but a fetch "
                    "reports high watermark %d; the partition ends at %d (said once a partition)",
                    *key,
                    listed,
                    high,
                    high,
                )
                found[key] = (low, high)
        return found

    def _answered(self) -> None:
        if self.servers is not None:
            broker_log(self.servers).answered()

    def topic_ids(self, topics: Iterable[str]) -> dict[str, str]:
        return {} if self.servers is None else topic_ids(self.servers, topics)

    def offset_for_time(self, topic: str, partition: int, time_ms: int) -> int | None:
        with self._lock:
            (found,) = self.consumer.offsets_for_times(
                [TopicPartition(topic, partition, time_ms)], timeout=REQUEST_TIMEOUT_S
            )
        if found.error is not None:
            raise KafkaException(found.error)
        return None if found.offset < 0 else int(found.offset)


def topic_ids(servers: str, topics: Iterable[str]) -> dict[str, str]:
    """The id (KIP-516) of each of ``topics`` that the brokers tell (DescribeTopics); a
    topic they do not know, or brokers that tell none (librdkafka's mock cluster never
    answers: asked once a process), are left out. A topic deleted and made again under
    its name has another id."""
    wanted = sorted(set(topics))
    if not wanted or servers in _NO_TOPIC_IDS:
        return {}
    admin = AdminClient(client_config(servers))
    found: dict[str, str] = {}
    try:
        futures: dict[str, Future[Any]] = admin.describe_topics(  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
            TopicCollection(wanted), request_timeout=TOPIC_IDS_TIMEOUT_S
        )
        for topic, future in futures.items():
            try:
                described: Any = future.result(timeout=TOPIC_IDS_TIMEOUT_S + 1)
            except (KafkaException, TimeoutError, RuntimeError) as exc:
                if isinstance(exc, TimeoutError) or "timed out" in str(exc).lower():
                    _NO_TOPIC_IDS.add(servers)
                    log.info("Kafka at %s tells no topic ids: topics are told apart by offsets only", servers)
                    return {}
                continue  # a topic it does not know (any more)
            topic_id = getattr(described, "topic_id", None)
            if topic_id is not None and str(topic_id) != "AAAAAAAAAAAAAAAAAAAAAA":  # the zero id: none
                found[topic] = str(topic_id)
    except (KafkaException, ValueError, TypeError) as exc:
        log.info("could not ask Kafka at %s for topic ids: %s", servers, exc)
    return found


def fetched_high_watermarks(servers: str, listed: dict[Partition, int]) -> dict[Partition, int]:
    """The high watermark that fetch responses report for each partition (fetched from its
    ``listed`` end; what is fetched is dropped), by a consumer of its own; a partition the
    brokers do not answer for within ``FETCH_PROBE_S`` is left out."""
    consumer = new_consumer(servers, **{"fetch.wait.max.ms": 50})
    found: dict[Partition, int] = {}
    try:
        consumer.assign([TopicPartition(t, p, max(high, 0)) for (t, p), high in listed.items()])
        deadline = time.monotonic() + FETCH_PROBE_S
        while len(found) < len(listed) and time.monotonic() < deadline:
            consumer.consume(num_messages=1000, timeout=0.05)
            for key in listed.keys() - found.keys():
                _, high = consumer.get_watermark_offsets(TopicPartition(*key), cached=True)
                if high >= 0:
                    found[key] = int(high)
    except TRANSIENT as exc:
        log.info("could not fetch high watermarks: %s", exc)
    finally:
        consumer.close()
    return found
