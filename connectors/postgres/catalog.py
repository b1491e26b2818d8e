"""What the source asks PostgreSQL's catalog: a result's columns and types, a table's
primary key and indexes, and the cut of a table into chunks (``plan_chunks``)."""

from __future__ import annotations

import math

import psycopg
from psycopg import sql

from connectors.postgres.connection import TableName
from connectors.postgres.enumerator import ChunkPlan
from connectors.postgres.types import INTEGER_TYPES, TYPES_QUERY, PgColumn, numeric_modifier

#: A key range wider than this is cut by ctid instead (positions must fit in a bigint).
MAX_KEY_SPAN = 2**62
#: The column the reader appends to every SELECT: the row's key or encoded ctid.
POSITION_COLUMN = "_adf_position"


def relation(conn: psycopg.Connection, table: TableName) -> int | None:
    """The table's oid, None when it does not exist (or cannot be seen)."""
    name = table.identifier.as_string(conn)
    row = conn.execute("SELECT to_regclass(%s)::oid", (name,)).fetchone()
    return row[0] if row and row[0] is not None else None


def describe(conn: psycopg.Connection, select: sql.Composable) -> list[PgColumn]:
    """The columns of ``select`` (run with LIMIT 0), each with its PostgreSQL type."""
    query = sql.SQL("SELECT * FROM ({}) AS q LIMIT 0").format(select)
    with conn.cursor() as cur:
        cur.execute(query)
        description = list(cur.description or [])
        oids = sorted({column.type_code for column in description})
        names = {oid: (typname, element) for oid, typname, element in cur.execute(TYPES_QUERY, (oids,))}
    columns: list[PgColumn] = []
    for column in description:
        typname, element = names.get(column.type_code, ("text", None))
        precision, scale = (None, None)
        if (element or typname) == "numeric":
            precision, scale = column.precision, column.scale
            if precision is None:
                precision, scale = numeric_modifier(None)
        columns.append(PgColumn(column.name, typname, element, precision, scale))
    return columns


def primary_key(conn: psycopg.Connection, oid: int) -> tuple[str, str] | None:
    """(column, type name) of the table's primary key when it is one column."""
    rows = conn.execute(
        """
        SELECT a.attname, t.typname FROM pg_catalog.pg_index i
        JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
        JOIN pg_catalog.pg_type t ON t.oid = a.atttypid
        WHERE i.indrelid = %s AND i.indisprimary AND i.indnatts = 1
        """,
        (oid,),
    ).fetchall()
    return (rows[0][0], rows[0][1]) if rows else None


def key_column(conn: psycopg.Connection, oid: int, name: str) -> tuple[str, bool] | None:
    """(type name, whether an index starts with it) of column ``name``; None if absent."""
    row = conn.execute(
        """
        SELECT t.typname, EXISTS (
            SELECT 1 FROM pg_catalog.pg_index i WHERE i.indrelid = a.attrelid AND i.indkey[0] = a.attnum
        )
        FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_type t ON t.oid = a.atttypid
        WHERE a.attrelid = %s AND a.attname = %s AND a.attnum > 0 AND NOT a.attisdropped
        """,
        (oid, name),
    ).fetchone()
    return (row[0], row[1]) if row else None


def row_estimate(conn: psycopg.Connection, table: TableName, oid: int) -> int:
    """The planner's row count of the table; counted when it was never analyzed."""
    row = conn.execute("SELECT reltuples::bigint FROM pg_catalog.pg_class WHERE oid = %s", (oid,)).fetchone()
    if row and row[0] and row[0] > 0:
        return int(row[0])
    counted = conn.execute(sql.SQL("SELECT count(*) FROM {}").format(table.identifier)).fetchone()
    return int(counted[0]) if counted else 0


def plan_chunks(
    conn: psycopg.Connection,
    table: TableName,
    oid: int,
    *,
    key: str | None,
    chunk_rows: int,
    snapshot: str | None,
) -> ChunkPlan:
    """The cut of ``table`` (see ``connectors.postgres.enumerator``), by ``key`` (an integer
    column) when given, else by ctid pages."""
    rows = row_estimate(conn, table, oid)
    if key is not None:
        bounds = conn.execute(
            sql.SQL("SELECT min({k})::int8, max({k})::int8 FROM {t}").format(
                k=sql.Identifier(key), t=table.identifier
            )
        ).fetchone()
        low, high = bounds if bounds else (None, None)
        if low is None or high is None:
            return ChunkPlan("key", 0, 1, 1, 0, snapshot)
        span = high - low + 1
        if span <= MAX_KEY_SPAN:
            step = max(1, math.ceil(span * chunk_rows / max(rows, 1)))
            count = max(1, math.ceil(span / step))
            return ChunkPlan("key", low, step, count, min(chunk_rows, rows), snapshot)
    size = conn.execute("SELECT pg_relation_size(%s), current_setting('block_size')::int8", (oid,)).fetchone()
    pages = max(1, (size[0] // size[1]) if size else 1)
    per_page = max(1.0, rows / pages)
    step = max(1, math.ceil(chunk_rows / per_page))
    count = max(1, math.ceil(pages / step))
    return ChunkPlan("ctid", 0, step, count, min(chunk_rows, rows), snapshot)


def chunk_key(conn: psycopg.Connection, oid: int, key: str | None, field: str) -> str | None:
    """The column chunks are cut by: ``key`` when given (an indexed integer column, else a
    ``ValueError`` saying why), else the primary key when it is one integer column, else
    None (ctid ranges)."""
    if key is not None:
        found = key_column(conn, oid, key)
        if found is None:
            raise ValueError(f"the table has no column {key!r}")
        type_name, indexed = found
        if type_name not in INTEGER_TYPES:
            raise ValueError(
                f"{key!r} is {type_name}: a chunk key is an integer column (or leave {field} out)"
            )
        if not indexed:
            raise ValueError(f"no index starts with {key!r}: each chunk would scan the whole table")
        return key
    pk = primary_key(conn, oid)
    return pk[0] if pk is not None and pk[1] in INTEGER_TYPES else None
