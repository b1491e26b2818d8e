"""The nats_jetstream source: the subject filters of a JetStream stream, each a split."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import nats.errors
import nats.js.errors
import pyarrow as pa
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from connectors.nats.config import NatsSourceConfig, nats_target
from connectors.nats.connection import (
    REQUEST_TIMEOUT_S,
    NatsClient,
    connection_reason,
    mask_servers,
    shared_client,
)
from connectors.nats.enumerator import SubjectEnumerator
from connectors.nats.jetstream import TRANSIENT, consumer_name, delete_consumer, stream_info
from connectors.nats.reader import METADATA_FIELDS, NatsSplitReader
from connectors.nats.split import SubjectSplit, SubjectSplitSerializer
from source_support.api import OffsetEntry, RecordBatch, SourceReaderContext, SplitEnumeratorContext
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
#: Subject filters a preview reads at most.
SAMPLE_SUBJECTS = 20


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
        """The stream's messages and each subject read with its message count; a stream
        that does not exist yet is said so (a run waits for it to appear)."""
        try:
            info = self.client.run(self.client.js.stream_info(self.stream, subjects_filter=">"))
        except nats.js.errors.NotFoundError:
            return [
                f"no stream {self.stream} on {mask_servers(self.servers)} yet: a run waits for it to be made"
            ]
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

    def sample(self, *, limit: int, latest: bool, timeout_s: float) -> list[RecordBatch]:
        """Up to ``limit`` messages of the subject filters, each filter's first (or with
        ``latest`` its newest), read through an ephemeral consumer with no acks that is
        deleted after: no durable consumer of the flow is made, read or moved."""
        client = self.client
        decoding = Decoding(self.decoder(), metadata=self.metadata, output_schema=self.schema)
        reader = NatsSplitReader(client, decoding, flow=self.flow)
        deadline = time.monotonic() + timeout_s
        batches: list[RecordBatch] = []
        info = client.run(stream_info(client.js, self.stream))
        if info is None:
            raise ConfigError("source.stream", f"there is no stream {self.stream!r}")
        subjects = [
            s
            for s in self.subjects or list(info.config.subjects or [])
            if key_allowed(s, self.subject_patterns)
        ]
        left = limit
        for subject in subjects[:SAMPLE_SUBJECTS]:
            if left <= 0 or time.monotonic() >= deadline:
                break
            messages = client.run(
                _sample_messages(client.js, self.stream, subject, left, latest, deadline),
                max(0.1, deadline - time.monotonic()) + REQUEST_TIMEOUT_S,
            )
            if not messages:
                continue
            first, last = messages[0].metadata.sequence.stream, messages[-1].metadata.sequence.stream
            split = SubjectSplit(self.stream, subject, first - 1)
            records, bad = reader.records_of(split, messages)
            end = OffsetEntry(split.split_id, last)
            batches.append(RecordBatch(split.split_id, split.offset, end, records, bad))
            left -= len(messages)
        return batches

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


def _sample_config(start_seq: int | None = None) -> ConsumerConfig:
    if start_seq is None:
        return ConsumerConfig(ack_policy=AckPolicy.NONE, inactive_threshold=30.0)
    return ConsumerConfig(
        ack_policy=AckPolicy.NONE,
        inactive_threshold=30.0,
        deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
        opt_start_seq=start_seq,
    )


async def _sample_messages(
    js: JetStreamContext, stream: str, subject: str, limit: int, latest: bool, deadline: float
) -> list[Msg]:
    """Up to ``limit`` messages of ``subject`` (its first, or with ``latest`` its newest)
    through an ephemeral consumer with no acks, deleted after. For the newest, the consumer
    starts ``limit`` sequences before the stream's end, twice as far back each time the
    filter has fewer than ``limit`` messages after that (other subjects' messages between),
    and only the last ``limit`` it delivers are kept."""
    start: int | None = None
    if latest:
        info = await js.stream_info(stream)
        first_seq, last_seq = max(info.state.first_seq, 1), info.state.last_seq
        window = limit
        while True:
            start = max(first_seq, last_seq - window + 1)
            pending = await _pending_from(js, stream, subject, start)
            if pending >= limit or start <= first_seq or time.monotonic() >= deadline:
                break
            window *= 2
    sub = await js.pull_subscribe(subject, stream=stream, config=_sample_config(start))
    kept: deque[Msg] = deque(maxlen=limit)
    try:
        name = (await sub.consumer_info()).name
        try:
            pending = (await sub.consumer_info()).num_pending or 0
            wanted = pending if latest else min(pending, limit)
            fetched = 0
            while fetched < wanted and time.monotonic() < deadline:
                wait = max(0.1, min(1.0, deadline - time.monotonic()))
                try:
                    got = await sub.fetch(min(wanted - fetched, SAMPLE_MESSAGES), timeout=wait)
                except nats.errors.TimeoutError:
                    break
                kept.extend(got)
                fetched += len(got)
        finally:
            await delete_consumer(js, stream, name)
    finally:
        await sub.unsubscribe()
    return list(kept)


async def _pending_from(js: JetStreamContext, stream: str, subject: str, start: int) -> int:
    """How many messages of ``subject`` are at or after sequence ``start`` (an ephemeral
    consumer's count, the consumer deleted at once)."""
    made = await js.add_consumer(  # pyright: ignore[reportUnknownMemberType] - **params untyped
        stream,
        ConsumerConfig(
            filter_subject=subject,
            ack_policy=AckPolicy.NONE,
            inactive_threshold=30.0,
            deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
            opt_start_seq=start,
        ),
    )
    try:
        return made.num_pending or 0
    finally:
        await delete_consumer(js, stream, made.name)


def _subject_matches(subject: str, pattern: str) -> bool:
    """Whether NATS ``subject`` matches the filter ``pattern`` (``*`` a token, ``>`` the rest)."""
    tokens, wanted = subject.split("."), pattern.split(".")
    for i, token in enumerate(wanted):
        if token == ">":
            return len(tokens) > i
        if i >= len(tokens) or token not in ("*", tokens[i]):
            return False
    return len(tokens) == len(wanted)
