"""Record formats: bytes of whole lines in, an Arrow table and the bad records out.

Parsing is done by Arrow's C++ parsers on a whole block at once. Only when that fails does
a block take the slow path, which still costs about one more parse however many records
are bad: a CSV block is read again with every column as text and each column is converted
on its own, vectorized (a record is bad where a value that was not null failed to
convert); a JSON block is checked line by line with Python's ``json`` once, and its good
lines are parsed again by Arrow.

Timestamps may carry a zone (``2013-01-01T10:00:00Z``, ``+02:00``): they are read as the
instant they name, and values without a zone count as UTC, as Spark and pandas read them.

Missing values follow one rule for every type (``ValueRules``): a field is null when its text
is one of ``[format] null_values`` (default ``[""]``), quoted or not; ``NaN`` (any case, with
a sign or not) is NaN in a FLOAT or DOUBLE column, as are ``inf`` and ``Infinity``; any other
text that does not convert to its column's type is a bad record, never a null.
"""

from __future__ import annotations

import bisect
import codecs
import io
import json
import re
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv
import pyarrow.json as pa_json

from source_support.api import BadRecord
from source_support.datetime_patterns import DatetimePattern, datetime_pattern, parse_with_pattern
from source_support.errors import ConfigError
from source_support.options import Option, option_types
from source_support.schema import parse_ddl, spark_type, widen

NEWLINE = 10
#: Arrow's default parse block; a block holding a longer record is parsed as one piece.
ARROW_BLOCK_BYTES = 1 << 20
_ARROW_ERRORS = (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, UnicodeDecodeError)
#: What Arrow's parsers raise on bad input.
ARROW_ERRORS = _ARROW_ERRORS

# How a timestamp column is parsed, learned from the data: Arrow parses values without a
# zone (NAIVE) or with one (ZONED) natively; a column that mixes both is read as text and
# converted here (MIXED).
NAIVE, ZONED, MIXED = "naive", "zoned", "mixed"
_ZONE_SUFFIX = r"[T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?\s*([Zz]|[+-]\d{2}(:?\d{2})?)$"
_NUMBER_CHECKS = {
    "int": r"^[+-]?\d+$",
    "float": r"(?i)^[+-]?((\d+\.?\d*|\.\d+)(e[+-]?\d+)?|inf|infinity|nan)$",
    "decimal": r"(?i)^[+-]?(\d+\.?\d*|\.\d+)(e[+-]?\d+)?$",
    "date": r"^\d{4}-\d{2}-\d{2}$",
}


#: What ``[format] null_values`` is when left out: only an empty field is null.
DEFAULT_NULL_VALUES = ("",)
DEFAULT_ENCODING = "utf-8"


@dataclass(frozen=True)
class ValueRules:
    """How the text of a field becomes a value: which texts are null, and the patterns of
    dates and timestamps (None: ISO-8601)."""

    null_values: tuple[str, ...] = DEFAULT_NULL_VALUES
    date_format: DatetimePattern | None = None
    timestamp_format: DatetimePattern | None = None

    def pattern_for(self, arrow_type: pa.DataType) -> DatetimePattern | None:
        """The declared pattern of a DATE or TIMESTAMP column; None for ISO-8601 or another type."""
        if pa.types.is_date(arrow_type):
            return self.date_format
        if pa.types.is_timestamp(arrow_type):
            return self.timestamp_format
        return None


class ReadError(ValueError):
    """A split's data cannot be read on (a record too long, a header without a schema
    column): the split fails, whatever ``skip_errors`` says; the message says where."""


