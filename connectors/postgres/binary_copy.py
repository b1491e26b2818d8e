"""Arrow record batches as PostgreSQL's binary ``COPY`` stream, built with numpy a column at
a time (no Python object per value).

Each column is sent in one *wire type* (``wire_type``): integers, floats, booleans, dates and
timestamps in their binary form, and everything else as text (``text`` and ``bytea`` are
their bytes in the binary format): a decimal, a time or an interval is cast to text by Arrow,
a list or a struct is written per row (an array literal, JSON). The staging table has the
wire types; the move into the target casts each column to the target's type.
"""

from __future__ import annotations

import datetime
import json
import struct
from collections.abc import Iterable, Iterator
from typing import Any, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from source_support.typed_arrow import timestamp_zone

#: The stream's header (signature, flags, extension length) and its trailer.
HEADER = b"PGCOPY\n\xff\r\n\x00" + struct.pack("!ii", 0, 0)
TRAILER = struct.pack("!h", -1)
#: Decimals up to this precision go in ``numeric``'s binary form (their unscaled value fits
#: an int64); wider ones as text.
MAX_BINARY_NUMERIC_PRECISION = 18
#: Microseconds and days between the Unix epoch and PostgreSQL's (2000-01-01).
_PG_EPOCH_US = 946_684_800_000_000
_PG_EPOCH_DAYS = 10_957

#: Fixed-width wire types: the numpy big-endian dtype of each.
#: ``pc.fill_null`` (the stubs take no plain scalar for its fill value).
_fill_null: Any = pc.fill_null

_FIXED = {
    "smallint": ">i2",
    "integer": ">i4",
    "bigint": ">i8",
    "real": ">f4",
    "double precision": ">f8",
    "boolean": "u1",
    "date": ">i4",
    "timestamp": ">i8",
    "timestamptz": ">i8",
}


def wire_type(arrow_type: pa.DataType) -> str:
    """The PostgreSQL type a column of ``arrow_type`` is staged in."""
    t = arrow_type
    if pa.types.is_int8(t) or pa.types.is_int16(t) or pa.types.is_uint8(t):
        return "smallint"
    if pa.types.is_int32(t) or pa.types.is_uint16(t):
        return "integer"
    if pa.types.is_int64(t) or pa.types.is_uint32(t):
        return "bigint"
    if pa.types.is_float32(t):
        return "real"
    if pa.types.is_float64(t) or pa.types.is_float16(t):
        return "double precision"
    if pa.types.is_boolean(t):
        return "boolean"
    if pa.types.is_date(t):
        return "date"
    if pa.types.is_timestamp(t):
        return "timestamp" if timestamp_zone(t) is None else "timestamptz"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return "bytea"
    if pa.types.is_decimal128(t) and _decimal_precision(t) <= MAX_BINARY_NUMERIC_PRECISION:
        return "numeric"
    return "text"  # strings, wider decimals, times, intervals, lists, structs, maps, uint64


def copy_stream(batches: Iterable[pa.RecordBatch]) -> Iterator[bytes]:
    """The whole binary COPY stream of ``batches``: header, rows, trailer."""
    yield HEADER
    for batch in batches:
        if batch.num_rows:
            yield encode_rows(batch)
    yield TRAILER


