"""The cdc mode on a private cluster with ``wal_level = logical`` (the machine's shared server
runs ``replica``): ``tests.postgres_server.PrivatePostgres(logical=True)``, one per module,
which a test may stop and start. Readers run in a ``SourceHarness``; a killed reader is
``kill_reader`` (its lease lapses, its splits go back at their checkpoints). The flow tests
(``schema_change`` into a Parquet or a PostgreSQL sink) run the real flow on the in-process
worker; test_cdc_crash.py SIGKILLs worker processes."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from dataclasses import replace
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest
from psycopg import sql

from connectors.postgres import snapshot
from connectors.postgres.cdc import ChangeStream, drop_slot, start_slot
from connectors.postgres.connection import TableName
from connectors.postgres.pgoutput import format_lsn, parse_lsn
from connectors.postgres.source import PostgresSource
from connectors.postgres.split import STREAM_SPLIT_ID, ChunkSplit, ChunkSplitSerializer
from dataflow.models import FlowRun, SchemaChangeRecord
from dataflow.services.flows import flow_create, flow_delete, flow_start, flow_stop
from dataflow.services.schema_changes import run_landed_ddl, run_schema_changes
from source_support.api import SchemaChange
from source_support.errors import ConfigError
from source_support.testing import SourceHarness
from tests.connectors.postgres.cdc_support import Writer, apply, run_sql, sink_table, table_rows
from tests.factories import UserFactory
from tests.helpers import Beat, wait_for_run, wait_until
from tests.postgres_server import PrivatePostgres

pytestmark = pytest.mark.slow


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


def cdc_source(server: PrivatePostgres, name: str, batch_size: int = 50, **options: Any) -> PostgresSource:
    return PostgresSource(
        url=server.url,
        table=TableName("public", name),
        chunk_rows=100,
        batch_size=batch_size,
        slot=name,
        **options,
    )


def stream_position(harness: SourceHarness[Any]) -> int:
    """The LSN below which every transaction's changes have landed."""
    stored = harness.store.state.splits[STREAM_SPLIT_ID]
    return ChunkSplitSerializer().deserialize(stored.payload).low + stored.position


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
        harness.run(until=lambda h: snapshot_read(h) and writer.done >= 1_000)
        harness.kill_reader(0)
        # No round while 1,000 more changes commit: the stream falls behind, so its batches
        # end inside a fetch of the slot's messages (the rest of which must not be lost).
        behind = writer.done + 1_000
        wait_until(lambda: writer.done >= behind, 60, lambda: f"the writer stalled at {writer.done}")
        harness.run(rounds=5)
        logical_postgres.stop()
        harness.run(rounds=3)  # the database is away: the stream waits
        logical_postgres.start()
        harness.run(until=lambda h: writer.done >= 6_000)  # about 3 s of writing at 2,000 changes/s
    finally:
        writer.stop.set()
        writer.join()
    with logical_postgres.connect() as conn, conn.transaction():
        conn.execute(sql.SQL("INSERT INTO {} VALUES (0, 'last', 0)").format(sql.Identifier(table)))
        row = conn.execute("SELECT pg_current_wal_insert_lsn()::text").fetchone()
    assert row is not None
    below_last_commit = parse_lsn(row[0])  # the writer's transactions and this one committed after
    final = table_rows(logical_postgres, table)
    harness.run(until=lambda h: stream_position(h) > below_last_commit)  # cheap: no records read

    records = harness.records()
    snapshot_ids = [r["id"] for r in records if r["_op"] == "r"]
    assert sorted(snapshot_ids) == list(range(1, 301)), "every row of the snapshot once"
    changes = [(r["_lsn"], r["_seq"]) for r in records if r["_op"] != "r"]
    assert len(changes) == len(set(changes)), "no change twice"
    assert len(changes) >= writer.done * 0.5  # updates and deletes of missing ids change nothing
    assert apply(records) == final
    assert harness.failures == [], "the restart was waited for, not a failed reader"
    assert confirmed(logical_postgres, table) > min(r["_lsn"] for r in records), "the slot was confirmed"


