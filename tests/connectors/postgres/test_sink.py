"""The postgres sink's own promises against a real PostgreSQL: an output the table cannot
take is refused before anything is written, naming the column; ``create = true`` makes the
types of section 1 read backwards; an upsert keeps the last row of a key; ``replace`` is
seen whole or not at all by a concurrent reader; a non-staff ``url`` is refused by the API."""

from __future__ import annotations

import datetime
import decimal
import tempfile
import threading
from typing import Any

import psycopg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from source_support.errors import ConfigError
from source_support.registry import SINKS
from source_support.testing.sink_suite import accept, local_spark
from tests.connectors.postgres.conftest import postgres_url

sink = SINKS["postgres"]


def config(env, table: str, mode: str = "append", **more: Any) -> dict[str, Any]:
    return sink.validate({"url": postgres_url(), "table": table, "mode": mode, **more}, env)


def query(sql: str, *args: Any) -> list[tuple]:
    with psycopg.connect(postgres_url()) as conn:
        conn.execute("SET timezone = 'UTC'")
        cursor = conn.execute(sql, args)
        return cursor.fetchall() if cursor.description else []


def staging_tables(schema: str) -> list[tuple]:
    return query(
        "SELECT tablename FROM pg_tables WHERE schemaname = %s AND tablename LIKE 'adf_staging%%'", schema
    )


def test_an_output_the_table_cannot_take_is_refused_naming_the_column_and_nothing_is_written(
    pg_schema, pg_env
):
    table = f"{pg_schema}.orders"
    query(f"CREATE TABLE {table} (id bigint PRIMARY KEY, placed date NOT NULL)")
    query(f"INSERT INTO {table} VALUES (1, '2024-01-01')")
    cases = [
        (pa.table({"id": [2], "placed": [datetime.date(2024, 1, 2)], "note": ["x"]}), "'note'"),
        (pa.table({"id": [2], "placed": ["yesterday"]}), "'placed'"),
        (pa.table({"id": [2]}), "'placed'"),  # NOT NULL, no default, not in the output
    ]
    for output, column in cases:
        with pytest.raises(ConfigError, match=column) as refused:
            sink.append_table(
                output, config(pg_env, table), epoch_key="e-00000001", publish=accept, env=pg_env
            )
        assert refused.value.field == "sink.table"
    assert query(f"SELECT * FROM {table}") == [(1, datetime.date(2024, 1, 1))]
    assert staging_tables(pg_schema) == []


def test_a_missing_table_without_create_and_an_upsert_without_a_unique_key_are_refused(pg_schema, pg_env):
    output = pa.table({"id": [1], "name": ["a"]})
    with pytest.raises(ConfigError, match="does not exist; create it, or set create = true"):
        sink.append_table(
            output, config(pg_env, f"{pg_schema}.nothing"), epoch_key="e-1", publish=accept, env=pg_env
        )
    query(f"CREATE TABLE {pg_schema}.keyless (id bigint, name text)")
    with pytest.raises(ConfigError, match="no primary key or unique index on \\(id\\)") as refused:
        sink.append_table(
            output,
            config(pg_env, f"{pg_schema}.keyless", "upsert", key=["id"]),
            epoch_key="e-1",
            publish=accept,
            env=pg_env,
        )
    assert refused.value.field == "sink.key"


def test_bad_configs_are_refused_naming_the_field(pg_env):
    url = postgres_url()
    cases = [
        ({"url": url, "table": "a.b.c", "mode": "append"}, "sink.table"),
        ({"url": url, "table": "public.adf_sink_ledger", "mode": "append"}, "sink.table"),
        ({"url": url, "table": "t", "mode": "upsert"}, "sink.key"),
        ({"url": url, "table": "t", "mode": "append", "key": ["id"]}, "sink.key"),
        ({"url": url, "table": "t", "mode": "merge"}, "sink.mode"),
        ({"url": "mysql://h/db", "table": "t", "mode": "append"}, "sink.url"),
        ({"table": "t", "mode": "append"}, "sink.url"),
    ]
    for table, field in cases:
        with pytest.raises(ConfigError) as refused:
            sink.validate(table, pg_env)
        assert refused.value.field == field, (table, refused.value)


