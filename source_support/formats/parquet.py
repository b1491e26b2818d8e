"""The ``parquet`` format: Parquet files read row group by row group with pyarrow.

A Parquet file holds its own schema in its footer, so, as with Avro container files, the
run's columns are the declared ones (``format.schema``: each must be in every file with
the type it reads as, or one that widens to it without loss: INT for BIGINT, DECIMAL(4,2)
for DECIMAL(12,2)) or the first file's, and a file whose columns differ is settled by
``format.on_schema_change`` (``drift``). Each Parquet type reads as the Spark type a
Spark reader of the file would give it (``landed_type``): integers and floats as they are
(unsigned ones one size up), strings and binaries of any width as STRING and BINARY, a
dictionary as its values, a timestamp with a zone (adjusted to UTC) as TIMESTAMP and one
without as TIMESTAMP_NTZ, in microseconds; times and durations, which Spark has no type
for, as their text.
"""

from __future__ import annotations

import copy
from typing import Any

import pyarrow as pa

from source_support.api import SchemaChange
from source_support.errors import ConfigError
from source_support.formats.holder import SchemaHolder
from source_support.formats.record import ReadError
from source_support.formats.typed_arrow import Offsets
from source_support.formats.typed_columns import conform, select_columns, settled, widens_decimal
from source_support.typed_arrow import fields_of


def landed_type(t: pa.DataType) -> pa.DataType:
    """The Arrow type a Parquet column of type ``t`` lands as (see the module's docstring)."""
    if pa.types.is_dictionary(t):
        return landed_type(t.value_type)
    if pa.types.is_unsigned_integer(t):
        if t.bit_width == 64:
            return pa.decimal128(20, 0)
        return {8: pa.int16(), 16: pa.int32(), 32: pa.int64()}[t.bit_width]
    if pa.types.is_integer(t) or pa.types.is_float32(t) or pa.types.is_float64(t) or pa.types.is_boolean(t):
        return t
    if pa.types.is_float16(t):
        return pa.float32()
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return pa.string()
    if (
        pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_fixed_size_binary(t)
        or pa.types.is_binary_view(t)
    ):
        return pa.binary()
    if pa.types.is_date(t):
        return pa.date32()
    if pa.types.is_timestamp(t):
        return pa.timestamp("us", tz="UTC") if t.tz else pa.timestamp("us")
    if pa.types.is_decimal(t):
        return t if t.precision <= 38 else pa.string()
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return pa.list_(landed_type(t.value_type))
    if pa.types.is_map(t):
        return pa.map_(landed_type(t.key_type), landed_type(t.item_type))
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, landed_type(f.type)) for f in fields_of(t)])
    return pa.string()  # times, durations, intervals, nulls: their text


def landed_schema_of(schema: pa.Schema) -> pa.Schema:
    """The columns a Parquet file of ``schema`` lands (its metadata left out)."""
    return pa.schema([pa.field(f.name, landed_type(f.type)) for f in fields_of(schema)])


def landed_table(table: pa.Table, *, path: str) -> pa.Table:
    """A table read from a Parquet file in the types it lands as; ReadError naming the
    column if a value does not fit (a timestamp finer than a microsecond, say)."""
    schema = landed_schema_of(table.schema)
    if table.schema.remove_metadata().equals(schema):
        return table
    columns: list[pa.ChunkedArray[Any]] = []
    for f, column in zip(fields_of(schema), table.columns, strict=True):
        try:
            columns.append(_cast(column, f.type))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise ReadError(
                f"{path}: column {f.name!r} ({column.type}) does not read as {f.type}: {exc}"
            ) from None
    return pa.Table.from_arrays(columns, schema=schema)


def _cast(column: pa.ChunkedArray[Any], to: pa.DataType) -> pa.ChunkedArray[Any]:
    if column.type == to:
        return column
    if pa.types.is_dictionary(column.type):
        column = column.cast(column.type.value_type)
    if pa.types.is_string(to) and not (
        pa.types.is_string(column.type)
        or pa.types.is_large_string(column.type)
        or pa.types.is_string_view(column.type)
    ):
        return column.cast(pa.string())
    return column.cast(to)


class ParquetFormat(SchemaHolder):
    """Parquet row groups into Arrow tables of one schema: the declared one
    (``format.schema``) or the first file's."""

    type_name = "parquet"

    def __init__(self, schema: pa.Schema | None = None, *, on_schema_change: str | None = None) -> None:
        #: The declared columns (``format.schema``); None: those of the first file.
        self.declared = schema
        self.schema = schema
        #: What a file whose columns add to, lack or retype the run's lands (``drift``);
        #: None: the run's columns must all be in it, as they are.
        self.on_schema_change = on_schema_change

    def with_schema(self, schema: pa.Schema) -> ParquetFormat:
        """This format landing ``schema`` (the run's, fixed when it started)."""
        clone = copy.copy(self)
        clone.schema = schema
        return clone

    def columns_of(self, file_schema: pa.Schema, *, where: str) -> pa.Schema:
        """The columns landed from a file of ``file_schema`` (the declared ones, or all);
        ValueError naming the column that disagrees."""
        return conform(
            landed_schema_of(file_schema), self.declared, where=where, kind="Parquet", widen=widens_decimal
        )

    def check_file_schema(self, file_schema: pa.Schema, *, path: str) -> None:
        """ConfigError naming ``format.schema`` if a file's columns disagree with it."""
        try:
            self.columns_of(file_schema, where=path)
        except ValueError as exc:
            raise ConfigError("format.schema", str(exc)) from None

    def wanted_columns(self, file_schema: pa.Schema) -> list[str] | None:
        """The file's columns to read (the run's, by name whatever the case), or None for
        all of them: under a drift policy every column counts."""
        if self.on_schema_change is not None or self.schema is None:
            return None
        by_name = {name.lower(): name for name in file_schema.names}
        wanted = [by_name.get(name.lower()) for name in self.schema.names]
        return None if None in wanted else [name for name in wanted if name is not None]

    def file_table(
        self, table: pa.Table, *, path: str, row_positions: Offsets | None = None
    ) -> tuple[pa.Table, list[SchemaChange]]:
        """Rows read from a file as the run lands them, and the schema changes seen in them
        (``row_positions[i]``: where row ``i``'s row group starts). Without
        ``on_schema_change``, ReadError naming the file if it does not give the run's
        columns; with it, settled as CSV's are (``drift.settle``; ``SchemaDrift`` under fail)."""
        table = landed_table(table, path=path)
        if self.on_schema_change is None:
            try:
                landed = conform(
                    table.schema, self.known_schema, where=path, kind="Parquet", widen=widens_decimal
                )
            except ValueError as exc:
                raise ReadError(f"{path}: its Parquet schema does not fit the run's columns: {exc}") from None
            return select_columns(table, landed).cast(landed), []
        return settled(
            table, self.known_schema, self.on_schema_change, row_positions=row_positions, widen=widens_decimal
        )
