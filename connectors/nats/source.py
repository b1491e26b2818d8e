"""The nats_jetstream source: the subject filters of a JetStream stream, each a split."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import nats.errors
import nats.js.errors
import pyarrow as pa
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig

from connectors.nats.config import NatsSourceConfig, nats_target
from connectors.nats.connection import (
    NatsClient,
    connection_reason,
    mask_servers,
    shared_client,
)
from connectors.nats.enumerator import SubjectEnumerator
from connectors.nats.jetstream import TRANSIENT, consumer_name, stream_info
from connectors.nats.reader import METADATA_FIELDS, NatsSplitReader
from connectors.nats.split import SubjectSplit, SubjectSplitSerializer
from source_support.api import Boundedness, Source, SourceReaderContext, SplitEnumeratorContext
from source_support.connections import key_allowed
from source_support.errors import ConfigError
from source_support.formats import AvroFormat, FieldsFormat, FormatSpec, RecordFormat
from source_support.formats.messages import MessageDecoder, message_decoder
from source_support.formats.metadata import format_for_run, message_schema
from source_support.formats.metadata import with_metadata as schema_with_metadata
from source_support.reader_base import SourceReaderBase
from source_support.registry import BuildContext

METADATA_NAMES = tuple(f.name for f in METADATA_FIELDS)
DEFAULT_FLOW = "adf"
#: Messages sampled to infer a schema.
SAMPLE_MESSAGES = 1000


class NatsJetStreamSource(Source[SubjectSplit]):
    def __init__(
        self,
        *,
        servers: str,
        stream: str,
        subjects: list[str] | None,
        start: str,
        discovery_interval_ms: int,
        metadata: bool,
        fmt: RecordFormat | AvroFormat,
        schema: pa.Schema | None,
        batch_size: int,
        flow: str,
        stop: dict[str, Any],
        subject_patterns: tuple[str, ...] = (),
        address_field: str = "source.servers",
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.servers = servers
        self.address_field = address_field
        #: The subjects its connection allows (empty: any).
        self.subject_patterns = subject_patterns
        self.stream = stream
        self.subjects = subjects
        self.start = start
        self.discovery_interval_ms = discovery_interval_ms
        self.metadata = metadata
        self.fmt = fmt
        self.schema = schema
        self.batch_size = batch_size
        self.flow = flow
        self.stop = stop
        self.clock = clock

    @classmethod
    def from_config(
        cls, config: NatsSourceConfig, fmt: FormatSpec, context: BuildContext
    ) -> NatsJetStreamSource:
        if fmt.type == "fields":
            raise ConfigError("format.type", "a NATS message is one record: use json, csv or raw, not fields")
        if "field" in fmt.options:
            raise ConfigError("format.field", "a NATS message's body is the record: remove it")
        stop = dict(context.stop or {})
        if stop.get("kind") == "position" and not str(stop["at"]).isdigit():
            raise ConfigError(
                "stop.at", f"{stop['at']!r}: a NATS stream's position is a sequence number (42)"
            )
        built, schema = format_for_run(
            fmt, context.schema, METADATA_FIELDS if config.metadata else None, env=context.env
        )
        if isinstance(built, FieldsFormat):
            raise ConfigError(
                "format.type", "a NATS message is one record: use json, csv, avro or raw, not fields"
            )
        servers, patterns = nats_target(config.to_dict(), context.env, "source")
        return cls(
            servers=servers,
            subject_patterns=patterns,
            address_field="source.connection" if config.connection else "source.servers",
            stream=config.stream,
            subjects=config.subjects,
            start=config.start,
            discovery_interval_ms=config.discovery_interval_ms,
            metadata=config.metadata,
            fmt=built,
            schema=schema,
            batch_size=context.batch_size,
            flow=context.flow_name or DEFAULT_FLOW,
            stop=stop,
        )

    @property
    def boundedness(self) -> Boundedness:
        if self.stop.get("kind") in ("latest", "time", "position"):
            return Boundedness.BOUNDED
        return Boundedness.CONTINUOUS_UNBOUNDED

    @property
    def split_serializer(self) -> SubjectSplitSerializer:
        return SubjectSplitSerializer()

    @property
    def client(self) -> NatsClient:
        return shared_client(self.servers)

    def create_enumerator(self, context: SplitEnumeratorContext[SubjectSplit]) -> SubjectEnumerator:
        return self.restore_enumerator(context, None)

    def restore_enumerator(
        self, context: SplitEnumeratorContext[SubjectSplit], state: dict[str, Any] | None
    ) -> SubjectEnumerator:
        return SubjectEnumerator(
            context,
            client=self.client,
            stream=self.stream,
            subjects=self.subjects,
            start=self.start,
            discovery_interval_ms=self.discovery_interval_ms,
            stop=self.stop,
            state=state,
            allowed=lambda subject: key_allowed(subject, self.subject_patterns),
            clock=self.clock,
        )

    def create_reader(self, context: SourceReaderContext) -> SourceReaderBase[SubjectSplit]:
        if self.fmt.schema is None:
            raise ConfigError("format.schema", "is needed to read (none was given or inferred)")
        split_reader = NatsSplitReader(
            self.client,
            self.decoder(),
            flow=self.flow,
            metadata=self.metadata,
            output_schema=self.schema,
            first_bad_record_only=lambda: context.bad_record_fails_split,
            send_event=context.send_source_event_to_coordinator,
            clock=self.clock,
        )
        return SourceReaderBase(context, split_reader, batch_size=self.batch_size)

    def decoder(self) -> MessageDecoder:
        return message_decoder(self.fmt, what="the message body")

    def format_position(self, position: int) -> str:
        """The stream sequence a split was read up to (0: nothing yet)."""
        return str(position)

    def split_lags(self, splits: Mapping[str, tuple[dict[str, Any], int]]) -> dict[str, int | None]:
        """Messages of each filter past its consumer's ack floor: those not delivered yet
        (``num_pending``) and those delivered but not acknowledged (``num_ack_pending``).
        The reader acknowledges what a commit covers right after it, so this is what is
        not committed (a commit whose acknowledgement failed counts until the next one
        acknowledges it); None where the consumer or the server cannot tell."""
        lags: dict[str, int | None] = {}
        js = self.client.js
        for split_id, (payload, _) in splits.items():
            try:
                info = self.client.run(
                    js.consumer_info(self.stream, consumer_name(self.flow, payload["subject"]))
                )
                lags[split_id] = (info.num_pending or 0) + (info.num_ack_pending or 0)
            except (*TRANSIENT, nats.js.errors.Error, KeyError):
                lags[split_id] = None
        return lags

    def check_input(self) -> None:
        """Refuses to start a run whose servers cannot be reached."""
        try:
            self.client.run(stream_info(self.client.js, self.stream))
        except (*TRANSIENT, nats.errors.Error, nats.js.errors.Error) as exc:
            raise ConfigError(
                self.address_field,
                f"cannot reach NATS at {mask_servers(self.servers)}: {connection_reason(exc)}",
            ) from None

    def infer_schema(self) -> pa.Schema | None:
        """The schema of up to ``SAMPLE_MESSAGES`` messages from the stream's start; None
        if it has none. Avro: the columns of ``format.writer_schema``, without sampling."""
        return message_schema(
            self.fmt,
            lambda: self.client.run(self._sample(self.client.js)),
            METADATA_FIELDS if self.metadata else None,
        )

    async def _sample(self, js: JetStreamContext) -> list[bytes]:
        info = await stream_info(js, self.stream)
        if info is None:
            return []
        subjects = self.subjects or list(info.config.subjects or [])
        bodies: list[bytes] = []
        for subject in subjects:
            sub = await js.pull_subscribe(subject, stream=self.stream, config=_sample_config())
            try:
                bodies += [m.data for m in await sub.fetch(SAMPLE_MESSAGES - len(bodies), timeout=1.0)]
            except nats.errors.TimeoutError:
                pass
            finally:
                await sub.unsubscribe()
            if len(bodies) >= SAMPLE_MESSAGES:
                break
        return bodies


def _sample_config() -> ConsumerConfig:
    return ConsumerConfig(ack_policy=AckPolicy.NONE, inactive_threshold=30.0)


def with_metadata(schema: pa.Schema) -> pa.Schema:
    """``schema`` with the metadata columns ``_subject``, ``_seq`` and ``_ts`` after its own."""
    return schema_with_metadata(schema, METADATA_FIELDS)


def output_schema(config: NatsSourceConfig, schema: pa.Schema) -> pa.Schema:
    """The schema a run of this source lands: the format's, plus the metadata columns
    when ``metadata`` is set."""
    return with_metadata(schema) if config.metadata else schema
