"""A table without a usable key is cut into ctid page ranges (PeerDB): every row once, and
a chunk resumed after its last landed row."""

from __future__ import annotations

from collections import Counter

import psycopg
from psycopg import sql

from connectors.postgres.connection import TableName
from connectors.postgres.source import PostgresSource
from source_support.testing import SourceHarness

ROWS = 3000


def test_a_table_without_a_key_is_read_in_ctid_chunks_each_row_once(pg_url, schema):
    table = TableName(schema, "events")
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE TABLE {} (name text, n int)").format(table.identifier))
        conn.execute(
            sql.SQL("INSERT INTO {} SELECT 'e' || g, g FROM generate_series(1, %s) g").format(
                table.identifier
            ),
            (ROWS,),
        )
        conn.execute(sql.SQL("ANALYZE {}").format(table.identifier))
    source = PostgresSource(url=pg_url, table=table, chunk_rows=500, batch_size=70)
    harness = SourceHarness(source, readers=2)
    harness.read(0, batches=3)
    harness.kill_reader(0)  # its uncommitted batches are read again by another, once

    harness.run()

    assert Counter(r["n"] for r in harness.records()) == Counter(range(1, ROWS + 1))
    splits = harness.store.state.splits
    assert len(splits) > 2 and all(s.payload["kind"] == "ctid" for s in splits.values())