def test_batches_that_end_inside_a_fetch_of_the_slot_lose_no_change(
    logical_postgres: PrivatePostgres, table: str
) -> None:
    """A fetch from the slot brings up to ``FETCH_ROWS`` messages; a batch that fills in the
    middle of them keeps the rest for the next batch. They were dropped: when the peek held
    more than one fetch, the next fetch's transactions moved the position past them, and
    they were lost."""
    slot = start_slot(logical_postgres.url, table, table, TableName("public", table))
    slot.connection.close()  # the snapshot is not read here
    with logical_postgres.connect() as conn:  # a transaction each: 3,000 messages, over one fetch
        conn.execute("SET synchronous_commit = off")  # no flush waited for at each commit
        conn.execute(
            sql.SQL(
                "DO $$ BEGIN FOR i IN 5000..5999 LOOP INSERT INTO {} VALUES (i, 'x', 1); COMMIT; END LOOP; END $$"
            ).format(sql.Identifier(table))
        )
    source = cdc_source(logical_postgres, table)
    stream = ChangeStream(
        logical_postgres.url, table, table, TableName("public", table),
        source.chunk_query().columns, source.run_schema(),
    )  # fmt: skip
    split = ChunkSplit("cdc", 0, slot.lsn, None, lsn=slot.lsn)
    inserted: list[int] = []
    try:
        while (
            len(inserted) < 1000
            and (batch := stream.fetch(split, max_records=100, timeout_s=1.0)) is not None
        ):
            inserted += batch.records.column("id").to_pylist()
            split = split.at(batch.end.position)
    finally:
        stream.close()
    assert inserted == list(range(5000, 6000)), "each change once, in order"


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


def test_a_new_run_of_a_stopped_flow_reads_from_its_slot_what_changed_meanwhile(
    logical_postgres: PrivatePostgres, table: str
) -> None:
    def insert(ids: range) -> None:
        with logical_postgres.connect() as conn:
            for i in ids:
                conn.execute(
                    sql.SQL("INSERT INTO {} VALUES (%s, 'x', 1)").format(sql.Identifier(table)), (i,)
                )

    first = SourceHarness(cdc_source(logical_postgres, table), readers=1)
    first.run(until=snapshot_read)
    insert(range(5000, 5003))
    first.run(until=lambda h: len([r for r in h.records() if r["_op"] == "c"]) >= 3)
    first.remove_reader(0)  # the flow stops: its reader commits and leaves; the slot stays
    insert(range(6000, 6004))  # while the flow is stopped

    second = SourceHarness(cdc_source(logical_postgres, table, slot_owned=True), readers=1)
    second.run(until=lambda h: len(h.records()) >= 4)
    second.run(rounds=3)

    records = second.records()
    assert [(r["_op"], r["id"]) for r in records] == [("c", i) for i in range(6000, 6004)], (
        "no second snapshot, nothing the first run read, nothing changed meanwhile lost"
    )


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


def changes_listed(harness: SourceHarness[Any]) -> dict[tuple[str, str], SchemaChange]:
    """The schema changes the committed batches carried, by column and kind (the first
    seen, with the records of every batch counted, as the run's store keeps them)."""
    listed: dict[tuple[str, str], SchemaChange] = {}
    for _, batch in harness.store.state.committed:
        for change in batch.schema_changes:
            seen = listed.get((change.column, change.kind))
            listed[(change.column, change.kind)] = (
                change if seen is None else replace(seen, records=seen.records + change.records)
            )
    return listed