def encode_rows(batch: pa.RecordBatch) -> bytes:
    """The rows of ``batch`` in the binary COPY format (no header or trailer)."""
    n = batch.num_rows
    arrays: list[pa.Array[Any]] = [batch.column(i) for i in range(batch.num_columns)]
    columns = [_column_bytes(column) for column in arrays]
    # Each row: its field count (2 bytes), then per field a length (4 bytes) and the value.
    row_sizes = np.full(n, 2 + 4 * len(columns), dtype=np.int64)
    for lengths, _, _ in columns:
        row_sizes += np.maximum(lengths, 0)
    row_starts = np.zeros(n, dtype=np.int64)
    np.cumsum(row_sizes[:-1], out=row_starts[1:])
    out = np.empty(int(row_sizes.sum()), dtype=np.uint8)
    count = np.frombuffer(struct.pack("!h", len(columns)), dtype=np.uint8)
    out[row_starts[:, None] + np.arange(2)] = count
    position = row_starts + 2
    for lengths, values, value_starts in columns:
        present = lengths >= 0
        length_bytes = lengths.astype(">i4").view(np.uint8).reshape(n, 4)
        if values is not None and value_starts is None:  # fixed width: length and value at once
            width = values.shape[1]
            fields = np.concatenate([length_bytes, values], axis=1)
            if present.all():
                out[position[:, None] + np.arange(4 + width)] = fields
            else:
                out[position[present][:, None] + np.arange(4 + width)] = fields[present]
                out[position[~present][:, None] + np.arange(4)] = length_bytes[~present]
        else:
            out[position[:, None] + np.arange(4)] = length_bytes
            sizes = np.maximum(lengths, 0)
            if values is not None and value_starts is not None and sizes.any():
                total = int(sizes.sum())
                offsets = np.zeros(n, dtype=np.int64)
                np.cumsum(sizes[:-1], out=offsets[1:])
                within = np.arange(total, dtype=np.int64) - np.repeat(offsets, sizes)
                out[np.repeat(position + 4, sizes) + within] = values[np.repeat(value_starts, sizes) + within]
        position += 4 + np.maximum(lengths, 0)
    return out.tobytes()


#: A column as (length of each value, -1 for null; the values; where each starts, None
#: when every value has the same width and ``values`` is a rows x width matrix).
_Column = tuple[np.ndarray[Any, Any], np.ndarray[Any, Any] | None, np.ndarray[Any, Any] | None]


