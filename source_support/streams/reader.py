"""The split readers of stream sources: what they read decoded into the run's records, with
the metadata columns the run asks for after the format's own, in the run's order."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar, Generic, Protocol, TypeVar

import pyarrow as pa

from source_support.api import OffsetEntry, RecordBatch, SchemaChange, SourceSplit, SplitT
from source_support.errors import SplitFailed
from source_support.formats.drift import SchemaDrift
from source_support.reader_base import SplitReader


class RecordDecoder(Protocol):
    """What decodes a batch of messages or entries into records; each connector's decode
    takes what its system returns, so only the empty table is common."""

    def empty(self) -> pa.Table:
        """No records, in the format's columns."""
        ...

    @property
    def drift_seen(self) -> list[SchemaChange]:
        """The schema changes the last decode saw (``format.on_schema_change``), each at
        the index of its message in the batch."""
        ...


DecoderT = TypeVar("DecoderT", bound=RecordDecoder)


@dataclass(frozen=True)
class Decoding(Generic[DecoderT]):
    """How a split reader makes the run's records of what it reads: the format's
    ``decoder``; whether the connector's metadata columns are added (``metadata``); the
    run's columns in their order (``output_schema``; None: the format's, then the metadata
    columns); and whether a bad record fails its split (``first_bad_record_only``, asked
    at each batch), so that only the first bad one matters."""

    decoder: DecoderT
    metadata: bool = False
    output_schema: pa.Schema | None = None
    first_bad_record_only: Callable[[], bool] = lambda: False


class DecodingSplitReader(SplitReader[SplitT], Generic[SplitT, DecoderT]):
    """A stream source's split reader, which decodes what it reads as its ``Decoding``
    says, adding its connector's ``metadata_fields`` after the format's columns."""

    #: The metadata columns the connector adds (``source.metadata``), in their order.
    metadata_fields: ClassVar[Sequence[pa.Field[pa.DataType]]]

    def __init__(self, decoding: Decoding[DecoderT]) -> None:
        self.decoder = decoding.decoder
        self.metadata = decoding.metadata
        self.output_schema = decoding.output_schema
        self.first_bad_record_only = decoding.first_bad_record_only

    def _with_metadata(self, table: pa.Table, columns: Sequence[pa.Array[Any]]) -> pa.Table:
        """``table`` with the metadata ``columns`` (one per ``metadata_fields``, each cast
        to its field's type) after its own, in the run's order of columns."""
        for f, column in zip(self.metadata_fields, columns, strict=True):
            table = table.append_column(f, column.cast(f.type))
        if self.output_schema is not None and set(self.output_schema.names) == set(table.column_names):
            table = table.select(self.output_schema.names)
        return table

    def _drift_seen(self, positions: Sequence[int]) -> list[SchemaChange]:
        """The schema changes the last decode saw, each at its message's position
        (``positions``: those of the decoded messages, in order); the runtime says where."""
        return [replace(c, position=int(positions[c.position])) for c in self.decoder.drift_seen]

    def _drift_failed(self, drift: SchemaDrift, split: SplitT, positions: Sequence[int]) -> SplitFailed:
        """The failure of ``split`` on a schema change under ``on_schema_change = "fail"``,
        naming the column and the position of the message it was first seen at."""
        position = int(positions[max(drift.change.position, 0)])
        where = self.describe(split, position)
        change = replace(drift.change, position=position, where=where)
        return SplitFailed(f"{where}: {drift}", split_id=split.split_id, schema_changes=[change])

    def _empty(self) -> pa.Table:
        """No records, in the run's columns."""
        if self.output_schema is not None:
            return self.output_schema.empty_table()
        table = self.decoder.empty()
        if self.metadata:
            for f in self.metadata_fields:
                table = table.append_column(f, pa.array([], f.type))
        return table

    def _end_batch(self, split: SourceSplit, end: int | None = None) -> RecordBatch:
        """The last batch of ``split``: no records, and its checkpoint at ``end`` (its
        position if None; never before it)."""
        start = split.offset
        end = start.position if end is None else max(end, start.position)
        return RecordBatch(split.split_id, start, OffsetEntry(start.key, end), self._empty(), [], True)