def test_a_column_added_under_evolve_reaches_the_rows_after_it_in_its_own_type(
    logical_postgres: PrivatePostgres, table: str
) -> None:
    harness = SourceHarness(cdc_source(logical_postgres, table, schema_change="evolve"), readers=1)
    harness.run(until=snapshot_read)
    run_sql(
        logical_postgres,
        table,
        "INSERT INTO {} VALUES (8000, 'before', 2)",
        "UPDATE {} SET v = 'u1' WHERE id = 1",
        "ALTER TABLE {} ADD COLUMN extra int",
        "INSERT INTO {} VALUES (9000, 'after', 3, 7)",
        "UPDATE {} SET extra = 5, v = 'u2' WHERE id = 2",
        "UPDATE {} SET v = 'u8' WHERE id = 8000",
        "DELETE FROM {} WHERE id = 3",
    )
    harness.run(until=lambda h: any(r["_op"] == "d" for r in h.records()))

    records = harness.records()
    with logical_postgres.connect() as conn:
        final = {
            row[0]: row[1:]
            for row in conn.execute(sql.SQL("SELECT id, v, n, extra FROM {}").format(sql.Identifier(table)))
        }
    applied: dict[int, tuple[Any, ...]] = {}
    for r in sorted(records, key=lambda r: (r["_lsn"], r["_seq"])):
        if r["_op"] == "d":
            applied.pop(r["id"])
        else:
            applied[r["id"]] = (r["v"], r["n"], r.get("extra"))
    assert applied == final, "the change rows give the table, the new column NULL where it was not set"
    by_change = {(r["_op"], r["id"]): r for r in records if r["_op"] != "r"}
    assert by_change[("c", 8000)].get("extra") is None and by_change[("u", 1)].get("extra") is None, (
        "before the ALTER: NULL (or not in its batch at all)"
    )
    assert by_change[("c", 9000)]["extra"] == 7 and by_change[("u", 2)]["extra"] == 5, "an int, as typed"
    assert by_change[("u", 8000)]["extra"] is None
    assert harness.store.state.splits[STREAM_SPLIT_ID].failed == ""
    added = changes_listed(harness)[("extra", "added")]
    assert (added.new_type, added.policy, added.records) == ("INT", "evolve", 4)
    assert added.where == f"LSN {format_lsn(by_change[('c', 9000)]['_lsn'])}", added.where


def test_a_column_dropped_under_evolve_is_null_from_then_on(
    logical_postgres: PrivatePostgres, table: str
) -> None:
    harness = SourceHarness(cdc_source(logical_postgres, table, schema_change="evolve"), readers=1)
    harness.run(until=snapshot_read)
    run_sql(
        logical_postgres,
        table,
        "UPDATE {} SET v = 'u1' WHERE id = 1",
        "ALTER TABLE {} DROP COLUMN n",
        "INSERT INTO {} VALUES (9000, 'after')",
        "UPDATE {} SET v = 'u2' WHERE id = 2",
    )
    harness.run(until=lambda h: any(r["id"] == 2 and r["_op"] == "u" for r in h.records()))

    by_change = {(r["_op"], r["id"]): r for r in harness.records() if r["_op"] != "r"}
    assert by_change[("u", 1)]["n"] == Decimal("0.25"), "before the DROP: its value"
    assert by_change[("c", 9000)]["n"] is None and by_change[("u", 2)]["n"] is None
    assert (by_change[("c", 9000)]["v"], by_change[("u", 2)]["v"]) == ("after", "u2")
    dropped = changes_listed(harness)[("n", "missing")]
    assert (dropped.old_type, dropped.policy, dropped.records) == ("DECIMAL(8,2)", "evolve", 2)
    assert dropped.where == f"LSN {format_lsn(by_change[('c', 9000)]['_lsn'])}"


def test_a_retype_under_evolve_goes_on_if_the_sink_type_stays_else_fails_naming_both_types(
    logical_postgres: PrivatePostgres, table: str
) -> None:
    harness = SourceHarness(cdc_source(logical_postgres, table, schema_change="evolve"), readers=1)
    harness.run(until=snapshot_read)
    run_sql(
        logical_postgres,
        table,
        "ALTER TABLE {} ALTER COLUMN v TYPE varchar(40)",
        "INSERT INTO {} VALUES (9000, 'still a string', 1)",
    )
    harness.run(until=lambda h: any(r["id"] == 9000 for r in h.records()))
    assert next(r for r in harness.records() if r["id"] == 9000)["v"] == "still a string"
    retyped = changes_listed(harness)[("v", "retyped")]
    assert (retyped.old_type, retyped.new_type, retyped.policy) == ("text", "varchar", "evolve")

    run_sql(
        logical_postgres,
        table,
        "ALTER TABLE {} ALTER COLUMN n TYPE numeric(12,2)",
        "INSERT INTO {} VALUES (9001, 'wide', 1234567890.12)",
    )
    harness.run(until=lambda h: h.store.state.splits[STREAM_SPLIT_ID].failed != "")
    failed = harness.store.state.splits[STREAM_SPLIT_ID].failed
    assert "column 'n'" in failed and "at LSN" in failed, failed
    assert "numeric(8,2) (DECIMAL(8,2)) to numeric(12,2) (DECIMAL(12,2))" in failed, failed
    assert not any(r["id"] == 9001 for r in harness.records()), "nothing of it landed"


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


