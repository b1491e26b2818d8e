"""The base of record formats: bytes of whole lines in, an Arrow table and the bad records out.

Parsing is done by Arrow's C++ parsers on a whole block at once. Only when that fails does
a block take the slow path, which still costs about one more parse however many records
are bad: a CSV block is read again with every column as text and each column is converted
on its own, vectorized (a record is bad where a value that was not null failed to
convert); a JSON block is checked line by line with Python's ``json`` once, and its good
lines are parsed again by Arrow.
"""

from __future__ import annotations

import copy
import re
from abc import ABC, abstractmethod
from dataclasses import replace
from typing import Any, Self

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from source_support.api import BadRecord, SchemaChange
from source_support.formats.drift import ReadError as ReadError
from source_support.formats.drift import settle
from source_support.formats.holder import SchemaHolder
from source_support.formats.typed_arrow import Offsets, as_mask, fields_of
from source_support.formats.values import ARROW_ERRORS, ZONE_SUFFIX, ValueRules, convert_text
from source_support.schema import spark_type

NEWLINE = 10
#: Arrow's default parse block; a block holding a longer record is parsed as one piece.
ARROW_BLOCK_BYTES = 1 << 20

# How a timestamp column is parsed, learned from the data: Arrow parses values without a
# zone (NAIVE) or with one (ZONED) natively; a column that mixes both is read as text and
# converted here (MIXED).
NAIVE, ZONED, MIXED = "naive", "zoned", "mixed"

#: The text encoding of files when ``format.encoding`` is left out.
DEFAULT_ENCODING = "utf-8"


