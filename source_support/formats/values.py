"""How the text of a field becomes a value, vectorized: which texts are null
(``ValueRules``), and the conversions of text columns to their column's type as Arrow's CSV
reader converts them (timestamps with or without a zone, dates and timestamps by a declared
pattern, numbers checked by a pattern first so a column of bad values costs one pass).

Timestamps may carry a zone (``2013-01-01T10:00:00Z``, ``+02:00``): they are read as the
instant they name, and values without a zone count as UTC, as Spark and pandas read them.

Missing values follow one rule for every type (``ValueRules``): a field is null when its text
is one of ``[format] null_values`` (default ``[""]``), quoted or not; ``NaN`` (any case, with
a sign or not) is NaN in a FLOAT or DOUBLE column, as are ``inf`` and ``Infinity``; any other
text that does not convert to its column's type is a bad record, never a null.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from source_support.datetime_patterns import DatetimePattern, datetime_pattern, parse_with_pattern
from source_support.formats.typed_arrow import Mask, as_mask, is_in, nulls

#: What Arrow's parsers and casts raise on bad input.
ARROW_ERRORS = (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, UnicodeDecodeError)

#: A timestamp's text ends with a zone (``Z``, ``+02:00``).
ZONE_SUFFIX = r"[T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?\s*([Zz]|[+-]\d{2}(:?\d{2})?)$"
#: How an ISO-8601 timestamp's text starts (a date, then a time).
ISO_TIMESTAMP_START = r"^\s*\d{4}-\d{2}-\d{2}[T ]\d"
#: An ISO-8601 date or timestamp: a date, then a time or nothing (Arrow's CSV reader takes a
#: column of dates and timestamps as TIMESTAMP, the dates at midnight).
ISO_DATE_OR_TIMESTAMP = r"^\s*\d{4}-\d{2}-\d{2}([T ]\d|\s*$)"
_NUMBER_CHECKS = {
    "int": r"^[+-]?\d+$",
    "float": r"(?i)^[+-]?((\d+\.?\d*|\.\d+)(e[+-]?\d+)?|inf|infinity|nan)$",
    "decimal": r"(?i)^[+-]?(\d+\.?\d*|\.\d+)(e[+-]?\d+)?$",
    "date": r"^\d{4}-\d{2}-\d{2}$",
}


#: What ``[format] null_values`` is when left out: only an empty field is null.
DEFAULT_NULL_VALUES = ("",)


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

    def null_texts(self, strings: pa.Array[Any]) -> Mask:
        """Where a text is one of ``null_values`` (a null is not), as a mask."""
        return as_mask(is_in(strings, sorted(self.null_values)))

    def present(self, strings: pa.Array[Any]) -> pa.Array[Any]:
        """The texts that are values: neither null nor one of ``null_values``."""
        present = pc.drop_null(strings)
        return present.filter(~self.null_texts(present))


#: The ``[format]`` options that make the ``ValueRules``.
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


def to_instants(strings: pa.Array[Any], target: pa.TimestampType[Any, Any]) -> tuple[pa.Array[Any], Mask]:
    """ISO-8601 texts as instants of ``target``'s unit (those without a zone count as UTC),
    vectorized; returns the values and a mask of the non-null texts that are not timestamps."""
    texts = pc.utf8_trim_whitespace(strings.cast(pa.string()))
    unit = target.unit
    count = len(texts)
    present = ~as_mask(texts.is_null())
    zoned = as_mask(pc.match_substring_regex(texts, ZONE_SUFFIX))
    values = np.zeros(count, dtype=np.int64)
    ok = np.zeros(count, dtype=bool)
    for mask, arrow_type in (
        (present & zoned, pa.timestamp(unit, tz="UTC")),
        (present & ~zoned, pa.timestamp(unit)),
    ):
        where = np.flatnonzero(mask)
        if not len(where):
            continue
        converted, good = cast_each_failing(texts.take(where), arrow_type)
        values[where[good]] = converted.cast(pa.int64()).fill_null(0).to_numpy()[good]
        ok[where[good]] = True
    out = pa.array(values, type=pa.int64(), mask=~ok).cast(pa.timestamp(unit, tz=target.tz))
    return out, present & ~ok


def cast_each_failing(strings: pa.Array[Any], arrow_type: pa.DataType) -> tuple[pa.Array[Any], Mask]:
    """Casts ``strings`` (no nulls); where the whole cast fails, halves until the failing
    values are alone. Returns the values (zero where failed) and the mask of those that cast."""
    try:
        return strings.cast(arrow_type), np.ones(len(strings), dtype=bool)
    except ARROW_ERRORS:
        if len(strings) == 1:
            return nulls(1, arrow_type), np.zeros(1, dtype=bool)
    mid = len(strings) // 2
    left, left_ok = cast_each_failing(strings.slice(0, mid), arrow_type)
    right, right_ok = cast_each_failing(strings.slice(mid), arrow_type)
    return pa.concat_arrays([left, right]), np.concatenate([left_ok, right_ok])


def convert_text(
    strings: pa.Array[Any], arrow_type: pa.DataType, *, rules: ValueRules
) -> tuple[pa.Array[Any], Mask]:
    """Texts of one column as ``arrow_type``, vectorized, as Arrow's CSV reader converts
    them; returns the values and a mask of the values that are not nulls and did not convert.
    A text in ``rules.null_values`` is null whatever the type, STRING included.

    Each value is checked by a pattern first, so a column of bad values costs one pass;
    values that pass the pattern but not Arrow's own parser are found by halving casts.
    """
    count = len(strings)
    not_utf8 = np.zeros(count, dtype=bool)
    if pa.types.is_binary(strings.type):
        strings, decoded = cast_each_failing(strings, pa.string())
        not_utf8 = ~decoded
    strings = strings.cast(pa.string())
    null_texts = rules.null_texts(strings)
    if null_texts.any():
        strings = pc.if_else(null_texts, pa.scalar(None, pa.string()), strings)
    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
        return strings.cast(arrow_type), not_utf8
    pattern = rules.pattern_for(arrow_type)
    if pattern is not None:
        values, failed = parse_with_pattern(strings, pattern, arrow_type)
    else:
        values, failed = _convert_utf8(strings, arrow_type)
    return values, failed | not_utf8


def _convert_utf8(strings: pa.Array[Any], arrow_type: pa.DataType) -> tuple[pa.Array[Any], Mask]:
    """Texts (nulls where the value is null) as ``arrow_type`` by Arrow's own casts."""
    count = len(strings)
    absent = as_mask(strings.is_null())
    texts = pc.utf8_trim_whitespace(strings)
    if pa.types.is_timestamp(arrow_type):
        values, failed = to_instants(pc.if_else(absent, pa.scalar(None, pa.string()), texts), arrow_type)
        return values, failed
    if pa.types.is_boolean(arrow_type):
        true = as_mask(is_in(texts, ["1", "True", "TRUE", "true"]))
        false = as_mask(is_in(texts, ["0", "False", "FALSE", "false"]))
        return pa.array(true, mask=absent | ~(true | false)), ~absent & ~(true | false)
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
    candidates = ~absent
    if check is not None:
        candidates &= as_mask(pc.match_substring_regex(texts, _NUMBER_CHECKS[check]))
    where = np.flatnonzero(candidates)
    converted, good = cast_each_failing(texts.take(where), arrow_type)
    ok = np.zeros(count, dtype=bool)
    ok[where[good]] = True
    positions = np.full(count, len(where), dtype=np.int64)  # a null slot past the end
    positions[where[good]] = np.flatnonzero(good)
    padded = pa.concat_arrays([converted, nulls(1, arrow_type)])
    return padded.take(positions), ~absent & ~ok


