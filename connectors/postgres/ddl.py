"""The sink's table as PostgreSQL sees it: the type each output column is created with
(section 1's table read backwards: DECIMAL(p,s) -> numeric(p,s), TIMESTAMP -> timestamptz,
TIMESTAMP_NTZ -> timestamp, STRING -> text, BINARY -> bytea, ARRAY -> an array...), the check
of an output schema against an existing table, and the statements that create it.

The check runs before anything is written: a column of the output that the table lacks, a
column whose type cannot take the output's, or a NOT NULL column the output leaves empty is
refused as a ConfigError naming the column.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, LiteralString, cast

import psycopg
import pyarrow as pa
from psycopg import sql

from connectors.postgres.connection import LEDGER_TABLE, STAGING_PREFIX, TableName
from source_support.errors import ConfigError
from source_support.typed_arrow import fields_of, timestamp_zone


def own_table_refusal(table: TableName) -> str | None:
    """Why ``table`` is one of the sink's own (its ledger or a staging table), if it is."""
    if table.name == LEDGER_TABLE or table.name.startswith(STAGING_PREFIX):
        return f"{table.qualified!r} is a table the sink itself uses (its ledger or staging)"
    return None


def sibling(table: TableName, name: str) -> TableName:
    """A table of the sink's own in ``table``'s schema."""
    return TableName(table.schema, name)


def declared_type(arrow_type: pa.DataType) -> str:
    """The PostgreSQL type ``create = true`` gives a column of ``arrow_type``."""
    t = arrow_type
    if pa.types.is_int8(t) or pa.types.is_int16(t):
        return "smallint"
    if pa.types.is_int32(t):
        return "integer"
    if pa.types.is_int64(t):
        return "bigint"
    if pa.types.is_float32(t):
        return "real"
    if pa.types.is_floating(t):
        return "double precision"
    if pa.types.is_boolean(t):
        return "boolean"
    if pa.types.is_decimal(t):
        return f"numeric({t.precision},{t.scale})"  # pyright: ignore[reportAttributeAccessIssue]
    if pa.types.is_date(t):
        return "date"
    if pa.types.is_timestamp(t):
        return "timestamp" if timestamp_zone(t) is None else "timestamptz"
    if pa.types.is_time(t):
        return "time"
    if pa.types.is_duration(t):
        return "interval"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return "bytea"
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        element = declared_type(t.value_type)  # pyright: ignore[reportAttributeAccessIssue]
        return "jsonb" if element.endswith("]") or element == "jsonb" else f"{element}[]"
    if pa.types.is_struct(t) or pa.types.is_map(t):
        return "jsonb"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "text"
    if pa.types.is_unsigned_integer(t):
        return "bigint" if t.bit_width < 64 else "numeric(20,0)"
    raise ConfigError("sink.table", f"no PostgreSQL type is made for the output type {t}")


#: Which PostgreSQL type categories (``pg_type.typcategory``) take an output kind.
_TAKES = {
    "number": {"N"},
    "boolean": {"B"},
    "text": {"S", "U", "I", "E"},  # text, varchar, citext; uuid, json(b); inet; enums
    "binary": {"U"},  # bytea
    "datetime": {"D"},
    "interval": {"T"},
    "array": {"A"},
    "json": {"U"},
}


def _kind(t: pa.DataType) -> str:
    if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t):
        return "number"
    if pa.types.is_boolean(t):
        return "boolean"
    if pa.types.is_date(t) or pa.types.is_timestamp(t) or pa.types.is_time(t):
        return "datetime"
    if pa.types.is_duration(t):
        return "interval"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return "binary"
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return "array"
    if pa.types.is_struct(t) or pa.types.is_map(t):
        return "json"
    return "text"


@dataclass(frozen=True)
class TargetColumn:
    name: str
    #: As ``format_type`` writes it (``numeric(12,2)``, ``timestamp with time zone``).
    type: str
    category: str
    not_null: bool
    has_default: bool


def table_columns(conn: psycopg.Connection[Any], table: TableName) -> list[TargetColumn] | None:
    """The columns of ``table`` in order, or None when it does not exist."""
    found = conn.execute(
        "SELECT c.oid FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = %s AND c.relname = %s AND c.relkind IN ('r', 'p')",
        (table.schema, table.name),
    ).fetchone()
    if found is None:
        return None
    rows = conn.execute(
        "SELECT a.attname, format_type(a.atttypid, a.atttypmod), t.typcategory, a.attnotnull, "
        "a.atthasdef OR a.attidentity <> '' OR a.attgenerated <> '' "
        "FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid "
        "WHERE a.attrelid = %s AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum",
        (found[0],),
    ).fetchall()
    return [
        TargetColumn(name, type_, category, not_null, default)
        for name, type_, category, not_null, default in rows
    ]


def check_output(schema: pa.Schema, columns: list[TargetColumn], table: TableName) -> None:
    """Refuses (ConfigError naming the column) an output that ``table`` cannot take as it is."""
    by_name = {c.name: c for c in columns}
    for field in fields_of(schema):
        column = by_name.get(field.name)
        if column is None:
            raise ConfigError(
                "sink.table",
                f"column {field.name!r} of the output is not a column of {table} "
                f"({', '.join(by_name)}); nothing was written",
            )
        kind = _kind(field.type)
        if column.category not in _TAKES[kind]:
            raise ConfigError(
                "sink.table",
                f"column {field.name!r} of {table} is {column.type}, which cannot take the output's "
                f"{field.type} ({declared_type(field.type)}); nothing was written",
            )
    missing = [c.name for c in columns if c.not_null and not c.has_default and c.name not in schema.names]
    if missing:
        raise ConfigError(
            "sink.table",
            f"column {missing[0]!r} of {table} is NOT NULL without a default, and the output has no "
            "such column; nothing was written",
        )


def check_key(conn: psycopg.Connection[Any], table: TableName, key: list[str]) -> None:
    """Refuses an upsert ``key`` that no unique index or constraint of ``table`` covers
    exactly (``ON CONFLICT`` needs one)."""
    rows = conn.execute(
        "SELECT array_agg(a.attname::text ORDER BY a.attname) FROM pg_index i "
        "JOIN pg_class c ON c.oid = i.indrelid JOIN pg_namespace n ON n.oid = c.relnamespace "
        "JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = ANY(i.indkey) "
        "WHERE n.nspname = %s AND c.relname = %s AND i.indisunique AND i.indpred IS NULL "
        "GROUP BY i.indexrelid",
        (table.schema, table.name),
    ).fetchall()
    if sorted(key) not in [list(r[0]) for r in rows]:
        raise ConfigError(
            "sink.key",
            f"{table} has no primary key or unique index on ({', '.join(key)}), which an upsert needs",
        )


def create_statement(schema: pa.Schema, table: TableName, key: list[str]) -> sql.Composed:
    """``CREATE TABLE IF NOT EXISTS`` of ``table`` for ``schema`` (the key as primary key)."""
    parts = [
        sql.SQL("{} {}").format(sql.Identifier(f.name), type_sql(declared_type(f.type)))
        for f in fields_of(schema)
    ]
    if key:
        parts.append(sql.SQL("PRIMARY KEY ({})").format(sql.SQL(", ").join(map(sql.Identifier, key))))
    return sql.SQL("CREATE TABLE IF NOT EXISTS {} ({})").format(table.identifier, sql.SQL(", ").join(parts))


def type_sql(type_name: str) -> sql.SQL:
    """A type name made here or read from the catalog (never a user's text) as SQL."""
    return sql.SQL(cast(LiteralString, type_name))
