"""Spark's datetime patterns (``yyyy/MM/dd``, ``MMM d yyyy``, ``yyyy-MM-dd HH:mm:ss.SSS``) as
the ``strptime`` formats Arrow parses with, and the vectorized parse of a text column by one.

Only the pattern letters of dates and times a file holds are supported (``y u M L d D H h m
s S a E Z X x`` and ``'quoted text'``); any other letter is refused with an error naming the
option, rather than read as something else. A run of ``S`` (the fraction of a second) must
follow ``.`` or ``,`` and come last but for a zone: Arrow's ``strptime`` has no fraction,
so it is cut off and added back here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from source_support.errors import ConfigError
from source_support.typed_arrow import TimeUnit, add_duration, join_strings, struct_field, timestamp_zone

# letter -> {run length: strptime directive}; a length not listed takes the longest below it.
_DIRECTIVES: dict[str, dict[int, str]] = {
    "y": {1: "%Y", 2: "%y", 3: "%Y"},
    "u": {1: "%Y", 2: "%y", 3: "%Y"},
    "M": {1: "%m", 3: "%b", 4: "%B"},
    "L": {1: "%m", 3: "%b", 4: "%B"},
    "d": {1: "%d"},
    "D": {1: "%j"},
    "H": {1: "%H"},
    "h": {1: "%I"},
    "m": {1: "%M"},
    "s": {1: "%S"},
    "a": {1: "%p"},
    "E": {1: "%a", 4: "%A"},
    "Z": {1: "%z"},
    "X": {1: "%z"},
    "x": {1: "%z"},
}
_ZONE_LETTERS = "ZXx"
#: A text's fraction of a second: its last digits after "." or ",", before a zone if any.
_FRACTION = r"^(?P<head>.*?)[.,](?P<fraction>\d{1,9})(?P<zone>\s*(?:[Zz]|[+-]\d{2}(?::?\d{2})?)?)$"
_TIME_LETTERS = "HhmsSa"


@dataclass(frozen=True)
class DatetimePattern:
    """A Spark datetime pattern translated: the ``strptime`` format, whether texts end in a
    fraction of a second that is cut off first, and whether the pattern names a zone."""

    spark: str
    strptime: str
    fraction: bool = False
    zoned: bool = False
    has_time: bool = False


def datetime_pattern(pattern: str, *, field: str) -> DatetimePattern:
    """Translates a Spark datetime pattern; a ConfigError naming ``field`` for a letter
    that is not supported or a pattern that cannot be read."""
    if not pattern.strip():
        raise ConfigError(field, "is empty: give a Spark datetime pattern such as yyyy/MM/dd")
    out: list[str] = []
    fraction = zoned = has_time = False
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if fraction and ch not in _ZONE_LETTERS + " ":
            raise ConfigError(
                field, f"{pattern!r}: the fraction of a second (S) must come last (but for a zone, XXX)"
            )
        if ch == "'":
            end = pattern.find("'", i + 1)
            if end < 0:
                raise ConfigError(field, f"{pattern!r}: a quote (') is not closed")
            literal = pattern[i + 1 : end] or "'"  # '' is a quote itself
            out.append(literal.replace("%", "%%"))
            i = end + 1
            continue
        if not ch.isalpha():
            out.append("%%" if ch == "%" else ch)
            i += 1
            continue
        run = len(pattern) - i - len(pattern[i:].lstrip(ch))
        if ch == "S":
            if not out or out[-1][-1:] not in (".", ","):
                raise ConfigError(field, f"{pattern!r}: the fraction of a second (S) must follow '.' or ','")
            out.pop()  # the separator is cut off with the fraction
            fraction = True
        elif ch in _DIRECTIVES:
            lengths = _DIRECTIVES[ch]
            out.append(lengths[max(n for n in lengths if n <= run)])
        else:
            supported = "".join(sorted({*_DIRECTIVES, "S"}))
            raise ConfigError(
                field,
                f"{pattern!r}: the pattern letter {ch!r} is not supported (supported: {supported}, "
                "and text in single quotes)",
            )
        zoned |= ch in _ZONE_LETTERS
        has_time |= ch in _TIME_LETTERS
        i += run
    return DatetimePattern(pattern, "".join(out), fraction=fraction, zoned=zoned, has_time=has_time)


def parse_with_pattern(
    strings: pa.Array[Any], pattern: DatetimePattern, target: pa.DataType
) -> tuple[pa.Array[Any], npt.NDArray[np.bool_]]:
    """Texts (nulls stay null) as ``target`` (DATE or TIMESTAMP) by ``pattern``; values
    without a zone count as UTC. Returns the values and the mask of texts that did not parse."""
    texts = pc.utf8_trim_whitespace(strings.cast(pa.string()))
    present = np.asarray(texts.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    micros = None
    if pattern.fraction:
        parts = pc.extract_regex(texts, _FRACTION)
        texts = join_strings(struct_field(parts, "head"), struct_field(parts, "zone"))
        digits = pc.utf8_slice_codeunits(pc.utf8_rpad(struct_field(parts, "fraction"), 9, "0"), 0, 6)
        micros = digits.cast(pa.int64())
    unit: TimeUnit = target.unit if pa.types.is_timestamp(target) else "s"
    parsed = pc.strptime(texts, format=pattern.strptime, unit=unit, error_is_null=True)
    if micros is not None:
        per_micro = {"s": None, "ms": None, "us": 1, "ns": 1000}[unit]
        if per_micro is None:
            micros = pc.divide(micros, 1000 if unit == "ms" else 1_000_000)
        else:
            micros = pc.multiply(micros, per_micro)
        parsed = add_duration(parsed, micros.cast(pa.duration(unit)))
    failed = present & ~np.asarray(parsed.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    zone = timestamp_zone(parsed.type)
    if pa.types.is_date(target):
        naive = parsed.cast(pa.timestamp(unit)) if zone is None else _naive(parsed, unit)
        return naive.cast(target), failed
    if zone is None:
        parsed = pc.assume_timezone(parsed, "UTC") if timestamp_zone(target) else parsed
    elif timestamp_zone(target) is None:
        parsed = _naive(parsed, unit)
    return parsed.cast(target), failed


def _naive(instants: pa.Array[Any], unit: TimeUnit) -> pa.Array[Any]:
    """UTC instants as naive timestamps of the same wall clock in UTC."""
    return instants.cast(pa.int64()).cast(pa.timestamp(unit))