@pytest.mark.slow  # a Spark job over every type (12 s in the fast lane)
def test_create_makes_the_types_of_the_source_read_backwards(pg_schema, pg_env):
    spark = local_spark()
    df = spark.sql(
        "SELECT CAST(1 AS BIGINT) AS big, CAST(2 AS INT) AS i, CAST(3 AS SMALLINT) AS small, "
        "CAST(1.5 AS DOUBLE) AS d, CAST(2.5 AS FLOAT) AS f, CAST('12.34' AS DECIMAL(12,2)) AS amount, "
        "true AS flag, 'héllo' AS s, CAST('hi' AS BINARY) AS bin, DATE'2024-02-29' AS day, "
        "TIMESTAMP'2024-01-02 03:04:05.123456 UTC' AS at, TIMESTAMP_NTZ'2024-01-02 03:04:05' AS local_at, "
        "array(1, NULL, 3) AS ints, array('a', 'b\"c') AS words, named_struct('x', 1, 'y', 'z') AS doc, "
        "CAST(NULL AS STRING) AS nothing"
    )
    table = f"{pg_schema}.typed"
    assert sink.write(
        df, config(pg_env, table, "replace", create=True), attempt_key="r-1", publish=accept, env=pg_env
    )

    types = dict(
        query(
            "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute "
            "WHERE attrelid = %s::regclass AND attnum > 0",
            table,
        )
    )
    assert types == {
        "big": "bigint",
        "i": "integer",
        "small": "smallint",
        "d": "double precision",
        "f": "real",
        "amount": "numeric(12,2)",
        "flag": "boolean",
        "s": "text",
        "bin": "bytea",
        "day": "date",
        "at": "timestamp with time zone",
        "local_at": "timestamp without time zone",
        "ints": "integer[]",
        "words": "text[]",
        "doc": "jsonb",
        "nothing": "text",
    }
    (row,) = query(f"SELECT * FROM {table}")
    assert row == (
        1,
        2,
        3,
        1.5,
        2.5,
        decimal.Decimal("12.34"),
        True,
        "héllo",
        b"hi",
        datetime.date(2024, 2, 29),
        datetime.datetime(2024, 1, 2, 3, 4, 5, 123456, tzinfo=datetime.UTC),
        datetime.datetime(2024, 1, 2, 3, 4, 5),
        [1, None, 3],
        ["a", 'b"c'],
        {"x": 1, "y": "z"},
        None,
    )


def test_an_upsert_keeps_the_last_row_of_each_key_in_the_order_sent(pg_schema, pg_env):
    table = f"{pg_schema}.latest"
    cfg = config(pg_env, table, "upsert", key=["id"], create=True)
    first = pa.table({"id": [1, 2, 1, 3], "v": ["a", "b", "c", "d"]})
    sink.append_table(first, cfg, epoch_key="s-00000001", publish=accept, env=pg_env)
    second = pa.table({"id": [3, 4, 3], "v": ["e", "f", "g"]})
    sink.append_table(second, cfg, epoch_key="s-00000002", publish=accept, env=pg_env)
    sink.append_table(second, cfg, epoch_key="s-00000001", publish=accept, env=pg_env)  # an old epoch: done

    assert query(f"SELECT id, v FROM {table} ORDER BY id") == [(1, "c"), (2, "b"), (3, "g"), (4, "f")]


@pytest.mark.slow  # a Spark job and a reader racing it (5 s in the fast lane)
def test_a_reader_sees_a_replaced_table_whole_before_or_after_never_half(pg_schema, pg_env, tmp_path):
    table = f"{pg_schema}.swapped"
    cfg = config(pg_env, table, "replace", create=True)
    runs = {"a": 150_000, "b": 90_000}
    files = {}
    for tag, size in runs.items():
        path = tmp_path / f"{tag}.parquet"
        pq.write_table(pa.table({"id": pa.array(range(size), pa.int64()), "tag": [tag] * size}), path)
        files[tag] = path
    sink.write_landed(
        [str(files["a"])], pq.read_schema(files["a"]), cfg, attempt_key="run0-1", publish=accept, env=pg_env
    )

    seen: list[tuple] = []
    stop = threading.Event()

    def read() -> None:
        with psycopg.connect(postgres_url(), autocommit=True) as conn:
            while not stop.is_set():
                seen.append(conn.execute(f"SELECT count(*), min(tag), max(tag) FROM {table}").fetchone())

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for n in range(1, 7):
            tag = "b" if n % 2 else "a"
            sink.write_landed(
                [str(files[tag])],
                pq.read_schema(files[tag]),
                cfg,
                attempt_key=f"run{n}-1",
                publish=accept,
                env=pg_env,
            )
    finally:
        stop.set()
        reader.join()

    assert seen
    wholes = {(size, tag, tag) for tag, size in runs.items()}
    halves = [s for s in seen if s not in wholes]
    assert halves == [], f"{len(halves)} reads saw a half-replaced table, e.g. {halves[:3]}"
    assert query(f"SELECT count(*), min(tag) FROM {table}") == [(runs["a"], "a")]  # run 6 replaced run 5


