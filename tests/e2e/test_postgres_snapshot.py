"""A 2M-row PostgreSQL table snapshotted to Parquet by a fleet of real worker processes,
one of them SIGKILLed in the middle of a chunk: the sink holds exactly the table's rows.
The table lives in the tests' database (a schema of the test's own), read with the
operator's rights (no owner, no url: the deployment's database)."""

from __future__ import annotations

import time

import psycopg
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from django.db import connection
from psycopg import sql

from connectors.postgres import snapshot
from dataflow.models import Assignment, FlowRun
from dataflow.services.flows import flow_apply, flow_start
from tests.e2e.fleet import Fleet
from tests.e2e.test_crash import _worker_holding_a_split
from tests.helpers import live, wait_for_run

pytestmark = pytest.mark.django_db(transaction=True)

ROWS = 2_000_000
SCHEMA = "pgsnap"


def _url() -> str:
    db = connection.settings_dict
    return f"postgres://{db['USER']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


@pytest.fixture()
def orders():
    """``pgsnap.orders``: 2M rows of the bench's shape, dropped after the test."""
    with psycopg.connect(_url(), autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(SCHEMA)))
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(SCHEMA)))
        conn.execute(
            "CREATE TABLE pgsnap.orders (id bigint PRIMARY KEY, customer text, amount numeric(12,2), "
            "ts timestamptz)"
        )
        conn.execute(
            "INSERT INTO pgsnap.orders SELECT g, 'customer-' || (g %% 997), (g %% 100000) / 100.0, "
            "timestamptz '2024-01-01 00:00Z' + make_interval(secs => g) FROM generate_series(1, %s) g",
            (ROWS,),
        )
        conn.execute("ANALYZE pgsnap.orders")
    yield "pgsnap.orders"
    snapshot.release_all()
    with psycopg.connect(_url(), autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(SCHEMA)))


def _table_now() -> pa.Table:
    """The table as pyarrow reads it through psycopg (the comparison's other side)."""
    with psycopg.connect(_url()) as conn:
        rows = conn.execute("SELECT id, customer, amount, ts FROM pgsnap.orders").fetchall()
    columns = list(zip(*rows, strict=True))
    return pa.table(
        {
            "id": pa.array(columns[0], pa.int64()),
            "customer": pa.array(columns[1], pa.string()),
            "amount": pa.array(columns[2], pa.decimal128(12, 2)),
            "ts": pa.array(columns[3], pa.timestamp("us", tz="UTC")),
        }
    )


def _comparable(table: pa.Table) -> pa.Table:
    ts = pc.cast(table["ts"], pa.timestamp("us", tz="UTC")).cast(pa.int64())
    return pa.table(
        {
            "id": table["id"].cast(pa.int64()),
            "customer": table["customer"].cast(pa.string()),
            "amount": table["amount"].cast(pa.decimal128(12, 2)),
            "ts": ts,
        }
    ).sort_by("id")


def _wait_for_progress(run: FlowRun, at_least: int, fleet: Fleet, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run.refresh_from_db()
        if live(run) >= at_least:
            return
        if run.status != "reading":
            raise AssertionError(f"run ended before the kill: {run.status} {run.message}")
        time.sleep(0.05)
    raise AssertionError(f"no progress: {live(run)} rows\n{fleet.log('w1')[-3000:]}")


def test_a_sigkilled_reader_mid_chunk_leaves_the_sink_equal_to_the_table(fleet, dirs, orders):
    spec = {
        "flow": {"name": "orders-snapshot", "parallelism": 2, "batch_size": 20_000},
        "source": {"type": "postgres", "table": orders, "chunk_rows": 250_000},
        "transform": {"sql": "SELECT * FROM source"},
        "sink": {"type": "parquet", "path": str(dirs.out / "sink")},
    }
    flow, _ = flow_apply(spec=spec)
    fleet.beat()
    fleet.worker("w1")
    fleet.worker("w2")
    run = flow_start(flow=flow)

    _wait_for_progress(run, ROWS // 4, fleet)
    victim = _worker_holding_a_split(run, fleet)
    fleet.kill(victim)
    killed_at = live(run)
    run = wait_for_run(run, timeout=300)

    survivor = "w2" if victim == "w1" else "w1"
    assert run.status == "succeeded", run.message + fleet.log(survivor)[-3000:]
    assert killed_at < ROWS
    assert Assignment.objects.filter(split__run=run, outcome="expired").exists(), "a chunk was taken over"
    sink = pq.read_table(dirs.out / "sink")
    assert sink.num_rows == ROWS
    assert _comparable(sink).equals(_comparable(_table_now()))
    assert run.records_read == ROWS, "what landed before the kill was not read again"