class RecordFormat(SchemaHolder, ABC):
    """Parses blocks of complete lines into records of one fixed schema."""

    type_name: str = ""
    has_header: bool = False
    #: Can a line break inside a record? Then files are not cut into byte ranges.
    multiline: bool = False
    #: The field of a stream entry that holds the record (``format.field``); None for lines.
    record_field: str | None = None

    #: Whether DATE columns are read as text and converted here (JSON has no date type).
    dates_as_text: bool = False
    #: The files' text encoding (``format.encoding``); a reader hands the format UTF-8.
    encoding: str = DEFAULT_ENCODING
    #: Lines that start with these bytes are skipped (``format.comment``); None: none are.
    comment: bytes | None = None
    #: How many bytes of a file's start ``preamble_length`` needs; 0: there is no preamble.
    preamble_bytes: int = 0
    #: ``format.on_schema_change`` (see ``drift``); None: a declared schema selects its
    #: columns and nothing else is looked at.
    on_schema_change: str | None = None
    #: The schema's columns a file's header lacks (read as nulls where the policy allows).
    missing_columns: tuple[str, ...] = ()
    #: The schema changes the last ``parse`` saw (its caller says where and records them).
    drift_seen: list[SchemaChange] = []

    def __init__(self, schema: pa.Schema | None, *, rules: ValueRules | None = None) -> None:
        self.schema = schema
        self.rules = rules or ValueRules()
        #: column -> NAIVE/ZONED/MIXED, shared by the copies of this format (learned once).
        self.timestamp_modes: dict[str, str] = {}

    def with_schema(self, schema: pa.Schema) -> Self:
        clone = copy.copy(self)
        clone.schema = schema
        clone.timestamp_modes = {}
        return clone

    @abstractmethod
    def infer_schema(self, sample: bytes) -> pa.Schema:
        """The schema of a sample that begins at the start of a file."""

    @abstractmethod
    def _parse(self, block: bytes) -> pa.Table:
        """Parses a block, raising one of ``ARROW_ERRORS`` if any record in it is bad."""

    @abstractmethod
    def _locate(self, block: bytes, position: int, first_only: bool) -> tuple[pa.Table, list[BadRecord]]:
        """The slow path: the good records and the bad ones, at about one parse's cost."""

    def record_ends(self, buffer: bytes) -> Offsets:
        """Offsets just past each record-ending newline in ``buffer``."""
        data = np.frombuffer(buffer, dtype=np.uint8)
        return np.flatnonzero(data == NEWLINE) + 1

    @property
    def ends_at_every_newline(self) -> bool:
        """Whether each newline ends a record (``record_ends`` finds every newline): a
        reader then cuts blocks by counting newlines, without listing them."""
        return not self.multiline

    #: Whether ``for_file`` needs the file's head (JSON chooses its layout by it).
    chooses_by_head: bool = False

    def for_file(self, head: bytes) -> RecordFormat:
        """The format of a file that begins with ``head``."""
        return self

    def preamble_length(self, head: bytes) -> int:
        """How many bytes at a file's start come before its first record."""
        return 0

    def parse(
        self, block: bytes, position: int, *, first_only: bool = False
    ) -> tuple[pa.Table, list[BadRecord]]:
        """All good records of ``block`` (which starts at ``position``) and the bad ones.

        With ``first_only`` the search stops at the first bad record, which is then the
        only one returned (the caller fails the split on it; the good records are not
        returned then). Lines that start with ``comment`` are no records. The records are
        in the columns the run lands (``drift.settle``); the schema changes seen are left in
        ``drift_seen``.
        """
        if self.comment is not None and self.comment in block:
            return self._parse_without_comments(block, position, first_only, self.comment)
        table, bad = self._parse_block(block, position, first_only)
        starts: Offsets | None = None
        if any(n not in self.known_schema.names for n in table.column_names):
            starts = record_spans(block, self.record_ends(block))[0] + position
        table, self.drift_seen = settle(
            table,
            self.known_schema,
            self.on_schema_change,
            missing=self.missing_columns,
            row_positions=starts,
        )
        return table, bad

    def _parse_block(self, block: bytes, position: int, first_only: bool) -> tuple[pa.Table, list[BadRecord]]:
        if not block or block.isspace():  # (no stripped copy of a large block)
            return self.empty(), []
        try:
            return self._parse(block), []
        except ARROW_ERRORS:
            pass
        return self._locate(block, position, first_only)

    def _parse_without_comments(
        self, block: bytes, position: int, first_only: bool, comment: bytes
    ) -> tuple[pa.Table, list[BadRecord]]:
        """Parses the lines of ``block`` that are not comments; a bad record keeps its place
        in ``block`` (Arrow's CSV reader has no comment option)."""
        ends = self.record_ends(block)
        if not len(ends) or ends[-1] != len(block):
            ends = np.append(ends, len(block))
        starts = np.concatenate(([0], ends[:-1])).astype(np.int64)
        size = len(comment)
        kept = [i for i, start in enumerate(starts) if block[start : start + size] != comment]
        pieces = [block[starts[i] : ends[i]] for i in kept]
        kept_starts = np.cumsum([0] + [len(p) for p in pieces[:-1]]) if pieces else np.zeros(0, np.int64)
        fmt = copy.copy(self)
        fmt.comment = None  # the shared timestamp modes stay shared
        table, bad = fmt.parse(b"".join(pieces), 0, first_only=first_only)

        def in_block(at: int) -> int:
            line = int(np.searchsorted(kept_starts, at, side="right")) - 1
            return position + int(starts[kept[line]]) + at - int(kept_starts[line])

        for record in bad:
            record.position = in_block(record.position)
        self.drift_seen = [
            replace(c, position=in_block(c.position)) if c.position >= 0 else c for c in fmt.drift_seen
        ]
        return table, bad

    def _bisect_all(self, block: bytes, position: int, first_only: bool) -> tuple[pa.Table, list[BadRecord]]:
        """The fallback when the fast checks disagree with Arrow: halves the block until each
        bad record is alone (O(log n) parses per bad record)."""
        starts = np.concatenate(([0], self.record_ends(block)))
        if starts[-1] != len(block):
            starts = np.append(starts, len(block))
        good: list[pa.Table] = []
        bad: list[BadRecord] = []
        self._bisect(block, starts, 0, len(starts) - 1, position, good, bad, first_only)
        if first_only:
            return self.empty(), bad[:1]
        table = pa.concat_tables(good, promote_options="default") if good else self.empty()
        return table, bad

    def _bisect(
        self,
        block: bytes,
        starts: Offsets,
        lo: int,
        hi: int,
        position: int,
        good: list[pa.Table],
        bad: list[BadRecord],
        first_only: bool,
    ) -> None:
        # Records lo..hi-1 span block[starts[lo]:starts[hi]].
        if first_only and bad:
            return
        chunk = block[starts[lo] : starts[hi]]
        if not chunk.strip():
            return
        try:
            good.append(self._parse(chunk))
            return
        except ARROW_ERRORS as exc:
            if hi - lo == 1:
                bad.append(BadRecord(position + int(starts[lo]), raw_text(chunk), arrow_reason(exc)))
                return
        mid = (lo + hi) // 2
        self._bisect(block, starts, lo, mid, position, good, bad, first_only)
        self._bisect(block, starts, mid, hi, position, good, bad, first_only)

    def _timestamp_mode(self, name: str) -> str:
        return self.timestamp_modes.get(name, NAIVE)

    def _read_type(self, f: pa.Field[pa.DataType]) -> pa.DataType:
        """The type Arrow reads a column as (zoned timestamps as the mode learned says; a
        column with a declared pattern, and JSON's dates, as text converted by ``_finish``)."""
        if self.rules.pattern_for(f.type) is not None:
            return pa.string()
        if pa.types.is_date(f.type) and self.dates_as_text:
            return pa.string()
        if not pa.types.is_timestamp(f.type):
            return f.type
        mode = self._timestamp_mode(f.name)
        if mode == MIXED:
            return pa.string()
        if mode == ZONED:
            return pa.timestamp(f.type.unit, tz="UTC")
        return pa.timestamp(f.type.unit)

    @property
    def parse_schema(self) -> pa.Schema:
        """The schema Arrow parses with."""
        return pa.schema([pa.field(f.name, self._read_type(f)) for f in fields_of(self.known_schema)])

    def _finish(self, table: pa.Table) -> pa.Table:
        """Converts the columns read as text (dates and timestamps); raises if a value is bad."""
        schema = self.known_schema
        for i, f in enumerate(fields_of(schema)):
            temporal = pa.types.is_timestamp(f.type) or pa.types.is_date(f.type)
            if temporal and table.column(f.name).type == pa.string():
                texts = table.column(f.name).combine_chunks()
                values, failed = convert_text(texts, f.type, rules=self.rules)
                if failed.any():
                    raise pa.ArrowInvalid(f"column {f.name!r}: not a {spark_type(f.type)}")
                table = table.set_column(i, f.name, values)
        return cast_known(table, schema)

    def _learn_timestamp_modes(self, texts: dict[str, pa.Array[Any]]) -> None:
        """Remembers, per timestamp column, whether the block's values had zones, so the next
        blocks parse natively (one parse) unless a column mixes both."""
        for name, values in texts.items():
            present = pc.drop_null(values)
            if not len(present):
                continue
            zoned = int(np.count_nonzero(as_mask(pc.match_substring_regex(present, ZONE_SUFFIX))))
            mode = ZONED if zoned == len(present) else NAIVE if zoned == 0 else MIXED
            previous = self.timestamp_modes.get(name)
            self.timestamp_modes[name] = mode if previous in (None, mode) else MIXED