def test_a_run_that_fails_at_its_move_leaves_the_old_rows(pg_schema, pg_env):
    table = f"{pg_schema}.kept"
    query(f"CREATE TABLE {table} (id bigint, v smallint)")
    cfg = config(pg_env, table, "replace")
    ok = pa.table({"id": pa.array([1, 2], pa.int64()), "v": pa.array([1, 2], pa.int64())})
    too_big = pa.table({"id": pa.array([3, 4], pa.int64()), "v": pa.array([5, 70_000], pa.int64())})
    assert _write_table(ok, cfg, pg_env, "r1-1")
    with pytest.raises(psycopg.errors.NumericValueOutOfRange):
        _write_table(too_big, cfg, pg_env, "r2-1")
    assert query(f"SELECT id, v FROM {table} ORDER BY id") == [(1, 1), (2, 2)]
    assert staging_tables(pg_schema) == []


def _write_table(table: pa.Table, cfg, env, attempt_key: str) -> bool:
    with tempfile.NamedTemporaryFile(suffix=".parquet") as f:
        pq.write_table(table, f.name)
        return sink.write_landed(
            [f.name], table.schema, cfg, attempt_key=attempt_key, publish=accept, env=env
        )


@pytest.mark.django_db
def test_the_api_refuses_a_url_from_a_user_who_is_not_staff():
    from tests.dataflow.api.conftest import client_of  # noqa: PLC0415
    from tests.factories import UserFactory  # noqa: PLC0415

    alice = UserFactory(username="alice")
    body = {
        "name": "mine",
        "source": {"type": "sequence", "count": 10},
        "transform": {"sql": "SELECT * FROM source"},
        "sink": {"type": "postgres", "url": postgres_url(), "table": "public.auth_user", "mode": "append"},
    }

    response = client_of(alice).post("/api/flows/", body, format="json")

    assert response.status_code == 400, response.content
    assert "only staff may give an address" in response.json()["sink.url"][0]


@pytest.mark.django_db
def test_the_api_refuses_a_users_sink_outside_her_connection_or_on_the_deployments_tables(settings):
    from django.db import connection as django_connection  # noqa: PLC0415

    from tests.dataflow.api.conftest import client_of  # noqa: PLC0415
    from tests.factories import ConnectionFactory, UserFactory  # noqa: PLC0415

    settings.DATAFLOW_ALLOWED_INTERNAL_ADDRESSES = ["127.0.0.1"]
    db = django_connection.settings_dict
    alice = UserFactory(username="alice")
    ConnectionFactory(
        name="shop-db",
        type="postgres",
        url=f"postgres://{db['USER']}@127.0.0.1:{db['PORT'] or 5432}/{db['NAME']}",
        key_patterns=["analytics.*", "public.*"],
        users=[alice],
    )
    api = client_of(alice)

    def refusal(table: str) -> tuple[int, dict]:
        body = {
            "name": f"mine-{table.replace('.', '-')}",
            "source": {"type": "sequence", "count": 10},
            "transform": {"sql": "SELECT * FROM source"},
            "sink": {
                "type": "postgres",
                "connection": "shop-db",
                "table": table,
                "mode": "append",
                "create": True,
            },
        }
        response = api.post("/api/flows/", body, format="json")
        return response.status_code, response.json()

    status, body = refusal("billing.invoices")
    assert status == 400 and "sink.table" in body, body
    status, body = refusal("public.auth_user")
    assert status == 400 and "sink.table" in body, body
    status, body = refusal("analytics.totals")
    assert status == 201, body


def test_the_staging_of_a_write_is_measured_while_it_waits_to_publish(pg_schema, pg_env, tmp_path):
    # A column of another type than the rows are sent in (bigint): the rows are staged.
    query(f"CREATE TABLE {pg_schema}.measured (id numeric(20,0))")
    cfg = config(pg_env, f"{pg_schema}.measured", "append")
    path = tmp_path / "rows.parquet"
    pq.write_table(pa.table({"id": pa.array(range(20_000), pa.int64())}), path)
    measured: list[int | None] = []

    def publish(rows: int, swap) -> bool:
        measured.append(sink.staging_bytes(cfg, "run1-1"))
        swap()
        return True

    assert sink.write_landed(
        [str(path)], pq.read_schema(path), cfg, attempt_key="run1-1", publish=publish, env=pg_env
    )

    assert measured[0] is not None and measured[0] > 20_000 * 8
    assert sink.staging_bytes(cfg, "run1-1") == 0  # dropped once published


