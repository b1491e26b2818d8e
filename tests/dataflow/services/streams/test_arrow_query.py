"""Stream epochs without Spark (``dataflow.services.streams.arrow_query``): every query the
Arrow plan takes gives, over the same landed file, the rows, names and types Spark gives
(nulls, NaN, infinities, -0.0, non-ASCII strings among them); every other query is left to
Spark. The differential half runs a real Spark session over the same Parquet file."""

from __future__ import annotations

import math

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dataflow.services.streams.arrow_query import arrow_plan
from dataflow.spark.session import spark_job
from source_support.schema import parse_ddl

SCHEMA = "id BIGINT, n INT, name STRING, x DOUBLE, flag BOOLEAN, day DATE"
ROWS = [
    {"id": 1, "n": 10, "name": "a", "x": 1.5, "flag": True},
    {"id": 2, "n": None, "name": "b", "x": float("nan"), "flag": False},
    {"id": None, "n": -3, "name": None, "x": None, "flag": None},
    {"id": 4, "n": 0, "name": "ä€", "x": float("inf"), "flag": True},
    {"id": -5, "n": 7, "name": "B", "x": -0.0, "flag": None},
    {"id": 6, "n": 2**31 - 1, "name": "", "x": -float("inf"), "flag": False},
    {"id": 7, "n": 1, "name": "abc", "x": 0.1, "flag": True},
]

TAKEN = [
    "SELECT * FROM source",
    "SELECT id, x FROM source WHERE id >= 0",
    "SELECT id AS k, name FROM source WHERE name IS NOT NULL",
    "SELECT * FROM source WHERE x > 1",
    "SELECT * FROM source WHERE x >= 0.1",
    "SELECT * FROM source WHERE 1 < x",
    "SELECT * FROM source WHERE NOT (x > 0.5)",
    "SELECT * FROM source WHERE x <= 0.1 OR x IS NULL",
    "SELECT * FROM source WHERE x = 1.5",
    "SELECT * FROM source WHERE x <> 1.5",
    "SELECT * FROM source WHERE x < -1e300",
    "SELECT id FROM source WHERE flag",
    "SELECT id FROM source WHERE NOT flag",
    "SELECT id FROM source WHERE flag = TRUE OR n > 5",
    "SELECT id FROM source WHERE (flag OR n > 5) AND id <> 7",
    "SELECT id FROM source WHERE name > 'B'",
    "SELECT id FROM source WHERE name = 'ä€'",
    "SELECT id FROM source WHERE n >= -3 AND n < 2147483647",
    "SELECT id FROM source WHERE id IS NULL",
    "SELECT source.id, `name` AS `the name` FROM source WHERE -5 = id",
    "select id from SOURCE where id != 4",
]

LEFT_TO_SPARK = [
    "SELECT id + 1 AS id FROM source",  # an expression
    "SELECT * FROM source WHERE x = 0",  # Spark's Parquet reader drops -0.0 (dictionary filter)
    "SELECT * FROM source WHERE x >= -0.0",
    "SELECT ID FROM source",  # a name that is not the schema's exactly
    "SELECT id, id FROM source",  # one output name twice
    "SELECT id FROM source WHERE id > 1.5",  # a decimal literal against an integer column
    "SELECT id FROM source WHERE id > 9999999999999999999",  # a DECIMAL literal
    "SELECT id FROM source WHERE name > 1",  # a string column against a number
    "SELECT id FROM source WHERE day > '2024-01-01'",  # a date against a string
    "SELECT id FROM source WHERE id > n",  # two columns
    "SELECT id FROM source WHERE id IN (1, 2)",
    "SELECT id FROM source WHERE name LIKE 'a%'",
    "SELECT id FROM source WHERE flag IS TRUE",
    "SELECT DISTINCT id FROM source",
    "SELECT id FROM source LIMIT 2",
    "SELECT id FROM source ORDER BY id",
    "SELECT count(*) AS n FROM source",
    "SELECT id FROM source s",
    "SELECT id FROM other",
    "WITH t AS (SELECT * FROM source) SELECT id FROM t",
    "SELECT id FROM source UNION ALL SELECT id FROM source",
    "SELECT a.id FROM source a JOIN source b ON a.id = b.id",
    "SELECT lower(name) AS name FROM source",
    "not sql at all (",
]


def comparable(table: pa.Table) -> list[tuple]:
    """Rows in a stable order, NaN and -0.0 kept apart from other values."""

    def key(value):
        if isinstance(value, float):
            return ("float", "nan" if math.isnan(value) else repr(value))
        return (type(value).__name__, repr(value))

    return sorted(tuple(key(v) for v in row.values()) for row in table.to_pylist())


@pytest.fixture(scope="module")
def landed(tmp_path_factory):
    path = tmp_path_factory.mktemp("landed") / "batch.parquet"
    pq.write_table(pa.Table.from_pylist(ROWS, schema=parse_ddl(SCHEMA)), path)
    return path


@pytest.mark.slow
def test_every_query_taken_gives_what_spark_gives(landed):
    plans = {sql: arrow_plan(sql, parse_ddl(SCHEMA)) for sql in TAKEN}
    assert [sql for sql, plan in plans.items() if plan is None] == []
    with spark_job() as spark:
        spark.read.schema(SCHEMA).parquet(str(landed)).createOrReplaceTempView("source")
        for sql, plan in plans.items():
            assert plan is not None
            ours = plan.read([str(landed)])
            theirs = spark.sql(sql).toArrow()
            assert ours.schema.names == theirs.schema.names, sql
            assert [f.type for f in ours.schema] == [f.type for f in theirs.schema], sql
            assert comparable(ours) == comparable(theirs), sql


@pytest.mark.parametrize("sql", LEFT_TO_SPARK)
def test_any_other_query_is_left_to_spark(sql):
    assert arrow_plan(sql, parse_ddl(SCHEMA)) is None


def test_a_schema_with_a_timestamp_or_decimal_is_left_to_spark():
    for ddl in (
        "id BIGINT, ts TIMESTAMP",
        "id BIGINT, amount DECIMAL(10,2)",
        "id BIGINT, tags ARRAY<STRING>",
    ):
        assert arrow_plan("SELECT id FROM source WHERE id > 0", parse_ddl(ddl)) is None
