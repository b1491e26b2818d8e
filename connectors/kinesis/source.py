"""The kinesis source: the shards of a Kinesis data stream, each a split."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from connectors.aws.config import AwsTarget, aws_target
from connectors.aws.session import AWS_ERRORS, aws_error_reason, is_credential_error
from connectors.kinesis.config import KinesisSourceConfig, start_timestamp_ms
from connectors.kinesis.enumerator import ShardEnumerator
from connectors.kinesis.reader import METADATA_FIELDS, KinesisSplitReader
from connectors.kinesis.shards import (
    get_records,
    is_not_found,
    list_shards,
    next_iterator,
    shard_iterator,
    shared_client,
)
from connectors.kinesis.split import AT_TIMESTAMP, TRIM_HORIZON, Anchor, ShardSplit, ShardSplitSerializer
from source_support.api import OffsetEntry, RecordBatch, SourceReaderContext, SplitEnumeratorContext
from source_support.connections import key_allowed, outside_words
from source_support.errors import ConfigError
from source_support.formats import AvroFormat, FormatSpec, RecordFormat
from source_support.formats.messages import MessageDecoder, message_decoder
from source_support.formats.metadata import message_schema
from source_support.registry import BuildContext
from source_support.streams.reader import Decoding
from source_support.streams.source import StreamReading, StreamSource

if TYPE_CHECKING:
    from mypy_boto3_kinesis import KinesisClient
    from mypy_boto3_kinesis.type_defs import RecordTypeDef

#: Records sampled to infer a schema.
SAMPLE_RECORDS = 1000
#: How far back a preview of the newest records looks first, and each time further (ms)
#: while the shard holds fewer than it asks for since then; then from the shard's start.
LATEST_WINDOWS_MS = (60_000, 600_000, 3_600_000)


class KinesisSource(StreamSource[ShardSplit, RecordFormat | AvroFormat, MessageDecoder]):
    metadata_fields = METADATA_FIELDS
    #: A Kinesis stream has no position across its shards.
    bounding_stops = ("latest", "time")
    #: No total of records to read: Kinesis tells no shard's length (``split_lags``).
    split_noun = "shards"

    def __init__(
        self,
        reading: StreamReading[RecordFormat | AvroFormat],
        *,
        target: AwsTarget,
        stream: str,
        start_timestamp_ms: int | None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(reading, clock=clock)
        self.target = target
        self.stream = stream
        self.start_timestamp_ms = start_timestamp_ms

    @classmethod
    def check_stop(cls, config: KinesisSourceConfig, stop: Mapping[str, Any]) -> None:
        """A Kinesis stream has no position across its shards."""
        if stop.get("kind") == "position":
            raise ConfigError(
                "stop.at",
                f"{stop['at']!r}: a Kinesis stream has no position across its shards; "
                "give latest or an ISO-8601 time",
            )

    @classmethod
    def from_config(
        cls, config: KinesisSourceConfig, fmt: FormatSpec, context: BuildContext
    ) -> KinesisSource:
        if "field" in fmt.options:
            raise ConfigError("format.field", "a Kinesis record's data is the record: remove it")
        cls.check_stop(config, context.stop or {})
        reading = cls.message_reading(
            config,
            fmt,
            context,
            one_record="a Kinesis record is one record: use json, csv, avro or raw, not fields",
        )
        target = aws_target(config, context.env)
        if not key_allowed(config.stream_name, target.key_patterns):
            raise ConfigError(
                "source.stream_name",
                f"{config.stream_name!r} is not among the streams connection {config.connection!r} allows",
            )
        return cls(
            reading,
            target=target,
            stream=config.stream_name,
            start_timestamp_ms=(
                start_timestamp_ms(config.start_timestamp) if config.start_timestamp is not None else None
            ),
        )

    def split_refusal(self, split: ShardSplit) -> str | None:
        """A shard of a stream its connection no longer allows is not read."""
        if key_allowed(split.stream, self.target.key_patterns):
            return None
        return outside_words(split.stream, self.target.key_patterns)

    @property
    def split_serializer(self) -> ShardSplitSerializer:
        return ShardSplitSerializer()

    def client(self) -> KinesisClient:
        return shared_client(self.target)

    def restore_enumerator(
        self, context: SplitEnumeratorContext[ShardSplit], state: dict[str, Any] | None
    ) -> ShardEnumerator:
        return ShardEnumerator(
            context,
            client=self.client,
            stream=self.stream,
            start=self.start,
            start_timestamp_ms=self.start_timestamp_ms,
            discovery_interval_ms=self.discovery_interval_ms,
            stop=self.stop,
            state=state,
            clock=self.clock,
        )

    def split_reader(
        self, context: SourceReaderContext, decoding: Decoding[MessageDecoder]
    ) -> KinesisSplitReader:
        return KinesisSplitReader(
            self.client,
            decoding,
            endpoint=self.target.shown_endpoint,
            send_event=context.send_source_event_to_coordinator,
            clock=self.clock,
        )

    def decoder(self) -> MessageDecoder:
        return message_decoder(self.fmt, what="the record's data")

    def split_lags(self, splits: Mapping[str, tuple[dict[str, Any], int]]) -> dict[str, int | None]:
        """Unknown for every shard: Kinesis says how far behind a reader is in time
        (MillisBehindLatest), never in records."""
        return dict.fromkeys(splits)

    def check_input(self) -> None:
        """Refuses to start a run whose stream cannot be reached: the endpoint does not
        answer, the credentials are refused, or the stream does not exist."""
        try:
            self.client().describe_stream_summary(StreamName=self.stream)
        except AWS_ERRORS as exc:
            field = self.target.field
            if is_not_found(exc):
                field = "source.stream_name"
            elif is_credential_error(exc) and field == "source.endpoint_url":
                field = "source.access_key_id"
            raise ConfigError(
                field,
                f"cannot read stream {self.stream!r} at {self.target.shown_endpoint}: {aws_error_reason(exc)}",
            ) from None

    def infer_schema(self) -> pa.Schema | None:
        """The schema of up to ``SAMPLE_RECORDS`` records read from the start of each
        shard; None if the stream holds none. Avro: the columns of
        ``format.writer_schema``, without sampling."""
        return message_schema(self.fmt, self._sample, METADATA_FIELDS if self.metadata else None)

    def sample(self, *, limit: int, latest: bool, timeout_s: float) -> list[RecordBatch]:
        """Up to ``limit`` records of the stream's shards, in shard order, each shard's first
        (from TRIM_HORIZON) or with ``latest`` its newest (``LATEST_WINDOWS_MS``): GetRecords
        only, so no checkpoint, lease or table is made anywhere."""
        deadline = time.monotonic() + timeout_s
        client = self.client()
        decoding = Decoding(self.decoder(), metadata=self.metadata, output_schema=self.schema)
        reader = KinesisSplitReader(self.client, decoding, endpoint=self.target.shown_endpoint)
        batches: list[RecordBatch] = []
        left = limit
        for shard in list_shards(client, self.stream):
            if left <= 0 or time.monotonic() >= deadline:
                break
            records = self._shard_sample(client, shard.shard_id, left, latest, deadline)
            if not records:
                continue
            split = ShardSplit(self.stream, shard.shard_id, 0, "preview", Anchor(TRIM_HORIZON))
            table, bad = reader.records_of(split, records)
            end = OffsetEntry(split.split_id, len(records))
            batches.append(RecordBatch(split.split_id, split.offset, end, table, bad))
            left -= len(records)
        return batches

    def _shard_sample(
        self, client: KinesisClient, shard_id: str, limit: int, latest: bool, deadline: float
    ) -> list[RecordTypeDef]:
        """The first ``limit`` records of the shard, or with ``latest`` its last ``limit``
        since the nearest of ``LATEST_WINDOWS_MS`` back that holds as many (else since its
        start)."""
        if not latest:
            return self._records_from(client, shard_id, Anchor(TRIM_HORIZON), deadline, first=limit)
        now_ms = int(self.clock() * 1000)
        anchors = [Anchor(AT_TIMESTAMP, str(now_ms - window)) for window in LATEST_WINDOWS_MS]
        kept: list[RecordTypeDef] = []
        for anchor in [*anchors, Anchor(TRIM_HORIZON)]:
            kept = self._records_from(client, shard_id, anchor, deadline, last=limit)
            if len(kept) >= limit or time.monotonic() >= deadline:
                break
        return kept

    def _records_from(
        self,
        client: KinesisClient,
        shard_id: str,
        anchor: Anchor,
        deadline: float,
        *,
        first: int | None = None,
        last: int | None = None,
    ) -> list[RecordTypeDef]:
        """The records of the shard from ``anchor`` to its end (as far as the time allows):
        the ``first`` of them, or the ``last``."""
        kept: deque[RecordTypeDef] = deque(maxlen=last)
        iterator: str | None = shard_iterator(client, self.stream, shard_id, anchor)
        while iterator is not None and time.monotonic() < deadline:
            wanted = SAMPLE_RECORDS if first is None else first - len(kept)
            answer = get_records(client, iterator, wanted)
            kept.extend(answer.get("Records", []))
            iterator = next_iterator(answer)
            if first is not None and len(kept) >= first:
                break
            if not answer.get("Records") and not answer.get("MillisBehindLatest"):
                break
        return list(kept)[:first]

    def _sample(self) -> list[bytes]:
        client = self.client()
        bodies: list[bytes] = []
        for shard in list_shards(client, self.stream):
            iterator: str | None = shard_iterator(client, self.stream, shard.shard_id, Anchor(TRIM_HORIZON))
            while iterator is not None and len(bodies) < SAMPLE_RECORDS:
                answer = get_records(client, iterator, SAMPLE_RECORDS - len(bodies))
                bodies += [r["Data"] for r in answer.get("Records", [])]
                iterator = next_iterator(answer)
                if not answer.get("Records") and not answer.get("MillisBehindLatest"):
                    break
            if len(bodies) >= SAMPLE_RECORDS:
                break
        return bodies
