"""Typed forms of the few pyarrow calls whose stubs leave a type open.

pyarrow ships no types of its own; ``pyarrow-stubs`` types most of its API, but leaves a few
functions untyped (``pc.struct_field``) or refuses a call pyarrow takes (a plain string as
``binary_join_element_wise``'s separator). Each function here wraps one such call with the
types it has, so the modules that use Arrow are checked strictly and the workaround is in
one place.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

#: The units of an Arrow timestamp or duration.
TimeUnit = Literal["s", "ms", "us", "ns"]
#: The codecs Parquet files are written with.
ParquetCompression = Literal["none", "snappy", "gzip", "zstd", "lz4", "brotli"]


def fields_of(schema: pa.Schema | pa.StructType) -> list[pa.Field[pa.DataType]]:
    """The fields of a schema or a struct type, with their types (the stubs type both
    kinds of field lists without a type argument)."""
    fields: list[pa.Field[pa.DataType]] = list(schema)
    return fields


def timestamp_zone(arrow_type: pa.DataType) -> str | None:
    """The time zone of a timestamp type; None for a naive timestamp or another type."""
    return arrow_type.tz if pa.types.is_timestamp(arrow_type) else None


def struct_field(values: pa.StructArray, name: str) -> pa.Array[Any]:
    """The child ``name`` of each struct, null where the struct is (``pc.struct_field``)."""
    # The stubs declare neither the arguments nor the result of struct_field.
    return pc.struct_field(values, name)  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]


def join_strings(*strings: pa.Array[Any], separator: str = "") -> pa.Array[Any]:
    """The strings of each row joined by ``separator``, null where any is null."""
    # The stubs want every argument of binary_join_element_wise of one type, so they
    # refuse the plain-string separator it takes as its last.
    return pc.binary_join_element_wise(*strings, separator)  # pyright: ignore[reportCallIssue, reportArgumentType, reportUnknownVariableType]


def add_duration(
    timestamps: pa.TimestampArray[Any, Any], durations: pa.Array[Any]
) -> pa.TimestampArray[Any, Any]:
    """Each timestamp moved on by its duration."""
    # The stubs type ``pc.add`` for two arguments of one type, so timestamp + duration comes
    # out as the union of both.
    return pc.add(timestamps, durations)  # pyright: ignore[reportReturnType]


def write_parquet(table: pa.Table, path: str | Path, *, compression: ParquetCompression) -> None:
    """``pq.write_table``."""
    # The stubs leave some of write_table's options (and its **kwargs) untyped.
    pq.write_table(table, path, compression=compression)  # pyright: ignore[reportUnknownMemberType]
