"""The sources of stream connectors: the run's format and columns (the connector's metadata
columns after the format's), the ``[stop]`` rules that bound a run, and a reader around the
connector's split reader."""

from __future__ import annotations

import time
from abc import abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, Protocol, TypeVar

import pyarrow as pa

from source_support.api import (
    Boundedness,
    Source,
    SourceReaderContext,
    SplitEnumerator,
    SplitEnumeratorContext,
    SplitT,
)
from source_support.errors import ConfigError
from source_support.formats import AvroFormat, FieldsFormat, FormatSpec, RecordFormat
from source_support.formats.metadata import format_for_run, with_metadata
from source_support.reader_base import SourceReaderBase, SplitReader
from source_support.registry import BuildContext
from source_support.streams.reader import DecoderT, Decoding

FormatT = TypeVar("FormatT", bound=RecordFormat | FieldsFormat | AvroFormat)


class StreamOptions(Protocol):
    """The options of a stream source's ``[source]`` table that say how a run reads:
    where its splits start, how often new ones are looked for, and whether records carry
    the connector's metadata columns. Each is optional: a config without one reads as
    ``STREAM_OPTION_DEFAULTS`` says (a system with no place to start from, no splits to
    discover or no metadata declares none of them)."""

    @property
    def start(self) -> str: ...

    @property
    def discovery_interval_ms(self) -> int: ...

    @property
    def metadata(self) -> bool: ...


#: What a stream source's config without the option reads as: ``start`` in no connector's
#: words (the connector has one place to start), discovery every 10 s, no metadata columns.
STREAM_OPTION_DEFAULTS: dict[str, Any] = {"start": "", "discovery_interval_ms": 10_000, "metadata": False}


def stream_option(config: object, name: str) -> Any:
    """The config's ``name`` (one of ``StreamOptions``), or its default if it declares none."""
    return getattr(config, name, STREAM_OPTION_DEFAULTS[name])


@dataclass(frozen=True)
class StreamReading(Generic[FormatT]):
    """How a run reads a stream source, whatever the system: its format (``fmt``) and
    columns (``schema``; None: inferred later), whether the connector's metadata columns
    are among them (``metadata``), where the first splits start (``start``, in the
    connector's words), how often new splits are looked for (``discovery_interval_ms``),
    the most records a batch holds (``batch_size``) and the ``[stop]`` rule (``stop``;
    empty: read until stopped)."""

    fmt: FormatT
    schema: pa.Schema | None
    metadata: bool
    start: str
    discovery_interval_ms: int
    batch_size: int
    stop: dict[str, Any]