@pytest.mark.django_db(transaction=True)
def test_a_cdc_flow_under_evolve_takes_an_added_column_into_its_parquet_sink(
    logical_postgres: PrivatePostgres, table: str, worker: Any, dirs: Any, settings: Any
) -> None:
    """The real flow (in-process worker, ticks, landing, stream epochs, Parquet sink)."""
    settings.DATAFLOW_ALLOWED_INTERNAL_ADDRESSES = ["127.0.0.1"]
    staff = UserFactory(username=f"ops-{table}", is_staff=True)
    sink = dirs.out / "sink"
    spec = {
        "flow": {"name": f"evolve-{table}".replace("_", "-"), "parallelism": 1, "poll_interval_ms": 50},
        "source": {
            "type": "postgres",
            "url": logical_postgres.url,
            "table": table,
            "mode": "cdc",
            "slot": table,
            "schema_change": "evolve",
        },
        "transform": {"sql": "SELECT * FROM source", "trigger_ms": 200},
        "sink": {"type": "parquet", "path": str(sink)},
    }
    flow = flow_create(spec=spec, owner=staff)

    def sink_ids() -> set[int]:
        found = sink_table(sink)
        return set(found.column("id").to_pylist()) if found.num_rows else set()

    with Beat():
        run = flow_start(flow=flow)
        wait_until(lambda: len(sink_ids()) >= 300, 60, lambda: f"the snapshot: {note(run)}")
        run_sql(
            logical_postgres,
            table,
            "INSERT INTO {} VALUES (8000, 'before', 2)",
            "ALTER TABLE {} ADD COLUMN extra int",
            "INSERT INTO {} VALUES (9000, 'after', 3, 7)",
            "UPDATE {} SET extra = 5 WHERE id = 2",
        )
        wait_until(lambda: 9000 in sink_ids(), 60, lambda: f"the change after the ALTER: {note(run)}")
        wait_until(
            lambda: len([r for r in sink_table(sink).to_pylist() if r["_op"] != "r"]) >= 3,
            60,
            lambda: f"every change: {note(run)}",
        )
        flow_stop(flow=flow)

    rows = sink_table(sink).to_pylist()
    applied: dict[int, tuple[Any, ...]] = {}
    for r in sorted(rows, key=lambda r: (r["_lsn"], r["_seq"])):
        applied[r["id"]] = (r["v"], r["n"], r.get("extra"))
    with logical_postgres.connect() as conn:
        final = {
            row[0]: row[1:]
            for row in conn.execute(sql.SQL("SELECT id, v, n, extra FROM {}").format(sql.Identifier(table)))
        }
    assert applied == final, "the sink's rows applied give the table as psycopg reads it, extra NULL before"
    assert sink_table(sink).schema.field("extra").type == pa.int32()
    change = SchemaChangeRecord.objects.get(run=run)
    assert (change.column_name, change.kind, change.new_type, change.policy) == (
        "extra",
        "added",
        "INT",
        "evolve",
    )
    assert change.first_position.startswith("LSN "), change.first_position
    run.refresh_from_db()
    assert run_landed_ddl(run).endswith("`extra` INT"), run_landed_ddl(run)
    assert run_schema_changes(run)[0]["column"] == "extra", "the run lists it (API, admin, dashboard)"
    flow_delete(flow=flow)


