"""The redis_streams source: a topic made of the Redis streams whose keys match a glob."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pyarrow as pa
import redis

from connectors.redis_streams.checks import consumer_groups, group_name, group_value
from connectors.redis_streams.config import RedisStreamsSourceConfig, is_pattern, redis_target
from connectors.redis_streams.connection import (
    connect,
    connection_reason,
    mask_url,
    server_major_version,
    shared_client,
)
from connectors.redis_streams.entries import (
    Entry,
    EntryDecoder,
    RecordFieldDecoder,
    XreadReply,
    entry_decoder,
    field_columns,
    field_names,
)
from connectors.redis_streams.enumerator import SCAN_COUNT, StreamEnumerator
from connectors.redis_streams.reader import METADATA_FIELDS, StreamSplitReader
from connectors.redis_streams.split import (
    StreamSplit,
    StreamSplitSerializer,
    decode_position,
    encode_id,
    position_ms,
)
from source_support.api import OffsetEntry, RecordBatch, SourceReaderContext, SplitEnumeratorContext
from source_support.connections import key_allowed, key_reserved
from source_support.connections import outside_words as _outside
from source_support.errors import ConfigError
from source_support.formats import AvroFormat, FieldsFormat, FormatSpec, RecordFormat
from source_support.formats.metadata import with_metadata
from source_support.registry import BuildContext
from source_support.streams.reader import Decoding
from source_support.streams.source import StreamReading, StreamSource
from source_support.typed_redis import execute_command, ping, scan_keys

#: Entries sampled to infer a schema, and streams looked at for them.
SAMPLE_ENTRIES = 1000
SAMPLE_STREAMS = 20
DEFAULT_GROUP = "adf"
METADATA_NAMES = tuple(f.name for f in METADATA_FIELDS)


class RedisStreamsSource(StreamSource[StreamSplit, FieldsFormat | RecordFormat | AvroFormat, EntryDecoder]):
    metadata_fields = METADATA_FIELDS

    def __init__(
        self,
        reading: StreamReading[FieldsFormat | RecordFormat | AvroFormat],
        *,
        url: str,
        streams: str,
        group: str,
        key_patterns: tuple[str, ...] = (),
        reserved_keys: tuple[str, ...] = (),
        address_field: str = "source.url",
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(reading, clock=clock)
        self.url = url
        #: The field an unreachable server is reported on (the url, or the connection).
        self.address_field = address_field
        #: The keys its connection allows (empty: any): a stream outside them is never read.
        self.key_patterns = key_patterns
        #: Keys the deployment uses on this Redis: never read, whatever the patterns say.
        self.reserved_keys = reserved_keys
        self.streams = streams
        self.group = group

    @classmethod
    def from_config(
        cls, config: RedisStreamsSourceConfig, fmt: FormatSpec, context: BuildContext
    ) -> RedisStreamsSource:
        reading = cls.reading(config, fmt, context)
        target = redis_target(config.to_dict(), context.env, "source")
        return cls(
            reading,
            url=target.url,
            key_patterns=target.key_patterns,
            reserved_keys=target.reserved_keys,
            address_field="source.connection" if config.connection else "source.url",
            streams=config.streams,
            group=context.flow_name or DEFAULT_GROUP,
        )

    def allows_key(self, key: str) -> bool:
        """Whether the stream ``key`` may be read through this source's connection now."""
        return key_allowed(key, self.key_patterns) and not key_reserved(key, self.reserved_keys)

    def split_refusal(self, split: StreamSplit) -> str | None:
        """A split of a stream its connection no longer allows (or a reserved key) is
        not read: a run resumed or restored after the connection was narrowed."""
        if self.allows_key(split.key):
            return None
        return _outside(split.key, self.key_patterns, self.reserved_keys)

    @property
    def split_serializer(self) -> StreamSplitSerializer:
        return StreamSplitSerializer()

    def restore_enumerator(
        self, context: SplitEnumeratorContext[StreamSplit], state: dict[str, Any] | None
    ) -> StreamEnumerator:
        return StreamEnumerator(
            context,
            client=shared_client(self.url),
            streams=self.streams,
            start=self.start,
            discovery_interval_ms=self.discovery_interval_ms,
            stop=self.stop,
            state=state,
            key_patterns=self.key_patterns,
            reserved_keys=self.reserved_keys,
            clock=self.clock,
        )

    def split_reader(
        self, context: SourceReaderContext, decoding: Decoding[EntryDecoder]
    ) -> StreamSplitReader:
        return StreamSplitReader(
            connect(self.url), decoding, group=self.group, send_event=context.send_source_event_to_coordinator
        )

    def format_position(self, position: int) -> str:
        """The entry id the split was read up to (``0-0``: nothing yet)."""
        return decode_position(position)

    def parse_position(self, text: str) -> int:
        """An entry id (``1700000000000-3``, or a bare millisecond time for its first entry)."""
        return encode_id(text)

    def position_time_ms(self, position: int) -> int | None:
        """An entry id is the time it was added, in ms (for auto-generated ids)."""
        return position_ms(position) or None

    def split_lags(self, splits: Mapping[str, tuple[dict[str, Any], int]]) -> dict[str, int | None]:
        """Entries past each split's committed position, from the flow's consumer group
        (Redis 7 keeps its lag; on older servers it is unknown). Never negative: a group
        whose count is of another stream (one deleted and created again, read by a
        split's new generation) is behind by nothing rather than by less than nothing."""
        client = shared_client(self.url)
        lags: dict[str, int | None] = {}
        for split_id, (payload, _) in splits.items():
            try:
                groups = consumer_groups(client, payload.get("key", split_id))
            except redis.RedisError:
                lags[split_id] = None
                continue
            mine = next((g for g in groups if group_name(g) == self.group), None)
            lag = group_value(mine, "lag") if mine else None
            lags[split_id] = max(0, int(lag)) if lag is not None else None
        return lags

    def decoder(self) -> EntryDecoder:
        return entry_decoder(self.fmt)

    def check_input(self) -> None:
        """Refuses to start a run whose Redis cannot be reached (or is older than 6, which
        cannot list streams by type)."""
        client = shared_client(self.url)
        try:
            ping(client)
            major = server_major_version(client)
        except redis.RedisError as exc:
            reason = connection_reason(exc).replace(self.url, mask_url(self.url))
            raise ConfigError(
                self.address_field, f"cannot connect to {mask_url(self.url)}: {reason}"
            ) from None
        if major < 6:
            raise ConfigError(
                self.address_field, f"{mask_url(self.url)} runs Redis {major}; streams need Redis 6 or later"
            )

    def infer_schema(self) -> pa.Schema | None:
        """The schema of up to ``SAMPLE_ENTRIES`` entries of the matching streams; None if
        none has entries. Avro: the columns of ``format.writer_schema``, without sampling."""
        if isinstance(self.fmt, AvroFormat):
            inferred = self.fmt.known_schema
        else:
            entries = self._sample()
            if not entries:
                return None
            if isinstance(self.fmt, FieldsFormat):
                names = field_names(entries)
                inferred = self.fmt.infer_schema(field_columns(entries, names))
            else:
                values = RecordFieldDecoder(self.fmt).values(entries).to_pylist()
                sample = b"\n".join(v for v in values if v and v.strip()) + b"\n"
                inferred = self.fmt.infer_schema(sample)
        return with_metadata(inferred, METADATA_FIELDS) if self.metadata else inferred

    def sample(self, *, limit: int, latest: bool, timeout_s: float) -> list[RecordBatch]:
        """Up to ``limit`` entries of the matching streams, each stream's first (or with
        ``latest`` its newest), read with XRANGE / XREVRANGE: no consumer group is made,
        read or moved."""
        client = connect(self.url, raw_ranges=True)
        decoding = Decoding(self.decoder(), metadata=self.metadata, output_schema=self.schema)
        reader = StreamSplitReader(client, decoding, group=self.group)
        batches: list[RecordBatch] = []
        try:
            left = limit
            for key in self._sample_keys(client):
                if left <= 0:
                    break
                if latest:
                    reply = execute_command(client, "XREVRANGE", key, "+", "-", "COUNT", left)
                    entries: list[Entry] = list(reversed(reply or []))
                else:
                    entries = list(execute_command(client, "XRANGE", key, "-", "+", "COUNT", left) or [])
                if not entries:
                    continue
                split = StreamSplit(_text(key), encode_id(entries[0][0]))
                records, bad = reader.records_of(split, entries)
                end = OffsetEntry(split.key, encode_id(entries[-1][0]))
                batches.append(RecordBatch(split.split_id, split.offset, end, records, bad))
                left -= len(entries)
        finally:
            client.close()
        return batches

    def describe_found(self, splits: Sequence[StreamSplit]) -> list[str]:
        """Each matching stream and its length (XLEN)."""
        client = shared_client(self.url)
        lines = [f"{len(splits)} streams matched {self.streams}"]
        for split in splits:
            length = execute_command(client, "XLEN", split.key)
            lines.append(f"{split.key}: {length} entries")
        return lines

    def _sample_keys(self, client: redis.Redis) -> list[str | bytes]:
        """The streams a sample reads: the allowed matching ones, at most SAMPLE_STREAMS."""
        keys: list[str | bytes] = []
        if is_pattern(self.streams):
            for key in scan_keys(client, match=self.streams, count=SCAN_COUNT, type_name="stream"):
                if not self.allows_key(_text(key)):
                    continue
                keys.append(key)
                if len(keys) >= SAMPLE_STREAMS:
                    break
        elif self.allows_key(self.streams):
            keys = [self.streams]
        return sorted(keys)

    def _sample(self) -> list[Entry]:
        client = shared_client(self.url)
        entries: list[Entry] = []
        for key in self._sample_keys(client):
            if len(entries) >= SAMPLE_ENTRIES:
                break
            reply: XreadReply = execute_command(
                client, "XREAD", "COUNT", SAMPLE_ENTRIES - len(entries), "STREAMS", key, "0-0"
            )
            for _, read in reply or []:
                entries.extend(read)
        return entries


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
