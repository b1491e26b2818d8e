"""What the cdc tests share: a writer of changes at a paced rate, the table the change rows
give, the table as psycopg reads it, and a Parquet sink's files as one table."""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa
import pyarrow.parquet as pq
from psycopg import sql

from tests.postgres_server import PrivatePostgres


def apply(records: list[dict[str, Any]]) -> dict[int, tuple[str, Any]]:
    """The table the change rows give, applied in (``_lsn``, ``_seq``) order."""
    rows: dict[int, tuple[str, Any]] = {}
    for record in sorted(records, key=lambda r: (r["_lsn"], r["_seq"])):
        if record["_op"] == "d":
            rows.pop(record["id"], None)
        elif record["_op"] == "t":
            rows.clear()
        else:
            rows[record["id"]] = (record["v"], record["n"])
    return rows


def table_rows(server: PrivatePostgres, name: str) -> dict[int, tuple[str, Any]]:
    with server.connect() as conn:
        found = conn.execute(sql.SQL("SELECT id, v, n FROM {}").format(sql.Identifier(name))).fetchall()
    return {row[0]: (row[1], row[2]) for row in found}


class Writer(threading.Thread):
    """Inserts, updates and deletes at ``rate`` changes a second, ``per_transaction`` to a
    transaction (PostgreSQL commits a few hundred one-change transactions a second here:
    each waits for its WAL flush); goes on through a restart of the server (a failed
    transaction is not counted: it did not commit)."""

    def __init__(
        self, server: PrivatePostgres, name: str, rate: float = 2_000, per_transaction: int = 20
    ) -> None:
        super().__init__(daemon=True)
        self.server, self.name = server, name
        self.rate, self.per_transaction = rate, per_transaction
        self.stop = threading.Event()
        self.done = 0
        self.rng = random.Random(7)

    def run(self) -> None:
        table = sql.Identifier(self.name)
        insert = sql.SQL("INSERT INTO {} VALUES (%s, %s, %s)").format(table)
        update = sql.SQL("UPDATE {} SET v = v || 'u', n = n + 1 WHERE id = %s").format(table)
        delete = sql.SQL("DELETE FROM {} WHERE id = %s").format(table)
        next_id = 1000
        conn: psycopg.Connection | None = None
        started = time.monotonic()
        while not self.stop.is_set():
            try:
                if conn is None:
                    conn = self.server.connect()
                first_id = next_id
                with conn.transaction():
                    for _ in range(self.per_transaction):
                        op = self.rng.random()
                        if op < 0.4:
                            conn.execute(insert, (next_id, "new", 1.25))
                            next_id += 1
                        elif op < 0.8:
                            conn.execute(update, (self.rng.randint(1, next_id),))
                        else:
                            conn.execute(delete, (self.rng.randint(1, next_id),))
                self.done += self.per_transaction
            except psycopg.OperationalError:
                next_id = first_id + self.per_transaction  # never an id the lost transaction may have used
                conn = None
                time.sleep(0.05)
                continue
            behind = started + self.done / self.rate - time.monotonic()
            if behind > 0:
                time.sleep(behind)


def run_sql(server: PrivatePostgres, name: str, *statements: str) -> None:
    """Each statement on its own transaction, ``{}`` standing for the table."""
    with server.connect() as conn:
        for statement in statements:
            conn.execute(sql.SQL(statement).format(sql.Identifier(name)))  # pyright: ignore[reportArgumentType]


def sink_table(path: Path) -> pa.Table:
    """The Parquet sink's files as one table, their schemas merged (as Spark's mergeSchema
    reads them): an epoch written before a column was added has no such column."""
    files = sorted(path.glob("*.parquet"))
    if not files:
        return pa.table({})
    return pa.concat_tables([pq.read_table(f) for f in files], promote_options="default")
