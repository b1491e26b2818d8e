"""The sink's exactly-once commit: an attempt's rows wait in a staging table of its own, and
one transaction moves them into the target and records the run's (or the stream epoch's) key
in the ledger table, ``<schema>.adf_sink_ledger``; an attempt that finds its key there moves
nothing.

Staging tables are ``<schema>.adf_staging_<run>_<attempt>_<unix time>`` (UNLOGGED: a crash of
the server empties them, which only costs a retry). Each is dropped when its attempt ends;
after a publish, those of the run's other attempts too, and any older than a day (a worker
killed before it could drop its own). Concurrent movers into one target are serialized by
a transaction-scoped advisory lock on the target's name (``lock_target``), which the direct
path (``direct``: landed rows copied into the target itself, in the transaction that
records their key with ``record``) takes too.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

import psycopg
import pyarrow as pa
from psycopg import errors, sql

from connectors.postgres.binary_copy import copy_stream, wire_type
from connectors.postgres.connection import LEDGER_TABLE, STAGING_PREFIX, TableName
from connectors.postgres.ddl import create_statement, declared_type, sibling, table_columns, type_sql
from source_support.typed_arrow import fields_of

log = logging.getLogger("connectors.postgres")

#: The staging table's first column: where each row came from, in order (the part, i.e. a
#: Spark partition or a landed file, times 2**40, plus the row's index in it). An upsert
#: keeps the last row of a key; a retried part replaces its earlier rows.
ORDER_COLUMN = "_adf_order"
PART_SPAN = 1 << 40
#: Staging tables older than this are a dead attempt's, dropped by the next publish.
STALE_STAGING_S = 86_400
#: Ledger rows older than this are forgotten (a run's attempts retry within minutes).
LEDGER_KEEP_DAYS = 30

Mode = Literal["replace", "append", "upsert"]


def _digest(text: str, size: int) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:size]


@dataclass(frozen=True)
class CommitKey:
    """What the ledger records for a publish: ``run:<run>`` with 0 for a bounded run, or
    ``stream:<run>`` with the epoch's number (epochs commit in order, so an epoch at or below
    the recorded one is done)."""

    stream: str
    seq: int

    @classmethod
    def of_attempt(cls, attempt_key: str) -> CommitKey:
        return cls(f"run:{attempt_key.rsplit('-', 1)[0]}", 0)

    @classmethod
    def of_epoch(cls, epoch_key: str) -> CommitKey:
        run, _, number = epoch_key.rpartition("-")
        if run and number.isdigit():
            return cls(f"stream:{run}", int(number))
        return cls(f"epoch:{epoch_key}", 0)

    @property
    def run_digest(self) -> str:
        """The part of staging names shared by every attempt of the run."""
        return _digest(self.stream, 12)


def staged_type(arrow_type: pa.DataType) -> str:
    """The type a column of ``arrow_type`` has in a staging table: its wire type, a decimal
    with its precision and scale (``numeric(12,2)``; a negative scale, which only
    PostgreSQL 15 takes, stays ``numeric``), so that moving it into a column of that type
    takes no coercion of each value."""
    wire = wire_type(arrow_type)
    scale: int = getattr(arrow_type, "scale", 0)  # a decimal's; the stubs type no scale
    return declared_type(arrow_type) if wire == "numeric" and scale >= 0 else wire


@dataclass(frozen=True)
class Staging:
    """One attempt's staging table and the output schema it holds."""

    table: TableName
    schema: pa.Schema

    @staticmethod
    def name_prefix(key: CommitKey, attempt: str) -> str:
        """The name of an attempt's staging table but for its time."""
        return f"{STAGING_PREFIX}{key.run_digest}_{_digest(attempt, 8)}_"

    @classmethod
    def create(
        cls, conn: psycopg.Connection[Any], target: TableName, schema: pa.Schema, key: CommitKey, attempt: str
    ) -> Staging:
        name = f"{cls.name_prefix(key, attempt)}{int(time.time())}"
        staging = cls(sibling(target, name), schema)
        columns = [sql.SQL("{} bigint").format(sql.Identifier(ORDER_COLUMN))] + [
            sql.SQL("{} {}").format(sql.Identifier(f.name), type_sql(staged_type(f.type)))
            for f in fields_of(schema)
        ]
        with conn.transaction():
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(staging.table.identifier))
            conn.execute(
                sql.SQL("CREATE UNLOGGED TABLE {} ({})").format(
                    staging.table.identifier, sql.SQL(", ").join(columns)
                )
            )
        return staging

    def copy_part(self, conn: psycopg.Connection[Any], part: int, batches: Iterable[pa.RecordBatch]) -> int:
        """Copies ``batches`` into the staging table as part ``part``, in one transaction
        that first removes what an earlier try of the same part left (a retried Spark task);
        returns the rows copied."""
        rows = 0

        def ordered() -> Iterable[pa.RecordBatch]:
            nonlocal rows
            for batch in batches:
                order = pa.array(
                    range(part * PART_SPAN + rows, part * PART_SPAN + rows + batch.num_rows), pa.int64()
                )
                rows += batch.num_rows
                columns: list[pa.Array[Any]] = [order, *(batch.column(i) for i in range(batch.num_columns))]
                yield pa.record_batch(columns, names=[ORDER_COLUMN, *batch.schema.names])

        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, %s))", (str(self.table), part))
            conn.execute(
                sql.SQL("DELETE FROM {} WHERE {} >= %s AND {} < %s").format(
                    self.table.identifier, sql.Identifier(ORDER_COLUMN), sql.Identifier(ORDER_COLUMN)
                ),
                (part * PART_SPAN, (part + 1) * PART_SPAN),
            )
            with conn.cursor().copy(
                sql.SQL("COPY {} FROM STDIN (FORMAT binary)").format(self.table.identifier)
            ) as copy:
                for chunk in copy_stream(ordered()):
                    copy.write(chunk)
        return rows

    def count(self, conn: psycopg.Connection[Any]) -> int:
        row = conn.execute(sql.SQL("SELECT count(*) FROM {}").format(self.table.identifier)).fetchone()
        return int(row[0]) if row else 0

    def drop(self, conn: psycopg.Connection[Any]) -> None:
        drop_quietly(conn, self.table)