@pytest.mark.django_db(transaction=True)
def test_a_cdc_flow_under_fail_stops_at_an_added_column_and_lists_it_on_the_run(
    logical_postgres: PrivatePostgres, table: str, worker: Any, dirs: Any, settings: Any
) -> None:
    """The run fails naming the column and the LSN, and lists the change (API, admin,
    dashboard, webhook) as file drift's are."""
    settings.DATAFLOW_ALLOWED_INTERNAL_ADDRESSES = ["127.0.0.1"]
    staff = UserFactory(username=f"ops-{table}", is_staff=True)
    sink = dirs.out / "sink"
    spec = {
        "flow": {"name": f"fail-{table}".replace("_", "-"), "parallelism": 1, "poll_interval_ms": 50},
        "source": {
            "type": "postgres",
            "url": logical_postgres.url,
            "table": table,
            "mode": "cdc",
            "slot": table,
        },
        "transform": {"sql": "SELECT * FROM source", "trigger_ms": 200},
        "sink": {"type": "parquet", "path": str(sink)},
    }
    flow = flow_create(spec=spec, owner=staff)
    with Beat():
        run = flow_start(flow=flow)
        wait_until(lambda: sink_table(sink).num_rows >= 300, 60, lambda: f"the snapshot: {note(run)}")
        run_sql(
            logical_postgres,
            table,
            "ALTER TABLE {} ADD COLUMN extra int",
            "INSERT INTO {} VALUES (9000, 'after', 3, 7)",
        )
        run = wait_for_run(run, timeout=60)

    assert run.status == "failed", run.message
    assert "column 'extra'" in run.message and "was added at LSN" in run.message, run.message
    change = SchemaChangeRecord.objects.get(run=run)
    assert (change.column_name, change.kind, change.policy) == ("extra", "added", "fail")
    assert change.first_position in run.message, (change.first_position, run.message)
    assert 9000 not in sink_table(sink).column("id").to_pylist()
    flow_delete(flow=flow)


@pytest.mark.django_db(transaction=True)
def test_a_postgres_sink_refuses_an_evolved_column_its_table_lacks_naming_it(
    logical_postgres: PrivatePostgres, table: str, worker: Any, dirs: Any, settings: Any
) -> None:
    """The sink does not alter its table: the epoch that carries the new column fails the
    run before anything of it is written, naming the column."""
    settings.DATAFLOW_ALLOWED_INTERNAL_ADDRESSES = ["127.0.0.1"]
    staff = UserFactory(username=f"ops-{table}", is_staff=True)
    copy = f"{table}_copy"
    spec = {
        "flow": {"name": f"evolve-pg-{table}".replace("_", "-"), "parallelism": 1, "poll_interval_ms": 50},
        "source": {
            "type": "postgres",
            "url": logical_postgres.url,
            "table": table,
            "mode": "cdc",
            "slot": table,
            "schema_change": "evolve",
        },
        "transform": {"sql": "SELECT * FROM source", "trigger_ms": 200},
        "sink": {
            "type": "postgres",
            "url": logical_postgres.url,
            "table": copy,
            "mode": "append",
            "create": True,
        },
    }
    flow = flow_create(spec=spec, owner=staff)

    def copied() -> int:
        with logical_postgres.connect() as conn:
            if conn.execute("SELECT to_regclass(%s)", (copy,)).fetchone() == (None,):
                return 0
            row = conn.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(copy))).fetchone()
            return row[0] if row else 0

    with Beat():
        run = flow_start(flow=flow)
        wait_until(lambda: copied() >= 300, 60, lambda: f"the snapshot: {note(run)}")
        run_sql(
            logical_postgres,
            table,
            "ALTER TABLE {} ADD COLUMN extra int",
            "INSERT INTO {} VALUES (9000, 'after', 3, 7)",
        )
        run = wait_for_run(run, timeout=60)

    assert run.status == "failed", run.message
    assert "column 'extra' of the output is not a column of" in run.message, run.message
    assert "nothing was written" in run.message, run.message
    assert copied() == 300, "the epoch with the new column wrote nothing"
    flow_delete(flow=flow)
    run_sql(logical_postgres, copy, "DROP TABLE {}")


def note(run: FlowRun) -> str:
    run.refresh_from_db()
    return f"run {run.status}: {run.message}"
