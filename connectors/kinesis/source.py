"""The kinesis source: the shards of a Kinesis data stream, each a split."""

from __future__ import annotations

import time
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
from connectors.kinesis.split import TRIM_HORIZON, Anchor, ShardSplit, ShardSplitSerializer
from source_support.api import Boundedness, Source, SourceReaderContext, SplitEnumeratorContext
from source_support.connections import key_allowed
from source_support.errors import ConfigError
from source_support.formats import AvroFormat, FieldsFormat, FormatSpec, RecordFormat
from source_support.formats.messages import MessageDecoder, message_decoder
from source_support.formats.metadata import format_for_run, message_schema
from source_support.formats.metadata import with_metadata as schema_with_metadata
from source_support.reader_base import SourceReaderBase
from source_support.registry import BuildContext

if TYPE_CHECKING:
    from mypy_boto3_kinesis import KinesisClient

#: Records sampled to infer a schema.
SAMPLE_RECORDS = 1000


class KinesisSource(Source[ShardSplit]):
    def __init__(
        self,
        *,
        target: AwsTarget,
        stream: str,
        start: str,
        start_timestamp_ms: int | None,
        discovery_interval_ms: int,
        metadata: bool,
        fmt: RecordFormat | AvroFormat,
        schema: pa.Schema | None,
        batch_size: int,
        stop: dict[str, Any],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.target = target
        self.stream = stream
        self.start = start
        self.start_timestamp_ms = start_timestamp_ms
        self.discovery_interval_ms = discovery_interval_ms
        self.metadata = metadata
        self.fmt = fmt
        self.schema = schema
        self.batch_size = batch_size
        self.stop = stop
        self.clock = clock

    @classmethod
    def from_config(
        cls, config: KinesisSourceConfig, fmt: FormatSpec, context: BuildContext
    ) -> KinesisSource:
        if "field" in fmt.options:
            raise ConfigError("format.field", "a Kinesis record's data is the record: remove it")
        stop = dict(context.stop or {})
        if stop.get("kind") == "position":
            raise ConfigError(
                "stop.at",
                f"{stop['at']!r}: a Kinesis stream has no position across its shards; "
                "give latest or an ISO-8601 time",
            )
        built, schema = format_for_run(
            fmt, context.schema, METADATA_FIELDS if config.metadata else None, env=context.env
        )
        if isinstance(built, FieldsFormat):
            raise ConfigError(
                "format.type", "a Kinesis record is one record: use json, csv, avro or raw, not fields"
            )
        target = aws_target(config, context.env)
        if not key_allowed(config.stream_name, target.key_patterns):
            raise ConfigError(
                "source.stream_name",
                f"{config.stream_name!r} is not among the streams connection {config.connection!r} allows",
            )
        return cls(
            target=target,
            stream=config.stream_name,
            start=config.start,
            start_timestamp_ms=(
                start_timestamp_ms(config.start_timestamp) if config.start_timestamp is not None else None
            ),
            discovery_interval_ms=config.discovery_interval_ms,
            metadata=config.metadata,
            fmt=built,
            schema=schema,
            batch_size=context.batch_size,
            stop=stop,
        )

    @property
    def boundedness(self) -> Boundedness:
        if self.stop.get("kind") in ("latest", "time"):
            return Boundedness.BOUNDED
        return Boundedness.CONTINUOUS_UNBOUNDED

    @property
    def split_serializer(self) -> ShardSplitSerializer:
        return ShardSplitSerializer()

    def client(self) -> KinesisClient:
        return shared_client(self.target)

    def create_enumerator(self, context: SplitEnumeratorContext[ShardSplit]) -> ShardEnumerator:
        return self.restore_enumerator(context, None)

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

    def create_reader(self, context: SourceReaderContext) -> SourceReaderBase[ShardSplit]:
        if self.fmt.schema is None:
            raise ConfigError("format.schema", "is needed to read (none was given or inferred)")
        split_reader = KinesisSplitReader(
            self.client,
            self.decoder(),
            endpoint=self.target.shown_endpoint,
            metadata=self.metadata,
            output_schema=self.schema,
            first_bad_record_only=lambda: context.bad_record_fails_split,
            send_event=context.send_source_event_to_coordinator,
            clock=self.clock,
        )
        return SourceReaderBase(context, split_reader, batch_size=self.batch_size)

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


def with_metadata(schema: pa.Schema) -> pa.Schema:
    """``schema`` with the metadata columns after its own."""
    return schema_with_metadata(schema, METADATA_FIELDS)


def output_schema(config: KinesisSourceConfig, schema: pa.Schema) -> pa.Schema:
    """The schema a run of this source lands: the format's, plus the metadata columns
    when ``metadata`` is set."""
    return with_metadata(schema) if config.metadata else schema