def staged_bytes(conn: psycopg.Connection[Any], target: TableName, key: CommitKey, attempt: str) -> int:
    """The bytes the staging tables of ``attempt`` hold now."""
    row = conn.execute(
        "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
        "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relname LIKE %s",
        (target.schema, Staging.name_prefix(key, attempt).replace("_", r"\_") + "%"),
    ).fetchone()
    return int(row[0]) if row else 0


def ensure_ledger(conn: psycopg.Connection[Any], target: TableName) -> None:
    """Creates the ledger of ``target``'s schema if it is missing."""
    conn.execute(
        sql.SQL(
            "CREATE TABLE IF NOT EXISTS {} (target text NOT NULL, stream text NOT NULL, seq bigint NOT NULL, "
            "rows bigint NOT NULL, committed_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (target, stream))"
        ).format(sibling(target, LEDGER_TABLE).identifier)
    )


def committed(conn: psycopg.Connection[Any], target: TableName, key: CommitKey) -> bool:
    """Whether the ledger holds ``key`` (or a later epoch of its stream) for ``target``."""
    row = conn.execute(
        sql.SQL("SELECT seq FROM {} WHERE target = %s AND stream = %s FOR UPDATE").format(
            sibling(target, LEDGER_TABLE).identifier
        ),
        (str(target), key.stream),
    ).fetchone()
    return row is not None and int(row[0]) >= key.seq


