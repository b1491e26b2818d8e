"""The cdc mode on a private cluster with ``wal_level = logical`` (the machine's shared server
runs ``replica``): ``tests.postgres_server.PrivatePostgres(logical=True)``, one per module,
which a test may stop and start. Readers run in a ``SourceHarness``; a killed reader is
``kill_reader`` (its lease lapses, its splits go back at their checkpoints)."""

from __future__ import annotations

import contextlib
import random
import shutil
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from connectors.postgres import snapshot
from connectors.postgres.cdc import drop_slot
from connectors.postgres.connection import TableName
from connectors.postgres.pgoutput import parse_lsn
from connectors.postgres.source import PostgresSource
from connectors.postgres.split import STREAM_SPLIT_ID
from dataflow.services.flows import flow_create, flow_delete, flow_start
from source_support.errors import ConfigError
from source_support.testing import SourceHarness
from tests.factories import UserFactory
from tests.postgres_server import PrivatePostgres

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def logical_postgres() -> Iterator[PrivatePostgres]:
    server = PrivatePostgres(Path(tempfile.mkdtemp(prefix="adf-pg-")), logical=True)
    server.init()
    server.start()
    yield server
    snapshot.release_all()
    with contextlib.suppress(subprocess.CalledProcessError):
        server.stop()
    shutil.rmtree(server.dir, ignore_errors=True)


@pytest.fixture()
def table(logical_postgres: PrivatePostgres) -> Iterator[str]:
    """A table of the test's own with 300 rows, and the slot's name for it (dropped after)."""
    name = f"t_{uuid.uuid4().hex[:10]}"
    with logical_postgres.connect() as conn:
        conn.execute(
            sql.SQL("CREATE TABLE {} (id int PRIMARY KEY, v text, n numeric(8,2))").format(
                sql.Identifier(name)
            )
        )
        conn.execute(
            sql.SQL("INSERT INTO {} SELECT g, 'r' || g, g / 4.0 FROM generate_series(1, 300) g").format(
                sql.Identifier(name)
            )
        )
        conn.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(name)))
    yield name
    snapshot.release_all()
    with contextlib.suppress(Exception):
        drop_slot(logical_postgres.url, name)


def cdc_source(server: PrivatePostgres, name: str, **options: Any) -> PostgresSource:
    return PostgresSource(
        url=server.url,
        table=TableName("public", name),
        chunk_rows=100,
        batch_size=50,
        slot=name,
        **options,
    )


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
    """Inserts, updates and deletes, one per transaction, every few milliseconds; goes on
    through a restart of the server (a failed statement is not counted: it did not commit)."""

    def __init__(self, server: PrivatePostgres, name: str) -> None:
        super().__init__(daemon=True)
        self.server, self.name = server, name
        self.stop = threading.Event()
        self.done = 0
        self.rng = random.Random(7)

    def run(self) -> None:
        table = sql.Identifier(self.name)
        next_id = 1000
        conn: psycopg.Connection | None = None
        while not self.stop.is_set():
            try:
                if conn is None:
                    conn = self.server.connect()
                op = self.rng.random()
                if op < 0.4:
                    conn.execute(
                        sql.SQL("INSERT INTO {} VALUES (%s, %s, %s)").format(table), (next_id, "new", 1.25)
                    )
                    next_id += 1
                elif op < 0.8:
                    conn.execute(
                        sql.SQL("UPDATE {} SET v = v || 'u', n = n + 1 WHERE id = %s").format(table),
                        (self.rng.randint(1, next_id),),
                    )
                else:
                    conn.execute(
                        sql.SQL("DELETE FROM {} WHERE id = %s").format(table), (self.rng.randint(1, next_id),)
                    )
                self.done += 1
            except psycopg.OperationalError:
                conn = None
                time.sleep(0.05)
            time.sleep(0.003)


def snapshot_read(harness: SourceHarness[Any]) -> bool:
    """Every chunk read to its end, and the change stream assigned."""
    splits = harness.store.state.splits
    chunks = [split for split_id, split in splits.items() if split_id != STREAM_SPLIT_ID]
    return STREAM_SPLIT_ID in splits and bool(chunks) and all(split.finished for split in chunks)


def confirmed(server: PrivatePostgres, slot: str) -> int:
    with server.connect() as conn:
        row = conn.execute(
            "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s", (slot,)
        ).fetchone()
    assert row is not None, f"slot {slot} is gone"
    return parse_lsn(row[0])