def shown_value(value: bytes | str | None) -> str:
    """A value as an error shows it (bytes as text, said so if they are not UTF-8)."""
    if not isinstance(value, bytes):
        return repr(value)
    try:
        return repr(value.decode("utf-8"))
    except UnicodeDecodeError:
        return f"{value.decode('utf-8', errors='replace')!r} (not UTF-8)"


def inferred_text_type(column: pa.ChunkedArray[Any], rules: ValueRules) -> pa.DataType:
    """The type of a column Arrow inferred, where a text column may be more: DATE or
    TIMESTAMP when every value parses by the declared ``date_format`` or
    ``timestamp_format``, else, as Arrow's CSV reader infers them, DATE when every value is
    an ISO-8601 date and TIMESTAMP when every value is an ISO-8601 date or timestamp (zones
    may mix), so the same text has the same type in every format."""
    if not pa.types.is_string(column.type):
        return column.type
    present = rules.present(column.combine_chunks())
    if not len(present):
        return column.type
    for pattern, candidate in (
        (rules.date_format, pa.date32()),
        (rules.timestamp_format, pa.timestamp("us", tz="UTC")),
    ):
        if pattern is not None and not parse_with_pattern(present, pattern, candidate)[1].any():
            return candidate
    if rules.date_format is None and _all_dates(present):
        return pa.date32()
    if rules.timestamp_format is None and _all_timestamps(column):
        return pa.timestamp("us", tz="UTC")
    return column.type


def _all_dates(present: pa.Array[Any]) -> bool:
    """Whether every text is an ISO-8601 date (``1970-01-01``) that exists."""
    if not pc.all(pc.match_substring_regex(present, _NUMBER_CHECKS["date"])).as_py():
        return False
    return bool(cast_each_failing(present, pa.date32())[1].all())


def _all_timestamps(column: pa.ChunkedArray[Any]) -> bool:
    """Whether every value of a text column is an ISO-8601 date or timestamp (zones may be mixed)."""
    present = pc.drop_null(column.combine_chunks())
    if not len(present) or not pc.all(pc.match_substring_regex(present, ISO_DATE_OR_TIMESTAMP)).as_py():
        return False
    _, failed = to_instants(present, pa.timestamp("us", tz="UTC"))
    return not failed.any()