def test_a_streams_landed_epochs_are_added_once_each_whatever_repeats(pg_schema, pg_env, tmp_path):
    table = f"{pg_schema}.events"
    cfg = config(pg_env, table, "append", create=True)
    paths = []
    for n in range(3):
        path = tmp_path / f"landed-{n}.parquet"
        pq.write_table(pa.table({"id": pa.array(range(n * 100, n * 100 + 100), pa.int64())}), path)
        paths.append(str(path))
    schema = pq.read_schema(paths[0])

    def add(epoch: int, files: list[str], publish=accept) -> bool:
        return sink.append_landed(
            files, schema, cfg, epoch_key=f"0123abcd-{epoch:08d}", publish=publish, env=pg_env
        )

    assert add(1, paths[:2])
    assert add(1, paths[:2])  # the same epoch again: published, nothing added
    assert not add(2, paths[2:], publish=lambda rows, swap: False)  # a stale attempt
    assert add(2, paths[2:])

    assert query(f"SELECT count(*), count(DISTINCT id), min(id), max(id) FROM {table}") == [
        (300, 300, 0, 299)
    ]
    assert staging_tables(pg_schema) == []


def test_the_deployments_tables_and_tables_outside_a_connections_patterns_are_never_written(tmp_path):
    from connectors.postgres.sink import sink_target  # noqa: PLC0415
    from source_support.connections import ConnectionTarget  # noqa: PLC0415
    from source_support.registry import Environment  # noqa: PLC0415

    shop = ConnectionTarget(
        name="shop-db", type="postgres", url=postgres_url(), key_patterns=("analytics.*",)
    )
    env = Environment(
        allowed_roots=(tmp_path,),
        base_dir=tmp_path,
        connections={"shop-db": shop},
        reserved_tables=("*.auth_*", "*.adf_sink_ledger", "*.adf_staging_*"),
    )
    with pytest.raises(ConfigError, match="deployment itself uses") as refused:
        sink.validate({"url": postgres_url(), "table": "public.Auth_User", "mode": "append"}, env)
    assert refused.value.field == "sink.table"
    with pytest.raises(ConfigError, match="the sink itself uses"):
        sink.validate({"url": postgres_url(), "table": "analytics.adf_staging_x", "mode": "append"}, env)

    mine = sink.validate({"connection": "shop-db", "table": "analytics.totals", "mode": "append"}, env)
    assert str(sink_target(mine, env).table) == "analytics.totals"
    theirs = sink.validate({"connection": "shop-db", "table": "public.orders", "mode": "append"}, env)
    with pytest.raises(ConfigError, match="outside the tables its connection allows") as refused:
        sink_target(theirs, env)  # at run time, whatever the spec layer let through
    assert refused.value.field == "sink.table"


def test_landed_files_are_staged_in_their_decimal_type_where_the_table_casts_and_each_row_written_once(
    pg_schema, pg_env, tmp_path
):
    schema = pa.schema([("id", pa.int64()), ("amount", pa.decimal128(12, 2)), ("note", pa.string())])
    paths = []
    for n in range(5):  # more files than staging connections: each a COPY of its own
        ids = range(n * 1000, (n + 1) * 1000)
        table = pa.table(
            {
                "id": pa.array(ids, pa.int64()),
                "amount": pa.array([decimal.Decimal(i).scaleb(-2) - 5 for i in ids], pa.decimal128(12, 2)),
                "note": [None if i % 7 == 0 else f"n{i}" for i in ids],
            },
            schema=schema,
        )
        pq.write_table(table, tmp_path / f"part-{n}.parquet")
        paths.append(str(tmp_path / f"part-{n}.parquet"))
    query(f"CREATE TABLE {pg_schema}.wider (id bigint, amount numeric(14,4), note text)")
    for name in ("created", "wider"):
        cfg = config(pg_env, f"{pg_schema}.{name}", "append", create=True)
        staged_types: list[tuple] = []

        def publish(rows: int, swap, staged_types: list[tuple] = staged_types) -> bool:
            staged_types.extend(
                query(
                    "SELECT a.attname, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a "
                    "JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace s ON s.oid = c.relnamespace "
                    "WHERE s.nspname = %s AND c.relname LIKE 'adf_staging%%' AND a.attname = 'amount'",
                    pg_schema,
                )
            )
            swap()
            return True

        assert sink.write_landed(paths, schema, cfg, attempt_key=f"run-{name}-1", publish=publish, env=pg_env)

        # The table made for the rows takes them as sent (no staging); the wider one casts.
        assert staged_types == ([] if name == "created" else [("amount", "numeric(12,2)")])
        rows = query(f"SELECT id, amount, note FROM {pg_schema}.{name} ORDER BY id")
        assert len(rows) == 5000
        assert rows == [
            (i, decimal.Decimal(i).scaleb(-2) - 5, None if i % 7 == 0 else f"n{i}") for i in range(5000)
        ]
        ledger = query(
            f"SELECT rows FROM {pg_schema}.adf_sink_ledger WHERE target = %s", f"{pg_schema}.{name}"
        )
        assert ledger == [(5000,)]