def test_snapshot_and_changes_give_the_final_table_through_a_kill_and_a_restart(
    logical_postgres: PrivatePostgres, table: str
) -> None:
    source = cdc_source(logical_postgres, table)
    harness = SourceHarness(source, readers=2)
    writer = Writer(logical_postgres, table)
    writer.start()
    try:
        harness.run(until=lambda h: len(h.records()) >= 300 and writer.done >= 100)
        harness.kill_reader(0)
        harness.run(rounds=5)
        logical_postgres.stop()
        harness.run(rounds=3)  # the database is away: the stream waits
        logical_postgres.start()
        harness.run(until=lambda h: writer.done >= 600)
    finally:
        writer.stop.set()
        writer.join()
    final = table_rows(logical_postgres, table)
    harness.run(until=lambda h: apply(h.records()) == final)

    records = harness.records()
    snapshot_ids = [r["id"] for r in records if r["_op"] == "r"]
    assert sorted(snapshot_ids) == list(range(1, 301)), "every row of the snapshot once"
    changes = [(r["_lsn"], r["_seq"]) for r in records if r["_op"] != "r"]
    assert len(changes) == len(set(changes)), "no change twice"
    assert len(changes) >= writer.done * 0.5  # updates and deletes of missing ids change nothing
    assert apply(records) == final
    assert harness.failures == [], "the restart was waited for, not a failed reader"
    assert confirmed(logical_postgres, table) > min(r["_lsn"] for r in records), "the slot was confirmed"


def test_the_slot_is_confirmed_only_up_to_the_checkpoint(
    logical_postgres: PrivatePostgres, table: str
) -> None:
    source = cdc_source(logical_postgres, table)
    harness = SourceHarness(source, readers=1)
    harness.run(until=snapshot_read)

    def insert(ids: range) -> None:
        with logical_postgres.connect() as conn:
            for i in ids:
                conn.execute(
                    sql.SQL("INSERT INTO {} VALUES (%s, 'x', 1)").format(sql.Identifier(table)), (i,)
                )

    caught_up = harness.lags()[STREAM_SPLIT_ID]
    insert(range(5000, 5005))
    lag = harness.lags()[STREAM_SPLIT_ID]
    assert caught_up is not None and lag is not None and lag > caught_up, "the stream's lag in WAL bytes"
    start = confirmed(logical_postgres, table)
    first = harness.read(0, batches=1, commit=False)
    assert [r["id"] for r in first[0].records] == list(range(5000, 5005))
    assert confirmed(logical_postgres, table) == start, "nothing confirmed before the commit"
    insert(range(5005, 5010))
    second = harness.read(0, batches=1, commit=False)  # a new peek, from the unconfirmed point
    assert [r["id"] for r in second[0].records] == list(range(5005, 5010)), "what was read is not read again"
    harness.kill_reader(0)  # nothing was committed: all of it comes again
    harness.add_reader(0)
    harness.run(until=lambda h: len([r for r in h.records() if r["_op"] == "c"]) >= 10)
    harness.run(rounds=5)
    inserted = [r["id"] for r in harness.records() if r["_op"] == "c"]
    assert inserted == list(range(5000, 5010))
    assert confirmed(logical_postgres, table) > start


def test_a_column_added_fails_the_run_naming_it_and_the_lsn(
    logical_postgres: PrivatePostgres, table: str
) -> None:
    harness = SourceHarness(cdc_source(logical_postgres, table), readers=1)
    harness.run(until=snapshot_read)
    with logical_postgres.connect() as conn:
        conn.execute(sql.SQL("ALTER TABLE {} ADD COLUMN extra text").format(sql.Identifier(table)))
        conn.execute(sql.SQL("INSERT INTO {} VALUES (9000, 'x', 1, 'e')").format(sql.Identifier(table)))
    harness.run(until=lambda h: h.store.state.splits[STREAM_SPLIT_ID].failed != "")
    failed = harness.store.state.splits[STREAM_SPLIT_ID].failed
    assert "'extra'" in failed and "at LSN" in failed and "schema_change" in failed, failed


def test_a_column_added_under_ignore_is_dropped_and_counted(
    logical_postgres: PrivatePostgres, table: str
) -> None:
    harness = SourceHarness(cdc_source(logical_postgres, table, schema_change="ignore"), readers=1)
    harness.run(until=snapshot_read)
    with logical_postgres.connect() as conn:
        conn.execute(sql.SQL("ALTER TABLE {} ADD COLUMN extra text").format(sql.Identifier(table)))
        conn.execute(sql.SQL("INSERT INTO {} VALUES (9000, 'x', 1, 'e')").format(sql.Identifier(table)))
    harness.run(until=lambda h: any(r["id"] == 9000 for r in h.records()))
    row = next(r for r in harness.records() if r["id"] == 9000)
    assert "extra" not in row and row["_op"] == "c"
    assert "'extra' (1 values)" in harness.store.state.splits[STREAM_SPLIT_ID].note


