"""A cdc flow run by real worker processes (``fleet``) on a private cluster with
``wal_level = logical``: a writer commits inserts, updates and deletes at 2,000 changes a
second while the worker reading the change stream is SIGKILLed and PostgreSQL is restarted;
the Parquet sink's change rows applied in LSN order give exactly the final table. A module
of its own: the in-process worker of test_cdc.py would take the fleet's tasks."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from psycopg import sql

from connectors.postgres import snapshot
from connectors.postgres.cdc import drop_slot
from dataflow.models import FlowRun, Split
from dataflow.services.flows import flow_apply, flow_delete, flow_start, flow_stop
from tests.connectors.postgres.cdc_support import Writer, apply, sink_table, table_rows
from tests.helpers import wait_until
from tests.postgres_server import PrivatePostgres

pytestmark = pytest.mark.slow


@pytest.fixture()
def table(logical_postgres: PrivatePostgres) -> Iterator[str]:
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
    yield name
    snapshot.release_all()
    with contextlib.suppress(Exception):
        drop_slot(logical_postgres.url, name)


def note(run: FlowRun, fleet: Any) -> str:
    run.refresh_from_db()
    return f"run {run.status}: {run.message}\n" + fleet.log("w1")[-2000:]


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(600)
def test_a_sigkilled_stream_reader_and_a_restart_at_2000_changes_a_second_lose_and_repeat_nothing(
    logical_postgres: PrivatePostgres, table: str, fleet: Any, dirs: Any, settings: Any
) -> None:
    settings.DATAFLOW_TRANSFORM_LEASE_SECONDS = 4  # the killed worker's stream driver is replaced soon
    sink = dirs.out / "sink"
    flow, _ = flow_apply(
        spec={
            "flow": {"name": f"crash-{table}".replace("_", "-"), "parallelism": 1, "batch_size": 500},
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
    )
    fleet.beat()
    fleet.worker("w1")
    run = flow_start(flow=flow)
    splits = Split.objects.filter(run=run)
    wait_until(
        lambda: splits.filter(split_id="changes").exists()
        and not splits.exclude(split_id="changes").exclude(status="finished").exists(),
        120,
        lambda: f"the snapshot was not read: {note(run, fleet)}",
    )
    writer = Writer(logical_postgres, table)
    writer.start()
    try:
        # w1, the only worker, reads the change stream: it is SIGKILLed mid-stream.
        wait_until(
            lambda: writer.done >= 1_000 and splits.filter(split_id="changes", position__gt=0).exists(),
            120,
            lambda: f"the stream never moved: {note(run, fleet)}",
        )
        fleet.kill("w1")
        fleet.worker("w2")
        logical_postgres.stop()
        logical_postgres.start()
        wait_until(lambda: writer.done >= 6_000, 120, lambda: f"the writer stalled at {writer.done}")
    finally:
        writer.stop.set()
        writer.join()
    with logical_postgres.connect() as conn:
        conn.execute(sql.SQL("INSERT INTO {} VALUES (0, 'last', 0)").format(sql.Identifier(table)))
    final = table_rows(logical_postgres, table)
    wait_until(
        lambda: 0 in set(sink_table(sink).column("id").to_pylist() if sink.exists() else []),
        180,
        lambda: f"the last change never reached the sink: {note(run, fleet)}",
    )
    flow_stop(flow=flow)

    rows = sink_table(sink).to_pylist()
    snapshot_ids = sorted(r["id"] for r in rows if r["_op"] == "r")
    assert snapshot_ids == list(range(1, 301)), "every row of the snapshot once"
    changes = [(r["_lsn"], r["_seq"]) for r in rows if r["_op"] != "r"]
    assert len(changes) == len(set(changes)), "no change twice, across the kill and the restart"
    assert apply(rows) == final, "the change rows applied in LSN order give the table"
    flow_delete(flow=flow)
