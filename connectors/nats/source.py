"""The nats_jetstream source: the subject filters of a JetStream stream, each a split."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
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
from source_support.api import SourceReaderContext, SplitEnumeratorContext
from source_support.connections import key_allowed, outside_words
from source_support.errors import ConfigError
from source_support.formats import AvroFormat, FormatSpec, RecordFormat
from source_support.formats.messages import MessageDecoder, message_decoder
from source_support.formats.metadata import message_schema
from source_support.registry import BuildContext
from source_support.streams.reader import Decoding
from source_support.streams.source import StreamReading, StreamSource

METADATA_NAMES = tuple(f.name for f in METADATA_FIELDS)
DEFAULT_FLOW = "adf"
#: Messages sampled to infer a schema.
SAMPLE_MESSAGES = 1000


class NatsJetStreamSource(StreamSource[SubjectSplit, RecordFormat | AvroFormat, MessageDecoder]):
    metadata_fields = METADATA_FIELDS

    def __init__(
        self,
        reading: StreamReading[RecordFormat | AvroFormat],
        *,
        servers: str,
        stream: str,
        subjects: list[str] | None,
        flow: str,
        on_reset: str = "fail",
        subject_patterns: tuple[str, ...] = (),
        address_field: str = "source.servers",
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(reading, clock=clock)
        self.servers = servers
        self.address_field = address_field
        #: The subjects its connection allows (empty: any).
        self.subject_patterns = subject_patterns
        self.stream = stream
        self.subjects = subjects
        self.flow = flow
        self.on_reset = on_reset

    @classmethod
    def check_stop(cls, config: NatsSourceConfig, stop: Mapping[str, Any]) -> None:
        """A NATS stream's position is a sequence number."""
        if stop.get("kind") == "position" and not str(stop["at"]).isdigit():
            raise ConfigError(
                "stop.at", f"{stop['at']!r}: a NATS stream's position is a sequence number (42)"
            )

    @classmethod
    def from_config(
        cls, config: NatsSourceConfig, fmt: FormatSpec, context: BuildContext
    ) -> NatsJetStreamSource:
        if fmt.type == "fields":
            raise ConfigError("format.type", "a NATS message is one record: use json, csv or raw, not fields")
        if "field" in fmt.options:
            raise ConfigError("format.field", "a NATS message's body is the record: remove it")
        cls.check_stop(config, context.stop or {})
        reading = cls.message_reading(
            config,
            fmt,
            context,
            one_record="a NATS message is one record: use json, csv, avro or raw, not fields",
        )
        servers, patterns = nats_target(config.to_dict(), context.env, "source")
        return cls(
            reading,
            servers=servers,
            subject_patterns=patterns,
            address_field="source.connection" if config.connection else "source.servers",
            stream=config.stream,
            subjects=config.subjects,
            flow=context.flow_name or DEFAULT_FLOW,
            on_reset=config.on_reset,
        )

    def split_refusal(self, split: SubjectSplit) -> str | None:
        """A subject its connection no longer allows is not read."""
        if key_allowed(split.subject, self.subject_patterns):
            return None
        return outside_words(split.subject, self.subject_patterns)

    @property
    def split_serializer(self) -> SubjectSplitSerializer:
        return SubjectSplitSerializer()

    @property
    def client(self) -> NatsClient:
        return shared_client(self.servers)

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

    def split_reader(
        self, context: SourceReaderContext, decoding: Decoding[MessageDecoder]
    ) -> NatsSplitReader:
        return NatsSplitReader(
            self.client,
            decoding,
            flow=self.flow,
            on_reset=self.on_reset,
            send_event=context.send_source_event_to_coordinator,
            clock=self.clock,
        )

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

    def describe_found(self, splits: Sequence[SubjectSplit]) -> list[str]:
        """The stream's messages and each subject read with its message count."""
        info = self.client.run(self.client.js.stream_info(self.stream, subjects_filter=">"))
        counts = info.state.subjects or {}
        lines = [f"stream {self.stream}: {info.state.messages} messages, {info.state.bytes} bytes"]
        for split in splits:
            matched = sum(n for subject, n in counts.items() if _subject_matches(subject, split.subject))
            lines.append(f"subject {split.subject}: {matched} messages")
        return lines

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


def _subject_matches(subject: str, pattern: str) -> bool:
    """Whether NATS ``subject`` matches the filter ``pattern`` (``*`` a token, ``>`` the rest)."""
    tokens, wanted = subject.split("."), pattern.split(".")
    for i, token in enumerate(wanted):
        if token == ">":
            return len(tokens) > i
        if i >= len(tokens) or token not in ("*", tokens[i]):
            return False
    return len(tokens) == len(wanted)