def cast_known(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` with the schema's columns cast to its types, the others (what did not fit
    the schema, for ``drift.settle``) kept after them as they are."""
    extras = [n for n in table.column_names if n not in schema.names]
    known = table.select(schema.names).cast(schema)
    for name in extras:
        known = known.append_column(name, table.column(name))
    return known


def record_spans(block: bytes, record_ends: Offsets) -> tuple[Offsets, Offsets]:
    """Start and end offsets of the records of ``block`` that are not blank lines (Arrow's
    readers skip those), vectorized."""
    ends = record_ends
    if not len(ends) or ends[-1] != len(block):
        ends = np.append(ends, len(block))
    starts = np.concatenate(([0], ends[:-1])).astype(np.int64)
    ends = ends.astype(np.int64)
    data = np.frombuffer(block, dtype=np.uint8)
    length = ends - starts
    first = data[np.minimum(starts, len(data) - 1)] if len(data) else np.zeros(0, dtype=np.uint8)
    second = data[np.minimum(starts + 1, len(data) - 1)] if len(data) else np.zeros(0, dtype=np.uint8)
    blank = (
        (length == 0)
        | ((length == 1) & (first == NEWLINE))
        | ((length == 2) & (first == 13) & (second == NEWLINE))
    )
    return starts[~blank], ends[~blank]


def raw_text(record: bytes) -> str:
    """A record's bytes as an error shows them."""
    return record.decode("utf-8", errors="replace").rstrip("\r\n")


def arrow_reason(exc: BaseException) -> str:
    """Arrow's error about a record, as a user can read it."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    # Arrow counts rows within the piece it was given, which means nothing to a user.
    return re.sub(r"\s*(Row #\d+:|in row \d+)", "", text.removeprefix("Invalid: ")).strip()