def _column_bytes(column: pa.Array[Any]) -> _Column:
    wire = wire_type(column.type)
    n = len(column)
    valid = (
        np.ones(n, dtype=bool)
        if column.null_count == 0
        else np.asarray(column.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    )
    if wire == "numeric":
        return _numeric_column(column, valid)
    if wire in _FIXED:
        numbers = _fixed_values(column, wire)
        dtype = np.dtype(_FIXED[wire])
        matrix = numbers.astype(dtype).view(np.uint8).reshape(n, dtype.itemsize)
        lengths = np.where(valid, dtype.itemsize, -1).astype(np.int64)
        return lengths, matrix, None
    binary = _as_binary(column)
    buffers: list[Any] = binary.buffers()
    offsets: np.ndarray[Any, Any] = np.frombuffer(buffers[1], dtype=np.int64)[
        binary.offset : binary.offset + n + 1
    ]
    data = buffers[2]
    values: np.ndarray[Any, Any] = (
        np.frombuffer(data, dtype=np.uint8) if data is not None else np.zeros(0, dtype=np.uint8)
    )
    lengths = np.where(valid, offsets[1:] - offsets[:-1], -1).astype(np.int64)
    return lengths, values, offsets[:-1].astype(np.int64)


def _decimal_precision(t: pa.DataType) -> int:
    precision: int = getattr(t, "precision")  # noqa: B009 - the stubs type no decimal's precision
    return precision


def _numeric_column(column: pa.Array[Any], valid: np.ndarray[Any, Any]) -> _Column:
    """A decimal128 column (unscaled values within int64) in ``numeric``'s binary form, the
    same width for every value: ``ndigits, weight, sign, dscale`` then ``ndigits`` base-10000
    digits, leading and trailing zero digits kept (the server strips them)."""
    n = len(column)
    scale: int = getattr(column.type, "scale")  # noqa: B009
    buffers: list[Any] = column.buffers()
    words: np.ndarray[Any, Any] = np.frombuffer(buffers[1], dtype=np.int64).reshape(-1, 2)
    unscaled = words[column.offset : column.offset + n, 0]
    precision = _decimal_precision(column.type)
    fraction_groups = -(-scale // 4)
    integer_groups = max(1, -(-(precision - scale) // 4))
    groups = integer_groups + fraction_groups
    magnitude = np.abs(unscaled).astype(np.uint64)
    whole, fraction = np.divmod(magnitude, np.uint64(10**scale))
    # The fraction's digits up to a whole group of four (it stays below 10**(4 * groups)).
    fraction = fraction * np.uint64(10 ** (4 * fraction_groups - scale))
    header_and_digits = np.zeros((n, 4 + groups), dtype=">i2")
    header_and_digits[:, 0] = groups
    header_and_digits[:, 1] = integer_groups - 1
    header_and_digits[:, 2] = np.where(unscaled < 0, 0x4000, 0)
    header_and_digits[:, 3] = scale
    for k in range(groups - 1, -1, -1):
        part = fraction if k >= integer_groups else whole
        header_and_digits[:, 4 + k] = (part % np.uint64(10_000)).astype(np.int16)
        part //= np.uint64(10_000)
    width = 2 * (4 + groups)
    lengths = np.where(valid, width, -1).astype(np.int64)
    return lengths, header_and_digits.view(np.uint8).reshape(n, width), None


def _fixed_values(column: pa.Array[Any], wire: str) -> np.ndarray[Any, Any]:
    """The values of a fixed-width column as numbers of the wire type (nulls as 0)."""
    if wire in ("timestamp", "timestamptz"):
        zone = timestamp_zone(column.type)
        unit = pa.timestamp("us") if zone is None else pa.timestamp("us", tz=zone)
        micros = column.cast(unit, safe=False).cast(pa.int64())
        return _fill_null(micros, 0).to_numpy() - _PG_EPOCH_US
    if wire == "date":
        days = column.cast(pa.date32()).cast(pa.int32())
        return _fill_null(days, 0).to_numpy() - _PG_EPOCH_DAYS
    if wire == "boolean":
        return _fill_null(column, False).to_numpy(zero_copy_only=False).astype(np.uint8)
    return _fill_null(column, 0).to_numpy(zero_copy_only=False)


def _as_binary(column: pa.Array[Any]) -> pa.Array[Any]:
    """The column's values as ``large_binary`` (text in UTF-8), nulls empty."""
    t = column.type
    if (
        pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_fixed_size_binary(t)
    ):
        out = column.cast(pa.large_binary())
    elif pa.types.is_list(t) or pa.types.is_large_list(t):
        out = pa.array([_array_literal(v) for v in column.to_pylist()], type=pa.large_binary())
    elif pa.types.is_struct(t) or pa.types.is_map(t):
        out = pa.array([_json_text(v) for v in column.to_pylist()], type=pa.large_binary())
    elif pa.types.is_duration(t):
        out = pa.array(
            [None if v is None else f"{_micros(v)} microseconds".encode() for v in column.to_pylist()],
            type=pa.large_binary(),
        )
    else:  # decimals, times, unsigned 64-bit: Arrow's text of them is PostgreSQL's
        out = column.cast(pa.string()).cast(pa.large_binary())
    return _fill_null(out, b"")


def _micros(value: datetime.timedelta) -> int:
    return (value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds


def _json_text(value: Any) -> bytes | None:
    if value is None:
        return None
    if isinstance(value, list):  # a map comes as its (key, value) pairs
        value = dict(cast(list[tuple[Any, Any]], value))
    return json.dumps(value, default=str, ensure_ascii=False).encode()


def _array_literal(values: list[Any] | None) -> bytes | None:
    """A one-dimensional PostgreSQL array literal (``{1,2,NULL}``, ``{"a","b"}``)."""
    if values is None:
        return None
    items: list[str] = []
    for value in values:
        if value is None:
            items.append("NULL")
        elif isinstance(value, bytes):
            items.append('"\\\\x' + value.hex() + '"')
        else:
            text = value.isoformat() if hasattr(value, "isoformat") else str(value)
            items.append('"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"')
    return ("{" + ",".join(items) + "}").encode()
