"""The postgres sink's direct path against a real PostgreSQL: an append or a replace of
landed files into a table whose columns have the types the rows are sent in is one COPY
into the table itself (no staging table), committed by the fence with the ledger row; a
fenced-out or failing fence leaves the table as it was; a repeat adds nothing; a table whose
types differ, and an upsert, are still staged."""

from __future__ import annotations

import datetime
import decimal
from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from source_support.registry import SINKS
from source_support.testing.sink_suite import accept
from tests.connectors.postgres.conftest import postgres_url

sink = SINKS["postgres"]

SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("customer", pa.string()),
        ("amount", pa.decimal128(12, 2)),
        ("ts", pa.timestamp("us", tz="UTC")),
    ]
)
#: The types the rows above are sent in, as the table has them.
SENT_TYPES = "id bigint, customer text, amount numeric(12,2), ts timestamptz"
START = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


def query(sql: str, *args: Any) -> list[tuple]:
    with psycopg.connect(postgres_url()) as conn:
        conn.execute("SET timezone = 'UTC'")
        cursor = conn.execute(sql, args)
        return cursor.fetchall() if cursor.description else []


def config(env, table: str, mode: str, **more: Any) -> dict[str, Any]:
    return sink.validate({"url": postgres_url(), "table": table, "mode": mode, **more}, env)


def landed(directory: Path, ids: range, files: int = 3) -> list[str]:
    """``ids`` as orders in ``files`` Parquet files (some amounts and customers null)."""
    paths = []
    size = -(-len(ids) // files)
    for n in range(files):
        part = ids[n * size : (n + 1) * size]
        table = pa.table(
            {
                "id": pa.array(part, pa.int64()),
                "customer": [None if i % 11 == 3 else f"c{i % 7}" for i in part],
                "amount": [None if i % 13 == 5 else decimal.Decimal(i * 7).scaleb(-2) for i in part],
                "ts": [START + datetime.timedelta(seconds=i) for i in part],
            },
            schema=SCHEMA,
        )
        path = directory / f"part-{ids.start}-{n}.parquet"
        pq.write_table(table, path)
        paths.append(str(path))
    return paths


def expected(ids: range) -> list[tuple]:
    return [
        (
            i,
            None if i % 11 == 3 else f"c{i % 7}",
            None if i % 13 == 5 else decimal.Decimal(i * 7).scaleb(-2),
            START + datetime.timedelta(seconds=i),
        )
        for i in ids
    ]


def rows(table: str) -> list[tuple]:
    return query(f"SELECT id, customer, amount, ts FROM {table} ORDER BY id, ts")


def staging_tables(schema: str) -> list[tuple]:
    return query(
        "SELECT tablename FROM pg_tables WHERE schemaname = %s AND tablename LIKE 'adf_staging%%'", schema
    )


def ledger(schema: str, table: str) -> list[tuple]:
    return query(f"SELECT stream, rows FROM {schema}.adf_sink_ledger WHERE target = %s", table)


@pytest.mark.parametrize("mode", ["append", "replace"])
def test_landed_rows_of_the_tables_types_are_copied_into_it_once_with_no_staging_table(
    mode, pg_schema, pg_env, tmp_path
):
    table = f"{pg_schema}.orders"
    query(f"CREATE TABLE {table} ({SENT_TYPES})")
    query(f"INSERT INTO {table} VALUES (-1, 'old', 1.00, '2025-01-01Z')")
    old = rows(table)
    size_before = query("SELECT pg_relation_size(%s::regclass)", table)[0][0]
    cfg = config(pg_env, table, mode)
    paths = landed(tmp_path, range(0, 30_000))
    seen: dict[str, Any] = {}

    def publish(count: int, swap) -> bool:
        # Between the COPY and the commit: the rows are in the table's own pages, unseen.
        seen["rows"] = count
        seen["staging"] = staging_tables(pg_schema)
        seen["staging_bytes"] = sink.staging_bytes(cfg, "run1-1")
        seen["visible"] = rows(table)
        seen["grew"] = query("SELECT pg_relation_size(%s::regclass)", table)[0][0] > size_before
        swap()
        return True

    assert sink.write_landed(paths, SCHEMA, cfg, attempt_key="run1-1", publish=publish, env=pg_env)

    assert seen == {"rows": 30_000, "staging": [], "staging_bytes": 0, "visible": old, "grew": True}
    assert rows(table) == (old if mode == "append" else []) + expected(range(0, 30_000))
    assert ledger(pg_schema, table) == [("run:run1", 30_000)]
    assert staging_tables(pg_schema) == []


def test_a_fenced_out_or_failing_direct_attempt_writes_nothing_and_a_repeat_adds_nothing(
    pg_schema, pg_env, tmp_path
):
    table = f"{pg_schema}.orders"
    cfg = config(pg_env, table, "replace", create=True)
    first = landed(tmp_path, range(0, 2_000))
    assert sink.write_landed(first, SCHEMA, cfg, attempt_key="run1-1", publish=accept, env=pg_env)
    second = landed(tmp_path, range(5_000, 8_000))

    def fenced_out(count: int, swap) -> bool:
        return False  # a stale attempt: its fence refuses

    def failing(count: int, swap) -> bool:
        raise RuntimeError("the fence's own transaction failed")

    assert not sink.write_landed(second, SCHEMA, cfg, attempt_key="run2-1", publish=fenced_out, env=pg_env)
    with pytest.raises(RuntimeError, match="fence's own"):
        sink.write_landed(second, SCHEMA, cfg, attempt_key="run2-2", publish=failing, env=pg_env)
    assert rows(table) == expected(range(0, 2_000))
    assert ledger(pg_schema, table) == [("run:run1", 2_000)]

    assert sink.write_landed(second, SCHEMA, cfg, attempt_key="run2-3", publish=accept, env=pg_env)
    # The run again (an attempt whose fence's commit was lost after the table's): the
    # fence is still asked, with the rows the attempt holds, and nothing is written.
    asked: list[int] = []

    def repeat(count: int, swap) -> bool:
        asked.append(count)
        swap()
        return True

    assert sink.write_landed(second, SCHEMA, cfg, attempt_key="run2-4", publish=repeat, env=pg_env)
    assert asked == [3_000]
    assert rows(table) == expected(range(5_000, 8_000))
    assert sorted(ledger(pg_schema, table)) == [("run:run1", 2_000), ("run:run2", 3_000)]
    assert staging_tables(pg_schema) == []


def test_a_table_of_other_types_and_an_upsert_are_still_staged(pg_schema, pg_env, tmp_path):
    paths = landed(tmp_path, range(0, 1_000))
    query(
        f"CREATE TABLE {pg_schema}.named (id bigint, customer varchar(20), amount numeric(12,2), ts timestamptz)"
    )
    query(f"CREATE TABLE {pg_schema}.keyed ({SENT_TYPES}, PRIMARY KEY (id))")
    for name, mode, more in (("named", "append", {}), ("keyed", "upsert", {"key": ["id"]})):
        table = f"{pg_schema}.{name}"
        cfg = config(pg_env, table, mode, **more)
        staged: list[list[tuple]] = []

        def publish(count: int, swap, staged: list[list[tuple]] = staged) -> bool:
            staged.append(staging_tables(pg_schema))
            swap()
            return True

        assert sink.write_landed(paths, SCHEMA, cfg, attempt_key=f"{name}-1", publish=publish, env=pg_env)

        assert len(staged) == 1 and len(staged[0]) == 1, (name, staged)
        assert rows(table) == expected(range(0, 1_000)), name
        assert staging_tables(pg_schema) == []
