"""PostgreSQL restarted while a chunk is read (a private cluster): the exported snapshot dies
with its holder's session, the chunk goes on after its last landed key at a snapshot of its
own, says so on the split, and no row is lost or read twice."""

from __future__ import annotations

from collections import Counter

from connectors.postgres.connection import TableName
from connectors.postgres.reader import LOST_SNAPSHOT_NOTE
from connectors.postgres.source import PostgresSource
from source_support.testing import SourceHarness

ROWS = 600


def test_a_restart_mid_chunk_loses_no_row_and_names_the_lost_snapshot(private_postgres):
    with private_postgres.connect() as conn:
        conn.execute("DROP TABLE IF EXISTS mid")
        conn.execute("CREATE TABLE mid (id bigint PRIMARY KEY, text text)")
        conn.execute("INSERT INTO mid SELECT g, 'r' || g FROM generate_series(1, %s) g", (ROWS,))
        conn.execute("ANALYZE mid")
    source = PostgresSource(
        url=private_postgres.url, table=TableName("public", "mid"), chunk_rows=200, batch_size=10
    )
    harness = SourceHarness(source, readers=1)
    harness.read(0, batches=3)

    private_postgres.stop()
    private_postgres.start()
    harness.run()

    ids = Counter(record["id"] for record in harness.records())
    assert ids == Counter(range(1, ROWS + 1)), "every row once"
    notes = {split_id: split.note for split_id, split in harness.store.state.splits.items() if split.note}
    assert notes and set(notes.values()) == {LOST_SNAPSHOT_NOTE}, notes