def test_change_rows_have_the_snapshot_rows_types_and_full_old_rows(
    logical_postgres: PrivatePostgres,
) -> None:
    name = f"t_{uuid.uuid4().hex[:10]}"
    table = sql.Identifier(name)
    with logical_postgres.connect() as conn:
        conn.execute(
            sql.SQL(
                "CREATE TABLE {} (id bigint PRIMARY KEY, n numeric(12,2), ts timestamptz, d date, b bytea, "
                "a int[], t text[], j jsonb, u uuid, i interval, f float8, ok boolean)"
            ).format(table)
        )
        conn.execute(sql.SQL("ALTER TABLE {} REPLICA IDENTITY FULL").format(table))
        conn.execute(
            sql.SQL(
                "INSERT INTO {} VALUES (1, 12.50, '2026-01-02 03:04:05.678+02', '2026-01-02', '\\x00ff', "
                "'{{1,NULL,3}}', '{{a,\"b c\"}}', '{{\"k\": [1, 2]}}', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', "
                "'1 day 02:03:04', 1.5, true), (2, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)"
            ).format(table)
        )
    try:
        harness = SourceHarness(cdc_source(logical_postgres, name), readers=1)
        harness.run(until=snapshot_read)
        with logical_postgres.connect() as conn:
            conn.execute(sql.SQL("UPDATE {} SET id = id WHERE id IN (1, 2)").format(table))
            conn.execute(sql.SQL("DELETE FROM {} WHERE id = 1").format(table))
        harness.run(until=lambda h: any(r["_op"] == "d" for r in h.records()))
        records = harness.records()
        meta = {"_op", "_lsn", "_seq", "_ts", "_before"}
        snapshot_rows = {
            r["id"]: {k: v for k, v in r.items() if k not in meta} for r in records if r["_op"] == "r"
        }
        updated = {r["id"]: {k: v for k, v in r.items() if k not in meta} for r in records if r["_op"] == "u"}
        assert updated == snapshot_rows, "a change row has the values and types of the snapshot row"
        deleted = next(r for r in records if r["_op"] == "d")
        assert {k: v for k, v in deleted.items() if k not in meta} == snapshot_rows[1], (
            "REPLICA IDENTITY FULL"
        )
        update = next(r for r in records if r["_op"] == "u" and r["id"] == 1)
        assert '"id": "1"' in update["_before"] and update["_ts"] is not None
    finally:
        drop_slot(logical_postgres.url, name)


@pytest.mark.django_db
def test_deleting_the_flow_drops_its_slot_and_no_other(
    logical_postgres: PrivatePostgres, table: str, dirs: Any, settings: Any
) -> None:
    settings.DATAFLOW_ALLOWED_INTERNAL_ADDRESSES = ["127.0.0.1"]
    staff = UserFactory(username="ops", is_staff=True)
    spec = {
        "flow": {"name": "orders-cdc"},
        "source": {"type": "postgres", "url": logical_postgres.url, "table": table, "mode": "cdc"},
        "transform": {"sql": "SELECT * FROM source"},
        "sink": {"type": "parquet", "path": str(dirs.out / "orders-cdc")},
    }
    flow = flow_create(spec=spec, owner=staff)
    flow_start(flow=flow)  # the run's enumerator starts: the slot is made
    with logical_postgres.connect() as conn:
        conn.execute("SELECT pg_create_logical_replication_slot('adf_someone_else', 'pgoutput')")
    try:
        assert slot_names(logical_postgres) >= {"adf_orders_cdc", "adf_someone_else"}

        flow_delete(flow=flow)

        assert "adf_orders_cdc" not in slot_names(logical_postgres)
        assert "adf_someone_else" in slot_names(logical_postgres)

        naming = {**spec, "flow": {"name": "naming-another"}}
        naming["source"] = {**spec["source"], "slot": "adf_someone_else"}
        other = flow_create(spec=naming, owner=staff)
        with pytest.raises(ConfigError, match="adf_someone_else' exists already"):
            flow_start(flow=other)  # its run fails at start
        flow_delete(flow=other)
        assert "adf_someone_else" in slot_names(logical_postgres), "a slot the flow did not make is kept"
    finally:
        snapshot.release_all()
        drop_slot(logical_postgres.url, "adf_someone_else")
        drop_slot(logical_postgres.url, "adf_orders_cdc")


def slot_names(server: PrivatePostgres) -> set[str]:
    with server.connect() as conn:
        return {row[0] for row in conn.execute("SELECT slot_name FROM pg_replication_slots")}
