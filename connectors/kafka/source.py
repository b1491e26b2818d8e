"""The kafka source: the partitions of some topics, each a split."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import pyarrow as pa
from confluent_kafka import Message, TopicPartition

from connectors.kafka.brokers import TRANSIENT, BrokerMetadata
from connectors.kafka.config import KafkaSourceConfig, kafka_target, topic_matches
from connectors.kafka.connection import (
    REQUEST_TIMEOUT_S,
    error_reason,
    mask_servers,
    metadata_client,
    new_consumer,
)
from connectors.kafka.enumerator import PartitionEnumerator
from connectors.kafka.reader import METADATA_FIELDS, KafkaPartitionReader
from connectors.kafka.split import PartitionSplit, PartitionSplitSerializer
from source_support.api import (
    Boundedness,
    OffsetEntry,
    RecordBatch,
    SourceReaderContext,
    SplitEnumeratorContext,
)
from source_support.connections import key_allowed, outside_words
from source_support.errors import ConfigError
from source_support.formats import AvroFormat, FormatSpec, RecordFormat
from source_support.formats.messages import MessageDecoder, message_decoder
from source_support.formats.metadata import message_schema
from source_support.registry import BuildContext
from source_support.streams.reader import Decoding
from source_support.streams.source import StreamReading, StreamSource

DEFAULT_FLOW = "adf"
#: Records sampled to infer a schema.
SAMPLE_MESSAGES = 1000
#: How long sampling waits for records it knows are there.
SAMPLE_WAIT_S = 5.0
#: How long a run's start waits for the brokers to answer.
CHECK_TIMEOUT_S = 5.0


class KafkaSource(StreamSource[PartitionSplit, RecordFormat | AvroFormat, MessageDecoder]):
    metadata_fields = METADATA_FIELDS
    #: ``stop_offsets`` bound a run too.
    bounding_stops = ("latest", "time")
    split_noun = "partitions"
    #: How long ``check_input`` waits for the brokers.
    check_timeout_s = CHECK_TIMEOUT_S

    def __init__(
        self,
        reading: StreamReading[RecordFormat | AvroFormat],
        *,
        servers: str,
        topics: list[str] | None,
        topic_pattern: str | None,
        start_offsets: dict[str, int] | None,
        stop_offsets: dict[str, int] | None,
        flow: str,
        on_reset: str = "fail",
        topic_patterns: tuple[str, ...] = (),
        address_field: str = "source.bootstrap_servers",
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(reading, clock=clock)
        self.servers = servers
        self.address_field = address_field
        #: The topics its connection allows (globs; empty: any).
        self.topic_patterns = topic_patterns
        self.topics = topics
        self.topic_pattern = topic_pattern
        self.start_offsets = start_offsets
        self.stop_offsets = stop_offsets
        self.flow = flow
        self.on_reset = on_reset

    @classmethod
    def check_stop(cls, config: KafkaSourceConfig, stop: Mapping[str, Any]) -> None:
        """A Kafka stop is ``latest``, a time or a number of records; per partition, ``stop_offsets``."""
        if stop.get("kind") == "position":
            raise ConfigError(
                "stop.at",
                f"{stop['at']!r}: a Kafka stop is per partition: give source.stop_offsets "
                '(such as {"orders:0" = 1000}), "latest" or a time',
            )
        if stop and config.stop_offsets is not None:
            raise ConfigError("source.stop_offsets", "give source.stop_offsets or a [stop] rule, not both")

    @classmethod
    def from_config(cls, config: KafkaSourceConfig, fmt: FormatSpec, context: BuildContext) -> KafkaSource:
        if fmt.type == "fields":
            raise ConfigError(
                "format.type", "a Kafka record's value is one record: use json, csv, avro or raw"
            )
        if "field" in fmt.options:
            raise ConfigError("format.field", "a Kafka record's value is the record: remove it")
        cls.check_stop(config, context.stop or {})
        reading = cls.message_reading(
            config,
            fmt,
            context,
            one_record="a Kafka record's value is one record: use json, csv, avro or raw",
        )
        servers, patterns = kafka_target(config.to_dict(), context.env)
        return cls(
            reading,
            servers=servers,
            topic_patterns=patterns,
            address_field="source.connection" if config.connection else "source.bootstrap_servers",
            topics=config.topics,
            topic_pattern=config.topic_pattern,
            start_offsets=config.start_offsets,
            stop_offsets=config.stop_offsets,
            flow=context.flow_name or DEFAULT_FLOW,
            on_reset=config.on_reset,
        )

    @property
    def boundedness(self) -> Boundedness:
        if self.stop_offsets:
            return Boundedness.BOUNDED
        return super().boundedness

    @property
    def split_serializer(self) -> PartitionSplitSerializer:
        return PartitionSplitSerializer()

    @property
    def brokers(self) -> BrokerMetadata:
        return BrokerMetadata(metadata_client(self.servers), self.servers)

    def allowed(self, topic: str) -> bool:
        """Whether the connection allows ``topic`` (a topic outside it is never read)."""
        return key_allowed(topic, self.topic_patterns)

    def split_refusal(self, split: PartitionSplit) -> str | None:
        """A partition of a topic its connection no longer allows is not read."""
        return None if self.allowed(split.topic) else outside_words(split.topic, self.topic_patterns)

    def restore_enumerator(
        self, context: SplitEnumeratorContext[PartitionSplit], state: dict[str, Any] | None
    ) -> PartitionEnumerator:
        return PartitionEnumerator(
            context,
            brokers=self.brokers,
            topics=self.topics,
            topic_pattern=self.topic_pattern,
            start=self.start,
            start_offsets=self.start_offsets,
            stop_offsets=self.stop_offsets,
            discovery_interval_ms=self.discovery_interval_ms,
            stop=self.stop,
            state=state,
            allowed=self.allowed,
            clock=self.clock,
        )

    def split_reader(
        self, context: SourceReaderContext, decoding: Decoding[MessageDecoder]
    ) -> KafkaPartitionReader:
        return KafkaPartitionReader(
            self.servers,
            decoding,
            flow=self.flow,
            subtask=context.subtask,
            on_reset=self.on_reset,
            send_event=context.send_source_event_to_coordinator,
            clock=self.clock,
        )

    def decoder(self) -> MessageDecoder:
        return message_decoder(self.fmt, what="the record's value")

    def format_position(self, position: int) -> str:
        """The offset in the partition (of a bad record; of the next record to read, for a
        checkpoint)."""
        return str(position)

    def split_lags(self, splits: Mapping[str, tuple[dict[str, Any], int]]) -> dict[str, int | None]:
        """Records of each partition past its committed offset (high watermark - offset,
        the high watermark as ``BrokerMetadata.ends`` tells it); None where the brokers
        cannot tell now."""
        lags: dict[str, int | None] = dict.fromkeys(splits)
        places = {
            split_id: (payload["topic"], payload["partition"])
            for split_id, (payload, _) in splits.items()
            if "topic" in payload and "partition" in payload
        }
        try:
            ends = self.brokers.ends(places.values())
        except TRANSIENT:
            return lags
        for split_id, (payload, position) in splits.items():
            if split_id not in places:
                continue
            _, high = ends[places[split_id]]
            stop = payload.get("stop_offset")
            end = high if stop is None else min(high, stop)
            lags[split_id] = max(0, end - position)
        return lags

    def check_input(self) -> None:
        """Refuses to start a run whose brokers cannot be reached."""
        consumer = new_consumer(self.servers)  # of its own: one of brokers never reached is closed
        try:
            BrokerMetadata(consumer).partitions(timeout_s=self.check_timeout_s)
        except TRANSIENT as exc:
            raise ConfigError(
                self.address_field, f"cannot reach Kafka at {mask_servers(self.servers)}: {error_reason(exc)}"
            ) from None
        finally:
            consumer.close()

    def infer_schema(self) -> pa.Schema | None:
        """The schema of up to ``SAMPLE_MESSAGES`` records from the partitions' starts; None
        if they hold none. Avro: the columns of ``format.writer_schema``, without sampling."""
        return message_schema(self.fmt, self._sample, METADATA_FIELDS if self.metadata else None)

    def sample(self, *, limit: int, latest: bool, timeout_s: float) -> list[RecordBatch]:
        """Up to ``limit`` records of the matching partitions, in their order, each
        partition's first (or with ``latest`` its newest, from ``limit`` before its end),
        read by a consumer assigned there that commits nothing and is closed after: the
        flow's group and its offsets are never touched."""
        deadline = time.monotonic() + timeout_s
        brokers = self.brokers
        places = [
            (topic, partition)
            for topic, count in sorted(brokers.partitions().items())
            if topic_matches(topic, self.topics, self.topic_pattern) and self.allowed(topic)
            for partition in range(count)
        ]
        wanted: dict[tuple[str, int], tuple[int, int]] = {}  # (start, end) of each partition read
        left = limit
        for place, (low, high) in sorted(brokers.ends(places).items()):
            if left <= 0:
                break
            count = min(high - low, left)
            if count > 0:
                wanted[place] = (high - count, high) if latest else (low, low + count)
                left -= count
        if not wanted:
            return []
        got: dict[tuple[str, int], list[Message]] = {place: [] for place in wanted}
        consumer = new_consumer(self.servers)  # not the flow's group, and commits nothing
        try:
            consumer.assign([TopicPartition(t, p, start) for (t, p), (start, _) in wanted.items()])
            reading = set(wanted)
            while reading and time.monotonic() < deadline:
                wait = max(0.0, min(0.5, deadline - time.monotonic()))
                for message in consumer.consume(limit, timeout=wait):
                    place = (message.topic() or "", message.partition() or 0)
                    offset = message.offset() or 0
                    if message.error() is not None or place not in reading:
                        continue
                    start, end = wanted[place]
                    if start <= offset < end:
                        got[place].append(message)
                    if offset >= end - 1:
                        reading.discard(place)
        finally:
            consumer.close()
        decoding = Decoding(self.decoder(), metadata=self.metadata, output_schema=self.schema)
        reader = KafkaPartitionReader(self.servers, decoding, flow=self.flow)
        batches: list[RecordBatch] = []
        for (topic, partition), messages in got.items():
            if not messages:
                continue
            offsets = [m.offset() or 0 for m in messages]
            split = PartitionSplit(topic, partition, offsets[0])
            records, bad = reader.records_of(split, messages, offsets)
            end = OffsetEntry(split.split_id, offsets[-1] + 1)
            batches.append(RecordBatch(split.split_id, split.offset, end, records, bad))
        return batches

    def _sample(self) -> list[bytes]:
        brokers = self.brokers
        partitions: list[TopicPartition] = []
        for topic, count in sorted(brokers.partitions().items()):
            if topic_matches(topic, self.topics, self.topic_pattern) and self.allowed(topic):
                for partition in range(count):
                    low, high = brokers.watermarks(topic, partition)
                    if high > low:
                        partitions.append(TopicPartition(topic, partition, low))
        if not partitions:
            return []
        consumer = new_consumer(self.servers)
        bodies: list[bytes] = []
        try:
            consumer.assign(partitions)
            deadline = time.monotonic() + SAMPLE_WAIT_S + REQUEST_TIMEOUT_S
            while len(bodies) < SAMPLE_MESSAGES and time.monotonic() < deadline:
                messages = consumer.consume(SAMPLE_MESSAGES - len(bodies), timeout=0.5)
                bodies += [v for m in messages if m.error() is None and (v := m.value()) is not None]
                if not messages and bodies:
                    break
        finally:
            consumer.close()
        return bodies[:SAMPLE_MESSAGES]