def move(
    conn: psycopg.Connection[Any],
    staging: Staging,
    target: TableName,
    *,
    mode: Mode,
    key: list[str],
    create: bool,
    commit_key: CommitKey,
    staged_rows: int | None = None,
) -> bool:
    """In one transaction: the staged rows into ``target`` (``replace``: instead of its rows;
    ``upsert``: the last staged row of each key inserted or updated) and ``commit_key`` into
    the ledger with the staged rows' count (``staged_rows``, when the caller counted them
    already after the last COPY); False (nothing moved) when the ledger already holds the key."""
    with conn.transaction():
        conn.execute("SET LOCAL timezone = 'UTC'")
        lock_target(conn, target)
        if create:
            conn.execute(create_statement(staging.schema, target, key if mode == "upsert" else []))
        if committed(conn, target, commit_key):
            log.info("%s: %s is in the ledger already; nothing moved", target, commit_key)
            return False
        types = {c.name: c.type for c in table_columns(conn, target) or []}
        staged = {c.name: c.type for c in table_columns(conn, staging.table) or []}
        names = staging.schema.names
        columns = sql.SQL(", ").join(map(sql.Identifier, names))

        def value(name: str) -> sql.Composable:
            """A staged column as the target's type: cast only where the types differ."""
            if staged.get(name) == types[name]:
                return sql.Identifier(name)
            return sql.SQL("{}::{}").format(sql.Identifier(name), type_sql(types[name]))

        values = sql.SQL(", ").join(value(n) for n in names)
        if mode == "replace":
            conn.execute(sql.SQL("DELETE FROM {}").format(target.identifier))
        if mode == "upsert":
            keys = sql.SQL(", ").join(map(sql.Identifier, key))
            rest = [n for n in names if n not in key]
            action = (
                sql.SQL("DO UPDATE SET {}").format(
                    sql.SQL(", ").join(sql.SQL("{0} = EXCLUDED.{0}").format(sql.Identifier(n)) for n in rest)
                )
                if rest
                else sql.SQL("DO NOTHING")
            )
            statement = sql.SQL(
                "INSERT INTO {target} ({columns}) SELECT {columns} FROM (SELECT DISTINCT ON ({keys}) {values} "
                "FROM {staging} ORDER BY {keys}, {order} DESC) AS latest ON CONFLICT ({keys}) {action}"
            ).format(
                target=target.identifier,
                columns=columns,
                keys=keys,
                values=sql.SQL(", ").join(
                    sql.SQL("{} AS {}").format(value(n), sql.Identifier(n)) for n in names
                ),
                staging=staging.table.identifier,
                order=sql.Identifier(ORDER_COLUMN),
                action=action,
            )
        else:
            statement = sql.SQL("INSERT INTO {} ({}) SELECT {} FROM {}").format(
                target.identifier, columns, values, staging.table.identifier
            )
        conn.execute(statement)
        record(conn, target, commit_key, staging.count(conn) if staged_rows is None else staged_rows)
    return True


def lock_target(conn: psycopg.Connection[Any], target: TableName) -> None:
    """Serializes, until the transaction ends, every writer of ``target``'s rows and ledger."""
    conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (str(target),))


def record(conn: psycopg.Connection[Any], target: TableName, commit_key: CommitKey, rows: int) -> None:
    """Records ``commit_key`` (with the rows it wrote) in the ledger, in the caller's
    transaction, and forgets ledger rows past ``LEDGER_KEEP_DAYS``."""
    ledger = sibling(target, LEDGER_TABLE).identifier
    conn.execute(
        sql.SQL(
            "INSERT INTO {} (target, stream, seq, rows) VALUES (%s, %s, %s, %s) ON CONFLICT (target, stream) "
            "DO UPDATE SET seq = EXCLUDED.seq, rows = EXCLUDED.rows, committed_at = now()"
        ).format(ledger),
        (str(target), commit_key.stream, commit_key.seq, rows),
    )
    conn.execute(
        sql.SQL("DELETE FROM {} WHERE committed_at < now() - make_interval(days => %s)").format(ledger),
        (LEDGER_KEEP_DAYS,),
    )


def sweep_staging(conn: psycopg.Connection[Any], target: TableName, key: CommitKey) -> None:
    """Drops the staging tables of the run's other attempts, and any older than a day."""
    names = conn.execute(
        "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = %s AND c.relkind = 'r' AND c.relname LIKE %s",
        (target.schema, STAGING_PREFIX.replace("_", r"\_") + "%"),
    ).fetchall()
    now = int(time.time())
    for (name,) in names:
        stamp = name.rsplit("_", 1)[-1]
        stale = stamp.isdigit() and now - int(stamp) > STALE_STAGING_S
        if name.startswith(f"{STAGING_PREFIX}{key.run_digest}_") or stale:
            drop_quietly(conn, sibling(target, name))


def drop_quietly(conn: psycopg.Connection[Any], table: TableName) -> None:
    """Drops ``table`` unless another session holds it (a stale attempt still copying):
    the next sweep takes it."""
    try:
        with conn.transaction():
            conn.execute("SET LOCAL lock_timeout = '2s'")
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(table.identifier))
    except (errors.LockNotAvailable, errors.QueryCanceled):
        log.info("staging table %s is in use; left for the next sweep", table)