class RecordFormat(ABC):
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

    def __init__(self, schema: pa.Schema | None, *, rules: ValueRules | None = None) -> None:
        self.schema = schema
        self.rules = rules or ValueRules()
        #: column -> NAIVE/ZONED/MIXED, shared by the copies of this format (learned once).
        self.timestamp_modes: dict[str, str] = {}

    def with_schema(self, schema: pa.Schema) -> RecordFormat:
        clone = object.__new__(type(self))
        clone.__dict__.update(self.__dict__)
        clone.schema = schema
        clone.timestamp_modes = {}
        return clone

    @abstractmethod
    def infer_schema(self, sample: bytes) -> pa.Schema:
        """The schema of a sample that begins at the start of a file."""

    @abstractmethod
    def _parse(self, block: bytes) -> pa.Table:
        """Parses a block, raising one of ``_ARROW_ERRORS`` if any record in it is bad."""

    @abstractmethod
    def _locate(self, block: bytes, position: int, first_only: bool) -> tuple[pa.Table, list[BadRecord]]:
        """The slow path: the good records and the bad ones, at about one parse's cost."""

    def record_ends(self, buffer: bytes) -> np.ndarray:
        """Offsets just past each record-ending newline in ``buffer``."""
        data = np.frombuffer(buffer, dtype=np.uint8)
        return np.flatnonzero(data == NEWLINE) + 1

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
        returned then). Lines that start with ``comment`` are no records.
        """
        if self.comment is not None and self.comment in block:
            return self._parse_without_comments(block, position, first_only)
        if not block.strip():
            return self.empty(), []
        try:
            return self._parse(block), []
        except _ARROW_ERRORS:
            pass
        return self._locate(block, position, first_only)

    def _parse_without_comments(
        self, block: bytes, position: int, first_only: bool
    ) -> tuple[pa.Table, list[BadRecord]]:
        """Parses the lines of ``block`` that are not comments; a bad record keeps its place
        in ``block`` (Arrow's CSV reader has no comment option)."""
        ends = self.record_ends(block)
        if not len(ends) or ends[-1] != len(block):
            ends = np.append(ends, len(block))
        starts = np.concatenate(([0], ends[:-1])).astype(np.int64)
        size = len(self.comment)
        kept = [i for i, start in enumerate(starts) if block[start : start + size] != self.comment]
        pieces = [block[starts[i] : ends[i]] for i in kept]
        kept_starts = np.cumsum([0] + [len(p) for p in pieces[:-1]]) if pieces else np.zeros(0, np.int64)
        fmt = object.__new__(type(self))
        fmt.__dict__.update(self.__dict__)
        fmt.comment = None  # the shared timestamp modes stay shared
        table, bad = fmt.parse(b"".join(pieces), 0, first_only=first_only)
        for record in bad:
            line = int(np.searchsorted(kept_starts, record.position, side="right")) - 1
            record.position = position + int(starts[kept[line]]) + record.position - int(kept_starts[line])
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
        table = pa.concat_tables(good) if good else self.empty()
        return table, bad

    def _bisect(self, block, starts, lo, hi, position, good, bad, first_only) -> None:
        # Records lo..hi-1 span block[starts[lo]:starts[hi]].
        if first_only and bad:
            return
        chunk = block[starts[lo] : starts[hi]]
        if not chunk.strip():
            return
        try:
            good.append(self._parse(chunk))
            return
        except _ARROW_ERRORS as exc:
            if hi - lo == 1:
                bad.append(BadRecord(position + int(starts[lo]), _raw(chunk), _reason(exc)))
                return
        mid = (lo + hi) // 2
        self._bisect(block, starts, lo, mid, position, good, bad, first_only)
        self._bisect(block, starts, mid, hi, position, good, bad, first_only)

    def empty(self) -> pa.Table:
        return self.schema.empty_table()

    def _timestamp_mode(self, name: str) -> str:
        return self.timestamp_modes.get(name, NAIVE)

    def _read_type(self, f: pa.Field) -> pa.DataType:
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
        return pa.timestamp(f.type.unit, tz="UTC" if mode == ZONED else None)

    @property
    def parse_schema(self) -> pa.Schema:
        """The schema Arrow parses with."""
        return pa.schema([pa.field(f.name, self._read_type(f)) for f in self.schema])

    def _finish(self, table: pa.Table) -> pa.Table:
        """Converts the columns read as text (dates and timestamps); raises if a value is bad."""
        for i, f in enumerate(self.schema):
            temporal = pa.types.is_timestamp(f.type) or pa.types.is_date(f.type)
            if temporal and table.schema.field(f.name).type == pa.string():
                texts = table.column(f.name).combine_chunks()
                values, failed = convert_text(texts, f.type, rules=self.rules)
                if failed.any():
                    raise pa.ArrowInvalid(f"column {f.name!r}: not a {spark_type(f.type)}")
                table = table.set_column(i, f.name, values)
        return table.cast(self.schema)

    def _learn_timestamp_modes(self, texts: dict[str, pa.Array]) -> None:
        """Remembers, per timestamp column, whether the block's values had zones, so the next
        blocks parse natively (one parse) unless a column mixes both."""
        for name, values in texts.items():
            present = pc.drop_null(values)
            if not len(present):
                continue
            zoned = pc.sum(pc.match_substring_regex(present, _ZONE_SUFFIX)).as_py() or 0
            mode = ZONED if zoned == len(present) else NAIVE if zoned == 0 else MIXED
            previous = self.timestamp_modes.get(name)
            self.timestamp_modes[name] = mode if previous in (None, mode) else MIXED


def to_instants(strings: pa.Array, target: pa.DataType) -> tuple[pa.Array, np.ndarray]:
    """ISO-8601 texts as instants of ``target``'s unit (those without a zone count as UTC),
    vectorized; returns the values and a mask of the non-null texts that are not timestamps."""
    strings = pc.utf8_trim_whitespace(strings.cast(pa.string()))
    unit = target.unit
    count = len(strings)
    present = ~_mask(strings.is_null())
    zoned = _mask(pc.match_substring_regex(strings, _ZONE_SUFFIX))
    values = np.zeros(count, dtype=np.int64)
    ok = np.zeros(count, dtype=bool)
    for mask, arrow_type in (
        (present & zoned, pa.timestamp(unit, tz="UTC")),
        (present & ~zoned, pa.timestamp(unit)),
    ):
        where = np.flatnonzero(mask)
        if not len(where):
            continue
        converted, good = _cast_each_failing(strings.take(pa.array(where)), arrow_type)
        values[where[good]] = pc.fill_null(converted.cast(pa.int64()), 0).to_numpy()[good]
        ok[where[good]] = True
    out = pa.array(values, type=pa.int64(), mask=~ok).cast(pa.timestamp(unit, tz=target.tz))
    return out, present & ~ok


def _mask(values: pa.Array) -> np.ndarray:
    """A boolean Arrow array as a numpy mask, null as False."""
    return np.asarray(pc.fill_null(values, False).to_numpy(zero_copy_only=False), dtype=bool)


def _cast_each_failing(strings: pa.Array, arrow_type: pa.DataType) -> tuple[pa.Array, np.ndarray]:
    """Casts ``strings`` (no nulls); where the whole cast fails, halves until the failing
    values are alone. Returns the values (zero where failed) and the mask of those that cast."""
    try:
        return strings.cast(arrow_type), np.ones(len(strings), dtype=bool)
    except _ARROW_ERRORS:
        if len(strings) == 1:
            return pa.nulls(1, arrow_type), np.zeros(1, dtype=bool)
    mid = len(strings) // 2
    left, left_ok = _cast_each_failing(strings.slice(0, mid), arrow_type)
    right, right_ok = _cast_each_failing(strings.slice(mid), arrow_type)
    return pa.concat_arrays([left, right]), np.concatenate([left_ok, right_ok])


def convert_text(
    strings: pa.Array, arrow_type: pa.DataType, *, rules: ValueRules
) -> tuple[pa.Array, np.ndarray]:
    """Texts of one column as ``arrow_type``, vectorized, as Arrow's CSV reader converts
    them; returns the values and a mask of the values that are not nulls and did not convert.
    A text in ``rules.null_values`` is null whatever the type, STRING included.

    Each value is checked by a pattern first, so a column of bad values costs one pass;
    values that pass the pattern but not Arrow's own parser are found by halving casts.
    """
    count = len(strings)
    not_utf8 = np.zeros(count, dtype=bool)
    if pa.types.is_binary(strings.type):
        strings, decoded = _cast_each_failing(strings, pa.string())
        not_utf8 = ~decoded
    strings = strings.cast(pa.string())
    nulls = _mask(pc.is_in(strings, pa.array(sorted(rules.null_values), pa.string())))
    if nulls.any():
        strings = pc.if_else(pa.array(nulls), pa.scalar(None, pa.string()), strings)
    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
        return strings.cast(arrow_type), not_utf8
    pattern = rules.pattern_for(arrow_type)
    if pattern is not None:
        values, failed = parse_with_pattern(strings, pattern, arrow_type)
    else:
        values, failed = _convert_utf8(strings, arrow_type)
    return values, failed | not_utf8


def _convert_utf8(strings: pa.Array, arrow_type: pa.DataType) -> tuple[pa.Array, np.ndarray]:
    """Texts (nulls where the value is null) as ``arrow_type`` by Arrow's own casts."""
    count = len(strings)
    nulls = _mask(strings.is_null())
    texts = pc.utf8_trim_whitespace(strings)
    if pa.types.is_timestamp(arrow_type):
        values, failed = to_instants(
            pc.if_else(pa.array(nulls), pa.scalar(None, pa.string()), texts), arrow_type
        )
        return values, failed
    if pa.types.is_boolean(arrow_type):
        true = _mask(pc.is_in(texts, pa.array(["1", "True", "TRUE", "true"])))
        false = _mask(pc.is_in(texts, pa.array(["0", "False", "FALSE", "false"])))
        return pa.array(true, mask=nulls | ~(true | false)), ~nulls & ~(true | false)
    check = (
        "int"
        if pa.types.is_integer(arrow_type)
        else "float"
        if pa.types.is_floating(arrow_type)
        else "decimal"
        if pa.types.is_decimal(arrow_type)
        else "date"
        if pa.types.is_date(arrow_type)
        else None
    )
    candidates = ~nulls
    if check is not None:
        candidates &= _mask(pc.match_substring_regex(texts, _NUMBER_CHECKS[check]))
    where = np.flatnonzero(candidates)
    converted, good = _cast_each_failing(texts.take(pa.array(where, pa.int64())), arrow_type)
    ok = np.zeros(count, dtype=bool)
    ok[where[good]] = True
    positions = np.full(count, len(where), dtype=np.int64)  # a null slot past the end
    positions[where[good]] = np.flatnonzero(good)
    padded = pa.concat_arrays([converted, pa.nulls(1, arrow_type)])
    return padded.take(pa.array(positions)), ~nulls & ~ok


class CsvFormat(RecordFormat):
    type_name = "csv"

    def __init__(
        self,
        *,
        schema: pa.Schema | None = None,
        header: bool = True,
        delimiter: str = ",",
        quote: str = '"',
        multiline: bool = False,
        column_names: list[str] | None = None,
        rules: ValueRules | None = None,
    ) -> None:
        super().__init__(schema, rules=rules)
        self.has_header = header
        self.delimiter = delimiter
        self.quote = quote
        self.multiline = multiline
        #: The columns of the file in its order (its header, mapped to the schema's names);
        #: None reads the schema's columns by position.
        self.column_names = column_names

    def _parse_options(self, invalid_row_handler=None) -> pa_csv.ParseOptions:
        return pa_csv.ParseOptions(
            delimiter=self.delimiter,
            quote_char=self.quote or False,
            newlines_in_values=self.multiline,
            invalid_row_handler=invalid_row_handler,
        )

    def _read_options(self, block: bytes, **options: Any) -> pa_csv.ReadOptions:
        block_size = max(ARROW_BLOCK_BYTES, len(block) + 1)  # a record never straddles two
        return pa_csv.ReadOptions(use_threads=False, block_size=block_size, **options)

    def header_names(self, header_line: bytes) -> list[str]:
        """The column names of a header line, as the CSV options read it."""
        line = header_line.rstrip(b"\r\n") + b"\n"
        table = pa_csv.read_csv(
            io.BytesIO(line),
            read_options=self._read_options(line),
            parse_options=self._parse_options(),
        )
        return table.column_names

    def bind_header(self, header_line: bytes) -> CsvFormat:
        """A copy that finds each schema column by its name in a file's header line (names
        match without regard to case, as in Spark). Raises ``MissingColumns`` when the
        header lacks some of the schema's columns."""
        names = self.header_names(header_line)
        wanted = {n.lower(): n for n in self.schema.names}
        mapped = [wanted.get(n.lower(), n) for n in names]
        found = [n for n in mapped if n in self.schema.names]
        missing = [n for n in self.schema.names if n not in found]
        repeated = sorted({n for n in found if found.count(n) > 1})
        if missing or repeated:
            raise MissingColumns(missing, repeated, names)
        clone = object.__new__(type(self))
        clone.__dict__.update(self.__dict__)
        clone.column_names = mapped
        return clone

    def infer_schema(self, sample: bytes) -> pa.Schema:
        cut = self.record_ends(sample)
        if len(cut):
            sample = sample[: cut[-1]]
        read = self._read_options(sample, autogenerate_column_names=not self.has_header)
        convert = pa_csv.ConvertOptions(
            null_values=list(self.rules.null_values),
            strings_can_be_null=True,
            quoted_strings_can_be_null=True,
        )
        table = pa_csv.read_csv(
            io.BytesIO(sample),
            read_options=read,
            parse_options=self._parse_options(),
            convert_options=convert,
        )
        names = table.column_names
        if not self.has_header:
            names = [f"_c{i}" for i in range(len(names))]
        fields = [
            pa.field(name, _inferred_text_type(column, self.rules))
            for name, column in zip(names, table.columns, strict=True)
        ]
        return widen(pa.schema(fields))

    def _names(self) -> list[str]:
        return self.column_names or self.schema.names

    def _parse(self, block: bytes) -> pa.Table:
        bad_shape: list[str] = []

        def on_invalid_row(row) -> str:
            bad_shape.append(row.text)
            return "skip"

        table = pa_csv.read_csv(
            io.BytesIO(block),
            read_options=self._read_options(block, column_names=self._names()),
            parse_options=self._parse_options(on_invalid_row),
            convert_options=pa_csv.ConvertOptions(
                column_types=self.parse_schema,
                include_columns=self.schema.names,
                null_values=list(self.rules.null_values),
                strings_can_be_null=True,  # one rule for every type (ValueRules)
                quoted_strings_can_be_null=True,
            ),
        )
        if bad_shape:
            raise pa.ArrowInvalid(f"a row does not have {len(self._names())} columns: {bad_shape[0]!r}")
        return self._finish(table)

    def _locate(self, block: bytes, position: int, first_only: bool) -> tuple[pa.Table, list[BadRecord]]:
        names = self._names()
        bad_shape: list[tuple[int, int]] = []

        def on_invalid_row(row) -> str:
            bad_shape.append((row.number, row.actual_columns))
            return "skip"

        try:
            text = pa_csv.read_csv(
                io.BytesIO(block),
                read_options=self._read_options(block, column_names=names),
                parse_options=self._parse_options(on_invalid_row),
                convert_options=pa_csv.ConvertOptions(
                    column_types={n: pa.binary() for n in self.schema.names},  # bad UTF-8 too
                    include_columns=self.schema.names,
                    strings_can_be_null=False,
                    quoted_strings_can_be_null=False,
                ),
            )
        except _ARROW_ERRORS:
            return self._bisect_all(block, position, first_only)
        starts, ends = _record_spans(block, self.record_ends(block))
        if len(starts) != text.num_rows + len(bad_shape) or any(n is None for n, _ in bad_shape):
            return self._bisect_all(block, position, first_only)  # Arrow counted rows otherwise
        shape_rows = np.array([n - 1 for n, _ in bad_shape], dtype=np.int64)
        row_record = np.delete(np.arange(len(starts)), shape_rows)
        # The first failing column of each parsed row, in the file's column order.
        first_column = np.full(text.num_rows, -1, dtype=np.int64)
        values: dict[str, pa.Array] = {}
        for index, name in sorted((names.index(n), n) for n in self.schema.names):
            texts = text.column(name).combine_chunks()
            values[name], failed = convert_text(texts, self.schema.field(name).type, rules=self.rules)
            first_column[failed & (first_column < 0)] = index
            if pa.types.is_timestamp(self.schema.field(name).type):
                self._learn_timestamp_modes({name: pc.drop_null(texts.filter(pa.array(~failed)))})
        failed_rows = np.flatnonzero(first_column >= 0)
        # record index -> (why), for bad shapes and failed conversions
        bad_at = {int(r): ("shape", actual) for r, (_, actual) in zip(shape_rows, bad_shape, strict=True)}
        bad_at.update({int(row_record[r]): ("value", int(r)) for r in failed_rows})
        chosen = sorted(bad_at)[:1] if first_only else sorted(bad_at)
        failing = [bad_at[r][1] for r in chosen if bad_at[r][0] == "value"]
        texts_of = {
            n: dict(zip(failing, text.column(n).take(pa.array(failing, pa.int64())).to_pylist(), strict=True))
            for n in {names[int(first_column[r])] for r in failing}
        }
        bad = []
        for record in chosen:
            kind, detail = bad_at[record]
            raw = _raw(block[starts[record] : ends[record]])
            if kind == "shape":
                reason = f"expected {len(names)} columns, found {detail}"
            else:
                column = int(first_column[detail])
                name = names[column]
                value = texts_of[name][detail]
                try:
                    shown = repr(value.decode("utf-8"))
                except UnicodeDecodeError:
                    shown = f"{value.decode('utf-8', errors='replace')!r} (not UTF-8)"
                reason = (
                    f"column {column + 1} {name!r}: invalid value {shown} "
                    f"for {spark_type(self.schema.field(name).type)}"
                )
            bad.append(BadRecord(position + int(starts[record]), raw, reason))
        if first_only and bad:
            return self.empty(), bad
        keep = pa.array(first_column < 0)
        table = pa.table({n: values[n].filter(keep) for n in self.schema.names})
        return table.cast(self.schema), bad

    def record_ends(self, buffer: bytes) -> np.ndarray:
        ends = super().record_ends(buffer)
        if not self.multiline or not self.quote:
            return ends
        # A newline ends a record only outside quotes: after an even number of quote chars.
        data = np.frombuffer(buffer, dtype=np.uint8)
        quotes_before = np.cumsum(data == ord(self.quote))
        return ends[quotes_before[ends - 1] % 2 == 0]


class MissingColumns(ReadError):
    """A file's header lacks columns of the schema (or names one twice)."""

    def __init__(self, missing: list[str], repeated: list[str], header: list[str]) -> None:
        parts = []
        if missing:
            parts.append(f"its header lacks the column{'s' * (len(missing) > 1)} {', '.join(missing)}")
        if repeated:
            parts.append(f"its header names {', '.join(repeated)} more than once")
        super().__init__(f"{' and '.join(parts)} (header: {', '.join(header)})")
        self.missing = missing


class JsonLinesFormat(RecordFormat):
    """One JSON object per line. A string in a column that is not STRING is null when it is
    one of ``null_values`` (JSON's own null is null too); a STRING column keeps its strings,
    since JSON can say null. DATE columns read ISO-8601 dates (or ``date_format``)."""

    type_name = "jsonl"
    dates_as_text = True
    chooses_by_head = True

    def for_file(self, head: bytes) -> RecordFormat:
        layout = json_layout(head)
        if layout == "lines":
            return self
        fmt = JsonDocumentsFormat(self.schema, rules=self.rules, array=layout == "array")
        fmt.__dict__.update({k: v for k, v in self.__dict__.items() if k != "array"})
        return fmt

    def infer_schema(self, sample: bytes) -> pa.Schema:
        cut = self.record_ends(sample)
        if len(cut):
            sample = sample[: cut[-1]]
        try:
            table = pa_json.read_json(
                io.BytesIO(sample),
                read_options=pa_json.ReadOptions(
                    use_threads=False, block_size=max(ARROW_BLOCK_BYTES, len(sample) + 1)
                ),
            )
        except _ARROW_ERRORS as exc:
            raise ValueError(_json_sample_error(sample, exc)) from None
        fields = [
            pa.field(f.name, _inferred_text_type(table.column(f.name), self.rules)) for f in table.schema
        ]
        return widen(pa.schema(fields))

    def _parse(self, block: bytes) -> pa.Table:
        if _has_map(self.schema):
            return self._parse_python(block)
        table = pa_json.read_json(
            io.BytesIO(block),
            read_options=pa_json.ReadOptions(
                use_threads=False, block_size=max(ARROW_BLOCK_BYTES, len(block) + 1)
            ),
            parse_options=pa_json.ParseOptions(
                explicit_schema=self.parse_schema, unexpected_field_behavior="ignore"
            ),
        )
        return self._finish(table.select(self.schema.names))

    def _parse_python(self, block: bytes) -> pa.Table:
        """Arrow's JSON reader has no MAP type: a schema with one is read with ``json``."""
        try:
            rows = [json.loads(line) for line in block.splitlines() if line.strip()]
        except (ValueError, RecursionError) as exc:
            raise pa.ArrowInvalid(f"not valid JSON: {exc}") from None
        for row in rows:
            if not isinstance(row, dict):
                raise pa.ArrowInvalid("a JSON line is not an object")
        return self._finish(pa.Table.from_pylist(rows, schema=self.parse_schema))

    def _locate(self, block: bytes, position: int, first_only: bool) -> tuple[pa.Table, list[BadRecord]]:
        starts, ends = _record_spans(block, self.record_ends(block))
        temporal = [f for f in self.schema if pa.types.is_timestamp(f.type) or pa.types.is_date(f.type)]
        null_values = frozenset(self.rules.null_values)
        good: list[int] = []
        #: good records some of whose strings became nulls: the record as it is read then
        rewritten: dict[int, dict[str, Any]] = {}
        stamps: dict[str, list[Any]] = {f.name: [] for f in temporal}
        bad: dict[int, str] = {}
        for record, (start, end) in enumerate(zip(starts, ends, strict=True)):
            line = block[start:end]
            if not line.strip():
                continue  # Arrow's reader skips lines of white space
            try:
                value = json.loads(line)
            except ValueError as exc:
                reason = f"not valid JSON: {exc}"
            except RecursionError:
                reason = "JSON nested too deeply to read (Python's parser has a depth limit)"
            else:
                nulled = _null_texts(value, self.schema, null_values)
                if nulled is not value:
                    rewritten[record] = value = nulled
                reason = _check_record(value, self.schema)
            if reason is not None:
                bad[record] = reason
                if first_only:
                    break
                continue
            good.append(record)
            for f in temporal:
                stamps[f.name].append(value.get(f.name))
        if not (first_only and bad):
            keep = np.ones(len(good), dtype=bool)
            for f in temporal:
                texts = pa.array(stamps[f.name], pa.string())
                _, failed = convert_text(texts, f.type, rules=self.rules)
                for i in np.flatnonzero(failed & keep):
                    bad[good[i]] = (
                        f"field {f.name!r}: invalid value {stamps[f.name][i]!r} for {spark_type(f.type)}"
                    )
                keep &= ~failed
                if pa.types.is_timestamp(f.type):
                    self._learn_timestamp_modes({f.name: pc.drop_null(texts.filter(pa.array(~failed)))})
            good = [g for g, k in zip(good, keep, strict=True) if k]
        records = sorted(bad)[:1] if first_only else sorted(bad)
        found = [
            BadRecord(position + int(starts[r]), _raw(block[starts[r] : ends[r]]), bad[r]) for r in records
        ]
        if first_only and found:
            return self.empty(), found
        if not good:
            return self.empty(), found
        lines = b"".join(
            json.dumps(rewritten[r]).encode() + b"\n"
            if r in rewritten
            else block[starts[r] : ends[r]].rstrip(b"\r\n") + b"\n"
            for r in good
        )
        try:
            return self._parse(lines), found
        except _ARROW_ERRORS:
            return self._bisect_all(block, position, first_only)  # the checks missed a case


#: How much of a file's start decides whether it holds JSON lines or JSON documents.
JSON_LAYOUT_SAMPLE = 1 << 20
_JSON_SPACE = " \t\r\n"
_DECODER = json.JSONDecoder()
_JSON_SPACES = re.compile(r"[ \t\r\n]*")


def json_layout(head: bytes) -> str:
    """How a JSON file that begins with ``head`` holds its records, by its first character
    that is not white space (as ``pandas.read_json`` and Spark's ``multiLine`` choose):
    ``array`` for ``[`` (an array of objects); ``lines`` for a first line that is a whole
    JSON value (JSON lines); else ``documents`` (JSON values that span lines, one or more)."""
    text = head.lstrip(_JSON_SPACE.encode() + b"\xef\xbb\xbf")
    if text.startswith(b"["):
        return "array"
    first, newline, _ = text.partition(b"\n")
    if not newline and len(head) < JSON_LAYOUT_SAMPLE:
        return "lines"  # one line, the whole file: a JSON line
    try:
        json.loads(first)
    except (ValueError, RecursionError):
        return "documents" if text.startswith(b"{") else "lines"
    return "lines"


class JsonDocumentsFormat(JsonLinesFormat):
    """JSON values that may span lines: the objects of a top-level array (``array``), or
    objects one after another (``documents``; one object per file is the common case).

    A file is one split (its records cannot be found from the middle), read block by block
    like JSON lines: memory is bounded by a block, and a record by ``MAX_RECORD_BYTES``.
    Each record keeps its place in the file: it is handed to the JSON lines parser as one
    line of the same length (JSON's newlines outside strings become spaces, the commas and
    brackets between records spaces too), so positions and lines in errors are the file's.
    A text that is not JSON ends what can be read of the file: the rest is one bad record.
    """

    multiline = True
    preamble_bytes = JSON_LAYOUT_SAMPLE

    def __init__(
        self, schema: pa.Schema | None, *, rules: ValueRules | None = None, array: bool = False
    ) -> None:
        super().__init__(schema, rules=rules)
        self.array = array
        #: The last buffer scanned and its spans (``value_spans``).
        self._scanned: tuple[bytes, list[int], list[int]] | None = None

    def preamble_length(self, head: bytes) -> int:
        """An array's records begin after its ``[`` (and white space, and a UTF-8 BOM)."""
        if not self.array:
            return 0
        return head.index(b"[") + 1

    def value_spans(self, buffer: bytes) -> tuple[list[int], list[int]]:
        """The ends of the JSON values that start ``buffer``'s records and the ends of those
        records (after the comma, or the array's ``]``, and white space), in bytes; a value
        not yet whole (or not JSON) ends the list.

        The reader asks about a buffer that grows, then about blocks cut from its start:
        the last answer is kept, so each record is scanned about once."""
        value_ends: list[int] = []
        record_ends: list[int] = []
        offset = 0
        scanned = self._scanned
        if scanned is not None:
            old, old_values, old_records = scanned
            if len(buffer) <= len(old) and old.startswith(buffer):
                count = bisect.bisect_right(old_records, len(buffer))
                return old_values[:count], old_records[:count]
            cut = len(old) - len(buffer)
            if 0 < cut < len(old) and cut in old_records and memoryview(old)[cut:] == buffer:
                # what is left once a block was cut off: the same records, shifted
                first = bisect.bisect_right(old_records, cut)
                value_ends = [v - cut for v in old_values[first:]]
                record_ends = [r - cut for r in old_records[first:]]
                old, old_values, old_records = buffer, value_ends, record_ends
            if old_records and len(buffer) >= len(old) and buffer.startswith(old):
                value_ends, record_ends, offset = list(old_values), list(old_records), old_records[-1]
        self._scan(buffer, offset, value_ends, record_ends)
        self._scanned = (buffer, value_ends, record_ends)
        return value_ends, record_ends

    def _scan(self, buffer: bytes, offset: int, value_ends: list[int], record_ends: list[int]) -> None:
        text = buffer[offset:].decode("utf-8", errors="surrogateescape")
        ascii_only = len(text) == len(buffer) - offset
        at, byte_at, char_at = 0, offset, 0
        size = len(text)
        while True:
            at = _JSON_SPACES.match(text, at).end()
            if at >= size or (self.array and text[at] == "]"):
                break
            try:
                _, value_end = _DECODER.raw_decode(text, at)
            except (ValueError, RecursionError):
                break  # not whole yet, or not JSON: the reader takes the rest as one record
            end = _JSON_SPACES.match(text, value_end).end()
            if end >= size:
                break  # not known yet where the next record starts (the reader's last one)
            if self.array and text[end] == "]":
                end = size  # the rest is the array's end
            elif self.array and text[end] == ",":
                end = _JSON_SPACES.match(text, end + 1).end()  # the next record starts at its value
            elif self.array:
                break  # not JSON: the rest is one bad record
            if ascii_only:
                value_ends.append(offset + value_end)
                record_ends.append(offset + end)
            else:
                value_byte = byte_at + len(text[char_at:value_end].encode("utf-8", "surrogateescape"))
                byte_at = value_byte + len(text[value_end:end].encode("utf-8", "surrogateescape"))
                char_at = end
                value_ends.append(value_byte)
                record_ends.append(byte_at)
            at = end

    def record_ends(self, buffer: bytes) -> np.ndarray:
        return np.array(self.value_spans(buffer)[1], dtype=np.int64)

    def as_lines(self, block: bytes) -> bytes:
        """``block`` as JSON lines of the same length: one line per record."""
        value_ends, record_ends = self.value_spans(block)
        pieces, start = [], 0
        for value_end, end in zip(value_ends, record_ends, strict=True):
            value = block[start:value_end].replace(b"\n", b" ").replace(b"\r", b" ")
            pieces.append(value + b" " * (end - value_end - 1) + b"\n")
            start = end
        if start < len(block):  # the last record, or what is not JSON
            rest = block[start:]
            tail = rest.rstrip(_JSON_SPACE.encode())
            if self.array and tail.endswith(b"]"):
                tail = tail[:-1]
            pieces.append(tail.replace(b"\n", b" ").replace(b"\r", b" ") + b"\n")
        return b"".join(pieces)

    def infer_schema(self, sample: bytes) -> pa.Schema:
        body = sample[self.preamble_length(sample) :]
        ends = self.record_ends(body)
        if not len(ends):
            raise ValueError("the first record is not whole in the first MiB, or is not JSON")
        return super().infer_schema(self.as_lines(body[: int(ends[-1])]))

    def parse(
        self, block: bytes, position: int, *, first_only: bool = False
    ) -> tuple[pa.Table, list[BadRecord]]:
        # The same format reading lines (its timestamp modes shared: learned once).
        lines = object.__new__(JsonLinesFormat)
        lines.__dict__.update(self.__dict__)
        return lines.parse(self.as_lines(block), position, first_only=first_only)


def _record_spans(block: bytes, record_ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
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


def _inferred_text_type(column: pa.ChunkedArray, rules: ValueRules) -> pa.DataType:
    """The type of a column Arrow inferred, where a text column may be more: DATE or
    TIMESTAMP when every value parses by the declared ``date_format`` or
    ``timestamp_format``, else TIMESTAMP when every value is ISO-8601 (zones may mix)."""
    if not pa.types.is_string(column.type):
        return column.type
    present = pc.drop_null(column.combine_chunks())
    present = present.filter(pc.invert(pc.is_in(present, pa.array(rules.null_values, pa.string()))))
    if not len(present):
        return column.type
    for pattern, candidate in (
        (rules.date_format, pa.date32()),
        (rules.timestamp_format, pa.timestamp("us", tz="UTC")),
    ):
        if pattern is not None and not parse_with_pattern(present, pattern, candidate)[1].any():
            return candidate
    if rules.timestamp_format is None and _all_timestamps(column):
        return pa.timestamp("us", tz="UTC")
    return column.type


def _null_texts(value: Any, schema: pa.Schema, null_values: frozenset[str]) -> Any:
    """A JSON record whose top-level strings in columns other than STRING that are one of
    ``null_values`` are null; ``value`` itself when there is none (or it is not an object)."""
    if not isinstance(value, dict):
        return value
    nulled = None
    for f in schema:
        text = value.get(f.name)
        if isinstance(text, str) and text in null_values and not pa.types.is_string(f.type):
            nulled = nulled or dict(value)
            nulled[f.name] = None
    return value if nulled is None else nulled


def _all_timestamps(column: pa.ChunkedArray) -> bool:
    """Whether every value of a text column is an ISO-8601 timestamp (zones may be mixed)."""
    present = pc.drop_null(column.combine_chunks())
    if (
        not len(present)
        or not pc.all(pc.match_substring_regex(present, r"^\s*\d{4}-\d{2}-\d{2}[T ]\d")).as_py()
    ):
        return False
    _, failed = to_instants(present, pa.timestamp("us", tz="UTC"))
    return not failed.any()


def _has_map(schema_or_type: pa.Schema | pa.DataType) -> bool:
    if isinstance(schema_or_type, pa.Schema):
        return any(_has_map(f.type) for f in schema_or_type)
    t = schema_or_type
    if pa.types.is_map(t):
        return True
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return _has_map(t.value_type)
    if pa.types.is_struct(t):
        return any(_has_map(t.field(i).type) for i in range(t.num_fields))
    return False


def _is_nested(t: pa.DataType) -> bool:
    return pa.types.is_nested(t)


_INT_RANGES = {8: (-(2**7), 2**7 - 1), 16: (-(2**15), 2**15 - 1), 32: (-(2**31), 2**31 - 1)}
_INT_RANGES[64] = (-(2**63), 2**63 - 1)


def _check_record(value: Any, schema: pa.Schema) -> str | None:
    """Why a decoded JSON line does not fit ``schema`` as Arrow's JSON reader reads it, or
    None if it fits (fields it does not know are ignored, missing ones are null)."""
    if not isinstance(value, dict):
        return f"a line must hold a JSON object, not {_json_kind(value)}"
    for f in schema:
        reason = _check_value(value.get(f.name), f.type, f.name)
        if reason is not None:
            return reason
    return None


def _check_value(value: Any, t: pa.DataType, path: str) -> str | None:
    if value is None:
        return None
    fits = True
    if pa.types.is_integer(t):
        low, high = _INT_RANGES[t.bit_width]
        fits = isinstance(value, int) and not isinstance(value, bool) and low <= value <= high
    elif pa.types.is_floating(t):
        fits = isinstance(value, int | float) and not isinstance(value, bool)
    elif pa.types.is_decimal(t):
        fits = isinstance(value, int | float | str) and not isinstance(value, bool)
    elif pa.types.is_boolean(t):
        fits = isinstance(value, bool)
    elif pa.types.is_string(t) or pa.types.is_timestamp(t) or pa.types.is_date(t):
        fits = isinstance(value, str)
    elif pa.types.is_map(t):
        if not isinstance(value, dict):
            fits = False
        else:
            for key, item in value.items():
                reason = _check_value(item, t.item_type, f"{path}[{key!r}]")
                if reason is not None:
                    return reason
    elif pa.types.is_list(t) or pa.types.is_large_list(t):
        if not isinstance(value, list):
            fits = False
        else:
            for i, item in enumerate(value):
                reason = _check_value(item, t.value_type, f"{path}[{i}]")
                if reason is not None:
                    return reason
    elif pa.types.is_struct(t):
        if not isinstance(value, dict):
            fits = False
        else:
            for i in range(t.num_fields):
                child = t.field(i)
                reason = _check_value(value.get(child.name), child.type, f"{path}.{child.name}")
                if reason is not None:
                    return reason
    if fits:
        return None
    return f"field {path!r}: expected {spark_type(t)}, found {_json_kind(value)} {_short(value)}"


def _json_kind(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return "null"


def _short(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _json_sample_error(sample: bytes, exc: BaseException) -> str:
    """Arrow's error about a JSON sample, with the line it is about (Arrow counts rows from
    0 and skips blank lines; a line that is not JSON at all is found first)."""
    lines = sample.splitlines()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            json.loads(line)
        except (ValueError, RecursionError) as error:
            return f"line {number} is not valid JSON ({error}): {_raw(line)[:200]!r}"
    match = re.search(r"\bin row (\d+)", str(exc))
    reason = _reason(exc)
    if match:
        row = int(match.group(1))
        numbers = [n for n, line in enumerate(lines, start=1) if line.strip()]
        if row < len(numbers):
            return f"line {numbers[row]}: {reason}"
    return reason


class FieldsFormat:
    """Records that are maps of field name to text (the field/value pairs of a stream
    entry), each value converted to its schema column's type, vectorized; a field that is
    absent is null, and so is a value in ``null_values`` (an empty one by default), whatever
    its type. A TIMESTAMP value is ISO-8601 text (or ``timestamp_format``) or milliseconds
    since the epoch."""

    type_name = "fields"
    record_field: str | None = None

    def __init__(self, schema: pa.Schema | None, *, rules: ValueRules | None = None) -> None:
        self.schema = schema
        self.rules = rules or ValueRules()

    def with_schema(self, schema: pa.Schema) -> FieldsFormat:
        return FieldsFormat(schema, rules=self.rules)

    def empty(self) -> pa.Table:
        return self.schema.empty_table()

    def convert(self, texts: dict[str, pa.Array], count: int) -> tuple[pa.Table, dict[int, str]]:
        """The ``count`` records whose values are ``texts`` (column -> binary or string
        values, null where absent; a column not given is all null), and why each bad
        record (by index) is bad. Bad records stay in the table, with nulls where their
        values failed: the caller drops them."""
        columns, reasons = [], {}
        for f in self.schema:
            values = texts.get(f.name)
            if values is None:
                columns.append(pa.nulls(count, f.type))
                continue
            converted, failed = _convert_field(values, f.type, self.rules)
            columns.append(converted)
            for row in np.flatnonzero(failed):
                reasons.setdefault(int(row), _field_reason(f, values[int(row)].as_py()))
        return pa.Table.from_arrays(columns, schema=self.schema), reasons

    def infer_schema(self, texts: dict[str, pa.Array]) -> pa.Schema:
        """A schema for sampled values (column -> texts, in the order fields were first
        seen): each column the narrowest of BIGINT, DOUBLE, BOOLEAN, TIMESTAMP that all its
        values convert to, else STRING."""
        return pa.schema(
            [pa.field(name, _infer_field_type(values, self.rules)) for name, values in texts.items()]
        )


_INFERRED_ORDER = (pa.int64(), pa.float64(), pa.bool_(), pa.timestamp("us", tz="UTC"))


def _infer_field_type(values: pa.Array, rules: ValueRules) -> pa.DataType:
    present = pc.drop_null(values)
    if pa.types.is_binary(present.type):
        present, decoded = _cast_each_failing(present, pa.string())
        if not decoded.all():
            return pa.string()
    present = present.filter(pc.invert(pc.is_in(present, pa.array(rules.null_values, pa.string()))))
    if not len(present):
        return pa.string()
    for candidate in _INFERRED_ORDER:
        if (
            pa.types.is_timestamp(candidate)
            and not pc.all(pc.match_substring_regex(present, r"^\s*\d{4}-\d{2}-\d{2}[T ]\d")).as_py()
        ):
            continue  # epoch numbers are BIGINT, not timestamps, when nothing says so
        _, failed = _convert_field(present, candidate, ValueRules(rules.null_values))
        if not failed.any():
            return candidate
    return pa.string()


def _convert_field(
    values: pa.Array, arrow_type: pa.DataType, rules: ValueRules
) -> tuple[pa.Array, np.ndarray]:
    """Field texts as ``arrow_type`` (a text in ``rules.null_values`` is null, whatever the
    type), and the mask of the values that did not convert."""
    if pa.types.is_timestamp(arrow_type):
        return _convert_timestamp(values, arrow_type, rules)
    return convert_text(values, arrow_type, rules=rules)


def _convert_timestamp(
    values: pa.Array, arrow_type: pa.DataType, rules: ValueRules
) -> tuple[pa.Array, np.ndarray]:
    """ISO-8601 texts (or texts of ``rules.timestamp_format``) or epoch milliseconds as instants."""
    texts, failed = convert_text(values, pa.string(), rules=rules)
    texts = pc.utf8_trim_whitespace(texts)
    epoch = _mask(pc.match_substring_regex(texts, r"^[+-]?\d{1,15}$"))
    not_epoch = pc.if_else(pa.array(epoch), pa.scalar(None, pa.string()), texts)
    if rules.timestamp_format is not None:
        instants, bad = parse_with_pattern(not_epoch, rules.timestamp_format, arrow_type)
    else:
        instants, bad = to_instants(not_epoch, arrow_type)
    if epoch.any():
        millis = pc.if_else(pa.array(epoch), texts, pa.scalar(None, pa.string())).cast(pa.int64())
        per_ms = {"s": None, "ms": 1, "us": 1000, "ns": 1_000_000}[arrow_type.unit]
        scaled = pc.divide(millis, 1000) if per_ms is None else pc.multiply(millis, per_ms)
        from_epoch = scaled.cast(pa.int64()).cast(pa.timestamp(arrow_type.unit, tz=arrow_type.tz))
        instants = pc.if_else(pa.array(epoch), from_epoch, instants)
    return instants, failed | bad


def _field_reason(f: pa.Field, value: bytes | str | None) -> str:
    if isinstance(value, bytes):
        try:
            shown = repr(value.decode("utf-8"))
        except UnicodeDecodeError:
            shown = f"{value.decode('utf-8', errors='replace')!r} (not UTF-8)"
    else:
        shown = repr(value)
    return f"field {f.name!r}: invalid value {shown} for {spark_type(f.type)}"


@dataclass(frozen=True)
class FormatSpec:
    """A validated ``[format]`` table."""

    type: str
    options: dict[str, Any]

    def build(self, schema: pa.Schema | None = None, *, entries: bool = False) -> RecordFormat | FieldsFormat:
        """The format, with ``schema`` (or the one given in the table). ``entries`` says the
        source delivers entries of field/value pairs (a stream), not lines: only then may
        the format be ``fields`` or name the ``field`` that holds a record."""
        check_format_for_source(self, entries=entries)
        opts = dict(self.options)
        ddl = opts.pop("schema", None)
        record_field = opts.pop("field", None)
        encoding = opts.pop("encoding", DEFAULT_ENCODING)
        comment = opts.pop("comment", None)
        rules = value_rules(opts)
        for name in RULE_OPTIONS:
            opts.pop(name, None)
        schema = schema or (parse_ddl(ddl) if ddl else None)
        if self.type == "fields":
            return FieldsFormat(schema, rules=rules)
        if entries and self.type == "csv":
            opts["header"] = False  # an entry holds one record, never a header
        if self.type == "csv":
            fmt: RecordFormat = CsvFormat(schema=schema, rules=rules, **opts)
        else:
            fmt = JsonLinesFormat(schema, rules=rules)
        fmt.record_field = record_field
        fmt.encoding = canonical_encoding(encoding)
        fmt.comment = comment.encode() if comment else None
        return fmt


RULE_OPTIONS = ("null_values", "date_format", "timestamp_format")


def value_rules(options: dict[str, Any]) -> ValueRules:
    """The ``ValueRules`` of a (validated) ``[format]`` table's options."""
    date_format, timestamp_format = options.get("date_format"), options.get("timestamp_format")
    return ValueRules(
        null_values=tuple(options.get("null_values", DEFAULT_NULL_VALUES)),
        date_format=None
        if date_format is None
        else datetime_pattern(date_format, field="format.date_format"),
        timestamp_format=(
            None
            if timestamp_format is None
            else datetime_pattern(timestamp_format, field="format.timestamp_format")
        ),
    )


def canonical_encoding(name: str) -> str:
    """The codec's own name for an encoding (``latin1`` -> ``iso8859-1``); ConfigError naming
    ``format.encoding`` for one Python does not know as a text encoding."""
    try:
        info = codecs.lookup(name)
    except LookupError:
        info = None
    if info is None or not getattr(info, "_is_text_encoding", True):
        raise ConfigError(
            "format.encoding", f"unknown text encoding {name!r} (such as utf-8, latin-1, utf-16)"
        )
    return info.name


def check_format_for_source(fmt: FormatSpec, *, entries: bool) -> None:
    """Refuses a format that does not fit what the source delivers: ``fields`` and the
    ``field`` option are for sources of entries (redis_streams), not of lines (files)."""
    if entries:
        if fmt.options.get("header"):
            raise ConfigError("format.header", "a stream entry holds one record, without a header: remove it")
        for name in ("encoding", "comment"):
            if name in fmt.options:
                raise ConfigError(
                    f"format.{name}", "applies to files; a stream entry's record is text already: remove it"
                )
        return
    if fmt.type == "fields":
        raise ConfigError(
            "format.type",
            "fields reads the field/value pairs of stream entries (a redis_streams source); "
            "this source reads lines: use csv or jsonl",
        )
    if "field" in fmt.options:
        raise ConfigError(
            "format.field",
            "names the field of a stream entry that holds the record (a redis_streams source); "
            "this source reads lines: remove it",
        )


@dataclass(frozen=True)
class FormatType:
    """A ``[format]`` type: its name, what it reads, and the options of its table."""

    type: str
    description: str
    options: tuple[Option, ...]
    #: Other names a table may give as its ``type`` (stored as ``type``).
    aliases: tuple[str, ...] = ()


SCHEMA_OPTION = Option(
    "schema",
    str,
    'The columns and their types in Spark DDL, such as "id BIGINT, ts TIMESTAMP, sensor STRING"; '
    "inferred from the first records when left out (a stream source whose streams are empty needs it).",
    default=None,
    example="id BIGINT, ts TIMESTAMP, sensor STRING, temperature DOUBLE",
)
FIELD_OPTION = Option(
    "field",
    str,
    "Stream sources only (redis_streams): the entry field that holds the record as text; "
    "left out, the field data.",
    default=None,
    example="data",
)
NULL_VALUES_OPTION = Option(
    "null_values",
    list,
    'The texts that are a missing value (NULL) in a column of any type, STRING included, such as ["", "NA"]; '
    "any other text that is not a value of its column's type is a bad record. In JSON, a string is null "
    "when it is one of these and its column is not STRING (JSON null is always null).",
    default=list(DEFAULT_NULL_VALUES),
    items=str,
    example=["", "NA"],
)
DATE_FORMAT_OPTION = Option(
    "date_format",
    str,
    "How DATE values are written, as a Spark datetime pattern such as yyyy/MM/dd or MMM d yyyy; "
    "left out, ISO-8601 (2024-05-01).",
    default=None,
    example="yyyy/MM/dd",
)
TIMESTAMP_FORMAT_OPTION = Option(
    "timestamp_format",
    str,
    "How TIMESTAMP values are written, as a Spark datetime pattern such as dd/MM/yyyy HH:mm:ss.SSS "
    "(a zone with XXX or Z; without one, UTC); left out, ISO-8601 with an optional zone.",
    default=None,
    example="dd/MM/yyyy HH:mm:ss",
)
ENCODING_OPTION = Option(
    "encoding",
    str,
    "The text encoding of the files, such as utf-8, latin-1 or utf-16 (a BOM is read); a file in an "
    "encoding other than utf-8 is read whole by one reader, and the byte offsets in its errors count "
    "its text as UTF-8.",
    default=DEFAULT_ENCODING,
)
COMMENT_OPTION = Option(
    "comment",
    str,
    'A line that starts with this text is skipped, such as "#" (line numbers in errors still count it).',
    default=None,
    example="#",
)
FORMATS: dict[str, FormatType] = {
    "csv": FormatType(
        "csv",
        "Delimited text (comma-separated by default), one record per line, optionally after a header line.",
        (
            SCHEMA_OPTION,
            Option(
                "header",
                bool,
                "Whether the first line of each file names the columns (a stream entry has no header).",
                default=True,
            ),
            Option("delimiter", str, 'The single character between values, such as "," or ";".', default=","),
            Option(
                "quote", str, "The single character that quotes a value holding the delimiter.", default='"'
            ),
            Option(
                "multiline",
                bool,
                "Whether a quoted value may hold newlines; files are then read whole, not cut into byte ranges.",
                default=False,
            ),
            NULL_VALUES_OPTION,
            DATE_FORMAT_OPTION,
            TIMESTAMP_FORMAT_OPTION,
            ENCODING_OPTION,
            COMMENT_OPTION,
            FIELD_OPTION,
        ),
    ),
    "jsonl": FormatType(
        "jsonl",
        "JSON: one JSON object per line (JSON lines), or a file holding an array of objects or JSON "
        "documents that span lines, chosen by the file's first character that is not white space.",
        (
            SCHEMA_OPTION,
            NULL_VALUES_OPTION,
            DATE_FORMAT_OPTION,
            TIMESTAMP_FORMAT_OPTION,
            ENCODING_OPTION,
            COMMENT_OPTION,
            FIELD_OPTION,
        ),
        aliases=("json", "ndjson"),
    ),
    "fields": FormatType(
        "fields",
        "The field/value pairs of a stream entry as the record, each value converted to its column's "
        "type (redis_streams only).",
        (SCHEMA_OPTION, NULL_VALUES_OPTION, DATE_FORMAT_OPTION, TIMESTAMP_FORMAT_OPTION),
    ),
}
FORMAT_ALIASES = {name: kind.type for kind in FORMATS.values() for name in (kind.type, *kind.aliases)}
FORMAT_TYPES = ", ".join(FORMATS)


def format_type(name: str) -> FormatType | None:
    """The format type a table's ``type`` names (an alias too, any case); None if none."""
    kind = FORMAT_ALIASES.get(str(name).lower())
    return FORMATS[kind] if kind else None


def validate_format(table: dict[str, Any]) -> FormatSpec:
    """Checks a ``[format]`` table; every error names its field."""
    table = dict(table)
    type_name = table.pop("type", None)
    if not type_name:
        raise ConfigError("format.type", f"is required (one of: {FORMAT_TYPES})")
    kind = format_type(type_name)
    if kind is None:
        raise ConfigError("format.type", f"unknown format {type_name!r} (one of: {FORMAT_TYPES})")
    _check_option_types(kind, table)
    for name in ("delimiter", "quote"):
        if name in table and len(table[name]) != 1:
            raise ConfigError(f"format.{name}", "must be a single character")
    if "field" in table and not table["field"].strip():
        raise ConfigError("format.field", "must name the entry field that holds the record, such as data")
    _check_value_options(table)
    comment = table.get("comment")
    if (
        kind.type == "csv"
        and comment
        and comment[0] in (table.get("delimiter", ","), table.get("quote", '"'))
    ):
        raise ConfigError(
            "format.comment",
            f"{comment!r} starts with the delimiter or the quote: it would skip records whose first "
            "value is empty or quoted",
        )
    if "schema" in table:
        _check_schema(kind.type, parse_ddl(table["schema"]))
    return FormatSpec(kind.type, table)


#: At most this many ``null_values``, each at most ``MAX_NULL_VALUE_CHARS`` long.
MAX_NULL_VALUES = 100
MAX_NULL_VALUE_CHARS = 100


def _check_value_options(table: dict[str, Any]) -> None:
    """Refuses null values, datetime patterns, an encoding or a comment that cannot be used,
    naming the field (the patterns are translated here, so a run never meets a bad one)."""
    nulls = table.get("null_values")
    if nulls is not None:
        if len(nulls) > MAX_NULL_VALUES:
            raise ConfigError("format.null_values", f"has {len(nulls)} values, at most {MAX_NULL_VALUES}")
        for i, text in enumerate(nulls):
            if not isinstance(text, str) or len(text) > MAX_NULL_VALUE_CHARS or "\n" in text:
                raise ConfigError(
                    f"format.null_values[{i}]",
                    f"must be a text of at most {MAX_NULL_VALUE_CHARS} characters on one line",
                )
    value_rules(table)
    if "encoding" in table:
        canonical_encoding(table["encoding"])
    comment = table.get("comment")
    if comment is not None and (not comment or "\n" in comment or "\r" in comment):
        raise ConfigError("format.comment", 'must be the text a comment line starts with, such as "#"')


def _check_option_types(kind: FormatType, table: dict[str, Any]) -> None:
    allowed = option_types(kind.options)
    for name, value in table.items():
        if name not in allowed:
            raise ConfigError(f"format.{name}", f"is not an option of {kind.type} ({', '.join(allowed)})")
        expected = allowed[name]
        types = expected if isinstance(expected, tuple) else (expected,)
        if (isinstance(value, bool) and bool not in types) or not isinstance(value, types):
            raise ConfigError(f"format.{name}", f"must be a {' or a '.join(t.__name__ for t in types)}")


def _check_schema(kind: str, schema: pa.Schema) -> None:
    nested = [f.name for f in schema if _is_nested(f.type)]
    if kind == "csv" and nested:
        reason = f"a CSV value cannot hold a nested type (column {nested[0]!r}); read JSON lines for that"
        raise ConfigError("format.schema", reason)
    if kind == "fields" and nested:
        reason = (
            f"a field value is text and cannot hold a nested type (column {nested[0]!r}); "
            "put the record as JSON in one field and read it with type = json, field = <name>"
        )
        raise ConfigError("format.schema", reason)


def _raw(record: bytes) -> str:
    return record.decode("utf-8", errors="replace").rstrip("\r\n")


def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    # Arrow counts rows within the piece it was given, which means nothing to a user.
    return re.sub(r"\s*(Row #\d+:|in row \d+)", "", text.removeprefix("Invalid: ")).strip()
