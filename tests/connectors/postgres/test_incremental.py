"""incremental mode: a run reads the rows whose cursor is past the high mark of the last
succeeded run (``BuildContext.previous_state``), and leaves its own mark in its state."""

from __future__ import annotations

import psycopg
import pytest
from psycopg import sql

from connectors.postgres.connection import TableName
from connectors.postgres.source import PostgresSource, previous_mark
from source_support.testing import SourceHarness


@pytest.fixture()
def orders(pg_url, schema):
    table = TableName(schema, "orders")
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(
            sql.SQL("CREATE TABLE {} (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL)").format(
                table.identifier
            )
        )
    return table


def add(pg_url, table: TableName, ids: range, hour: int) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(
            sql.SQL(
                "INSERT INTO {} SELECT g, timestamptz '2024-01-01 00:00Z' + make_interval(hours => %s) "
                "FROM generate_series(%s::int8, %s::int8) g"
            ).format(table.identifier),
            (hour, ids.start, ids.stop - 1),
        )


def run(pg_url, table: TableName, previous_state) -> tuple[list[int], dict]:
    """One bounded run; the ids it read and its enumerator's final state."""
    source = PostgresSource(
        url=pg_url,
        table=table,
        cursor="updated_at",
        previous_mark=previous_mark(previous_state),
        chunk_rows=7,
        batch_size=4,
    )
    harness = SourceHarness(source, readers=2)
    harness.run()
    return sorted(r["id"] for r in harness.records()), harness.store.state.enumerator_state


def test_each_run_reads_only_what_is_past_the_last_succeeded_runs_mark(pg_url, orders):
    add(pg_url, orders, range(1, 21), hour=1)
    first, state1 = run(pg_url, orders, None)
    add(pg_url, orders, range(21, 31), hour=2)
    second, state2 = run(pg_url, orders, state1)
    third, state3 = run(pg_url, orders, state2)
    add(pg_url, orders, range(31, 34), hour=3)
    fourth, _ = run(pg_url, orders, state3)

    assert first == list(range(1, 21)), "a first run reads everything"
    assert second == list(range(21, 31))
    assert third == [], "nothing new: nothing read, and the mark is carried on"
    assert fourth == list(range(31, 34))


def test_a_failed_run_leaves_the_mark_where_it_was_so_the_next_reads_it_again(pg_url, orders):
    add(pg_url, orders, range(1, 11), hour=1)
    _, state1 = run(pg_url, orders, None)
    add(pg_url, orders, range(11, 16), hour=2)
    run(pg_url, orders, state1)  # this run fails later (its sink): its state is not the mark

    again, _ = run(pg_url, orders, state1)

    assert again == list(range(11, 16))