class StreamSource(Source[SplitT], Generic[SplitT, FormatT, DecoderT]):
    """What the sources of stream connectors share.

    Built with a ``StreamReading``, kept as attributes of the same names: ``fmt``,
    ``schema`` (the connector's ``metadata_fields`` after the format's columns when
    ``metadata`` is set), ``start``, ``discovery_interval_ms``, ``batch_size`` and
    ``stop`` (the run is bounded when its kind is one of ``bounding_stops``); ``clock``
    is what the enumerator times its discoveries with (a test moves it).

    A connector gives the decoder of its format (``decoder``), its enumerator
    (``restore_enumerator``, also for a new run with no state) and its split reader
    (``split_reader``), which a reader drives once the format knows its columns.
    """

    #: The metadata columns the connector adds (``source.metadata``), in their order.
    metadata_fields: ClassVar[Sequence[pa.Field[pa.DataType]]]
    #: The kinds of ``[stop]`` rule that end a run: places the connector finds in every split.
    bounding_stops: ClassVar[tuple[str, ...]] = ("latest", "time", "position")
    #: A stream's reader keeps its position upstream: a preview reads ``sample`` only.
    reads_without_trace = False
    #: What a split is in the connector's words, in a test of the connection.
    split_noun: ClassVar[str] = "splits"

    def __init__(self, reading: StreamReading[FormatT], *, clock: Callable[[], float] = time.time) -> None:
        self.fmt = reading.fmt
        #: The run's schema (the format's, plus the metadata columns where asked).
        self.schema = reading.schema
        self.metadata = reading.metadata
        self.start = reading.start
        self.discovery_interval_ms = reading.discovery_interval_ms
        self.batch_size = reading.batch_size
        self.stop = reading.stop
        self.clock = clock

    @classmethod
    def reading(
        cls, config: StreamOptions | object, fmt: FormatSpec, context: BuildContext
    ) -> StreamReading[RecordFormat | FieldsFormat | AvroFormat]:
        """How a run of this source reads: its ``config``, the ``[format]`` built with
        the run's columns (``format_for_run``, with the connector's metadata columns if
        ``config.metadata`` is set) and the build's ``context``."""
        built, schema = cls._run_format(config, fmt, context)
        return _reading_of(config, built, schema, context)

    @classmethod
    def message_reading(
        cls, config: StreamOptions | object, fmt: FormatSpec, context: BuildContext, *, one_record: str
    ) -> StreamReading[RecordFormat | AvroFormat]:
        """``reading`` for a connector whose messages each hold one record: a format of
        field/value pairs is refused, naming ``format.type``, with ``one_record``."""
        built, schema = cls._run_format(config, fmt, context)
        if isinstance(built, FieldsFormat):
            raise ConfigError("format.type", one_record)
        return _reading_of(config, built, schema, context)

    @classmethod
    def _run_format(
        cls, config: StreamOptions | object, fmt: FormatSpec, context: BuildContext
    ) -> tuple[RecordFormat | FieldsFormat | AvroFormat, pa.Schema | None]:
        metadata = cls.metadata_fields if stream_option(config, "metadata") else None
        return format_for_run(fmt, context.schema, metadata, env=context.env)

    @classmethod
    def output_schema(cls, config: StreamOptions | object, schema: pa.Schema) -> pa.Schema:
        """The schema a run of this source lands for the format's ``schema``: the metadata
        columns after it when ``metadata`` is set (what the run's schema and the
        transform's columns must be)."""
        return with_metadata(schema, cls.metadata_fields) if stream_option(config, "metadata") else schema

    @property
    def boundedness(self) -> Boundedness:
        if self.stop.get("kind") in self.bounding_stops:
            return Boundedness.BOUNDED
        return Boundedness.CONTINUOUS_UNBOUNDED

    def create_enumerator(self, context: SplitEnumeratorContext[SplitT]) -> SplitEnumerator[SplitT]:
        return self.restore_enumerator(context, None)

    def describe_found(self, splits: Sequence[SplitT]) -> list[str]:
        """Each split (a partition, a subject, a shard) with where a run would start it,
        and how many records wait past that where the connector can tell."""
        serializer = self.split_serializer
        lags = self.split_lags({s.split_id: (serializer.serialize(s), s.offset.position) for s in splits})
        known = [lag for s in splits if (lag := lags.get(s.split_id)) is not None]
        total = f", {sum(known)} records to read" if splits and len(known) == len(splits) else ""
        lines = [f"{len(splits)} {self.split_noun} found{total}"]
        for split in splits:
            lag = lags.get(split.split_id)
            waiting = f", {lag} records to read" if lag is not None else ""
            lines.append(f"{split.split_id}: from {self.format_position(split.offset.position)}{waiting}")
        return lines

    @abstractmethod
    def restore_enumerator(
        self, context: SplitEnumeratorContext[SplitT], state: dict[str, Any] | None
    ) -> SplitEnumerator[SplitT]:
        """The enumerator of the run from its state (None: a new run)."""

    @abstractmethod
    def decoder(self) -> DecoderT:
        """What decodes the messages (or entries) of the run's format into records."""

    @abstractmethod
    def split_reader(self, context: SourceReaderContext, decoding: Decoding[DecoderT]) -> SplitReader[SplitT]:
        """The connector's reader of the splits one reader holds, decoding as ``decoding`` says."""

    def create_reader(self, context: SourceReaderContext) -> SourceReaderBase[SplitT]:
        if self.fmt.schema is None:
            raise ConfigError("format.schema", "is needed to read (none was given or inferred)")
        decoding = Decoding(
            self.decoder(),
            metadata=self.metadata,
            output_schema=self.schema,
            first_bad_record_only=lambda: context.bad_record_fails_split,
        )
        return SourceReaderBase(context, self.split_reader(context, decoding), batch_size=self.batch_size)


def _reading_of(
    config: StreamOptions | object, fmt: FormatT, schema: pa.Schema | None, context: BuildContext
) -> StreamReading[FormatT]:
    return StreamReading(
        fmt=fmt,
        schema=schema,
        metadata=stream_option(config, "metadata"),
        start=stream_option(config, "start"),
        discovery_interval_ms=stream_option(config, "discovery_interval_ms"),
        batch_size=context.batch_size,
        stop=dict(context.stop or {}),
    )
