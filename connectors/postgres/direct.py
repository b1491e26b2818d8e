"""The sink's direct path: an ``append`` or ``replace`` of landed rows copied straight into
the target, in the one transaction that also records the ledger, when the target's columns
have the very types the rows are sent in (so the staging table and its ``INSERT ... SELECT``
would only have written every row twice).

One transaction on one connection: the target's advisory lock (as ``ledger.move`` takes),
``create``'s table, the ledger check, ``replace``'s ``DELETE``, one binary ``COPY`` of the
rows, then the caller's fence. The fence's ``swap`` records the key in the ledger and
commits, before the fence's own transaction commits (as ``move`` does): a fenced-out attempt
rolls back, a crash before the commit leaves nothing (the server rolls back a session whose
client is gone), and an attempt that finds its key in the ledger writes nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from contextlib import suppress
from typing import Any

import psycopg
import pyarrow as pa
from psycopg import sql

from connectors.postgres.binary_copy import copy_stream
from connectors.postgres.connection import TableName
from connectors.postgres.ddl import create_statement, table_columns
from connectors.postgres.ledger import CommitKey, Mode, committed, lock_target, record, staged_type
from source_support.registry import Publish
from source_support.typed_arrow import fields_of

log = logging.getLogger("connectors.postgres")

#: ``format_type``'s names of the wire types whose short names differ.
_CATALOG_NAMES = {"timestamp": "timestamp without time zone", "timestamptz": "timestamp with time zone"}


def takes_as_sent(columns: dict[str, str], schema: pa.Schema) -> bool:
    """Whether each output column has a target column (``columns``: name -> ``format_type``)
    of exactly the type it is sent in (and staged in: ``ledger.staged_type``)."""
    return all(
        columns.get(f.name) == _CATALOG_NAMES.get(staged_type(f.type), staged_type(f.type))
        for f in fields_of(schema)
    )


def publish_direct(
    conn: psycopg.Connection[Any],
    target: TableName,
    schema: pa.Schema,
    batches: Callable[[], Iterable[pa.RecordBatch]],
    *,
    mode: Mode,
    create: bool,
    commit_key: CommitKey,
    rows_if_committed: Callable[[], int],
    publish: Publish,
    before_fence: Callable[[], None],
) -> bool | None:
    """Copies ``batches()`` into ``target`` and lets ``publish`` commit them with the ledger
    row; whether it published, or None (nothing done) when the target's columns are not of
    the types the rows are sent in, so the caller stages them. When the ledger holds
    ``commit_key`` already nothing is copied, and ``publish`` is asked with the rows the
    attempt would have written (``rows_if_committed()``) and a ``swap`` that does nothing, as
    ``move`` would find it. ``before_fence`` runs between the COPY and the fence."""
    assert mode in ("append", "replace"), mode  # an upsert is staged: DISTINCT ON, ON CONFLICT
    conn.autocommit = False
    try:
        conn.execute("SET LOCAL timezone = 'UTC'")
        lock_target(conn, target)
        if create:
            conn.execute(create_statement(schema, target, []))
        if committed(conn, target, commit_key):
            log.info("%s: %s is in the ledger already; nothing copied", target, commit_key)
            conn.rollback()
            return publish(rows_if_committed(), lambda: None)
        columns = {c.name: c.type for c in table_columns(conn, target) or []}
        if not takes_as_sent(columns, schema):
            log.info("%s: its columns' types differ from the output's; the rows are staged", target)
            conn.rollback()
            return None
        if mode == "replace":
            conn.execute(sql.SQL("DELETE FROM {}").format(target.identifier))
        names = sql.SQL(", ").join(map(sql.Identifier, schema.names))
        cursor = conn.cursor()
        with cursor.copy(
            sql.SQL("COPY {} ({}) FROM STDIN (FORMAT binary)").format(target.identifier, names)
        ) as copy:
            for chunk in copy_stream(batches()):
                copy.write(chunk)
        rows = cursor.rowcount
        before_fence()
        swapped = False

        def swap() -> None:
            nonlocal swapped
            record(conn, target, commit_key, rows)
            conn.commit()
            swapped = True

        published = publish(rows, swap)
        if not swapped:
            conn.rollback()
        return published
    finally:
        with suppress(psycopg.Error):  # a connection that broke is closed by the caller
            conn.rollback()  # whatever is left (a fence that raised): nothing of it is kept
            conn.autocommit = True
