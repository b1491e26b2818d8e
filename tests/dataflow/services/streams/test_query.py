"""What an epoch of the streaming transform may run a query over, read from the query alone."""

from __future__ import annotations

import pytest
from sqlglot import exp

from dataflow.services.streams.query import (
    ANONYMOUS_AGGREGATES,
    QueryKind,
    stream_query_check,
    stream_query_classify,
)
from dataflow.transform_policy import transform_policy_check
from source_support.errors import ConfigError

SCHEMA = "id BIGINT, customer STRING, amount DOUBLE, ts TIMESTAMP, day DATE, tags ARRAY<STRING>"


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM source",
        "SELECT id, upper(customer) AS who FROM source WHERE amount > 3",
        "WITH big AS (SELECT * FROM source WHERE amount > 100) SELECT id FROM big",
        "SELECT id FROM source UNION ALL SELECT id + 1 FROM source",
        "SELECT id, explode(tags) AS tag FROM source",
        "SELECT id, tag FROM source LATERAL VIEW explode(tags) t AS tag",
        "SELECT * FROM (SELECT id, amount * 2 AS doubled FROM source) AS d WHERE doubled > 1",
        "SELECT /*+ REPARTITION(4) */ * FROM source DISTRIBUTE BY customer SORT BY id",
        "SELECT id, CASE WHEN amount > 1 THEN 'big' ELSE 'small' END AS size FROM source",
    ],
)
def test_a_query_of_each_row_alone_is_stateless(sql):
    assert stream_query_classify(sql).kind == QueryKind.STATELESS


@pytest.mark.parametrize(
    ("sql", "column", "size_ms"),
    [
        (
            "SELECT window.start AS ws, window.end AS we, customer, sum(amount) AS total "
            "FROM source GROUP BY window(ts, '10 seconds'), customer",
            "ts",
            10_000,
        ),
        ("SELECT window(ts, '1 minute') AS w, count(*) AS n FROM source GROUP BY w", "ts", 60_000),
        ("SELECT window(ts, '500 ms') AS w, count(*) AS n FROM source GROUP BY 1", "ts", 500),
        ("SELECT window(s.ts, '2 hours') AS w, count(*) AS n FROM source s GROUP BY w", "ts", 7_200_000),
        (
            "SELECT window(ts, '10 seconds', '10 seconds') AS w, count(DISTINCT customer) AS buyers "
            "FROM source WHERE amount > 0 GROUP BY window(ts, '10 seconds', '10 seconds') HAVING count(*) > 1",
            "ts",
            10_000,
        ),
        (
            "SELECT * FROM (SELECT window(ts, '10 seconds') AS w, count(*) AS n FROM source GROUP BY w) "
            "WHERE n > 2",
            "ts",
            10_000,
        ),
        (
            "SELECT window(TS, 'interval 5 seconds') AS w, percentile(amount, 0.5) AS p "
            "FROM source GROUP BY w",
            "TS",
            5_000,
        ),
    ],
)
def test_a_group_by_a_tumbling_event_time_window_is_a_window_query(sql, column, size_ms):
    query = stream_query_classify(sql)

    assert (query.kind, query.time_column, query.window_ms) == (QueryKind.WINDOW, column, size_ms)


@pytest.mark.parametrize(
    ("sql", "reason"),
    [
        ("SELECT count(*) AS n FROM source", "aggregate without GROUP BY"),
        ("SELECT customer, sum(amount) AS s FROM source GROUP BY customer", "GROUP BY without an event-time"),
        ("SELECT DISTINCT customer FROM source", "DISTINCT"),
        ("SELECT * FROM source ORDER BY id", "ORDER BY"),
        ("SELECT * FROM source LIMIT 10", "LIMIT"),
        ("SELECT id FROM source UNION SELECT id FROM source", "UNION (without ALL)"),
        ("SELECT id FROM source INTERSECT SELECT id FROM source", "INTERSECT"),
        ("SELECT id FROM source EXCEPT SELECT id FROM source", "EXCEPT"),
        ("SELECT a.id FROM source a JOIN source b ON a.id = b.id", "join"),
        ("SELECT id, row_number() OVER (PARTITION BY customer ORDER BY ts) AS r FROM source", "OVER"),
        ("SELECT * FROM source WHERE id IN (SELECT id FROM source WHERE amount > 9)", "subquery"),
        ("SELECT * FROM source WHERE EXISTS (SELECT 1 FROM source WHERE amount > 9)", "subquery"),
        ("SELECT id, (SELECT max(amount) FROM source) AS top FROM source", "subquery"),
        ("SELECT 1 AS one", "VALUES, a SELECT without FROM"),
        ("SELECT id FROM source UNION ALL VALUES (7)", "VALUES"),
        (
            "SELECT window(ts, '10 seconds', '5 seconds') AS w, count(*) AS n FROM source GROUP BY w",
            "sliding window",
        ),
        (
            "SELECT window(ts, '10 seconds', '10 seconds', '2 seconds') AS w, count(*) AS n "
            "FROM source GROUP BY w",
            "tumbling window over a column",
        ),
        (
            "SELECT session_window(ts, '10 seconds') AS w, count(*) AS n FROM source GROUP BY w",
            "session window",
        ),
        (
            "SELECT max(n) AS most FROM (SELECT window(ts, '10 seconds') AS w, count(*) AS n "
            "FROM source GROUP BY w)",
            "aggregate without GROUP BY",
        ),
        (
            "SELECT window(t, '10 seconds') AS w, count(*) AS n "
            "FROM (SELECT ts + INTERVAL 1 HOUR AS t FROM source) GROUP BY w",
            "computed by the query",
        ),
        (
            "SELECT window(ts, '1 month') AS w, count(*) AS n FROM source GROUP BY w",
            "duration must be a literal",
        ),
        (
            "SELECT window(ts, '10 seconds') AS w, customer, count(*) AS n FROM source "
            "GROUP BY ROLLUP(window(ts, '10 seconds'), customer)",
            "ROLLUP",
        ),
        (
            "SELECT * FROM source PIVOT (sum(amount) FOR customer IN ('a', 'b'))",
            "PIVOT",
        ),
    ],
)
def test_a_query_whose_result_needs_every_row_needs_the_whole_input(sql, reason):
    query = stream_query_classify(sql)

    assert query.kind == QueryKind.WHOLE_INPUT
    assert reason in query.reason


# Spark's aggregate functions, each called as a query would call it.
AGGREGATE_CALLS = [
    "any(b)",
    "any_value(x)",
    "approx_count_distinct(x)",
    "approx_percentile(x, 0.5)",
    "array_agg(x)",
    "avg(x)",
    "bit_and(i)",
    "bit_or(i)",
    "bit_xor(i)",
    "bitmap_construct_agg(i)",
    "bitmap_or_agg(b)",
    "bool_and(b)",
    "bool_or(b)",
    "collect_list(x)",
    "collect_set(x)",
    "corr(x, y)",
    "count(x)",
    "count_if(b)",
    "count_min_sketch(x, 0.1, 0.9, 1)",
    "covar_pop(x, y)",
    "covar_samp(x, y)",
    "every(b)",
    "first(x)",
    "first_value(x)",
    "grouping_id()",
    "histogram_numeric(x, 5)",
    "hll_sketch_agg(x)",
    "hll_union_agg(b)",
    "kurtosis(x)",
    "last(x)",
    "last_value(x)",
    "listagg(s)",
    "max(x)",
    "max_by(x, y)",
    "mean(x)",
    "median(x)",
    "min(x)",
    "min_by(x, y)",
    "mode(x)",
    "percentile(x, 0.5)",
    "percentile_approx(x, 0.5)",
    "regr_avgx(y, x)",
    "regr_avgy(y, x)",
    "regr_count(y, x)",
    "regr_intercept(y, x)",
    "regr_r2(y, x)",
    "regr_slope(y, x)",
    "regr_sxx(y, x)",
    "regr_sxy(y, x)",
    "regr_syy(y, x)",
    "skewness(x)",
    "some(b)",
    "std(x)",
    "stddev(x)",
    "stddev_pop(x)",
    "stddev_samp(x)",
    "string_agg(s)",
    "sum(x)",
    "try_avg(x)",
    "try_sum(x)",
    "var_pop(x)",
    "var_samp(x)",
    "variance(x)",
]


@pytest.mark.parametrize("call", AGGREGATE_CALLS)
def test_every_spark_aggregate_makes_a_query_an_aggregation(call):
    query = stream_query_classify(f"SELECT {call} AS a FROM source")

    assert query.kind == QueryKind.WHOLE_INPUT, call


def test_the_anonymous_aggregates_are_exactly_those_sqlglot_does_not_know():
    anonymous = set()
    for call in AGGREGATE_CALLS:
        node = transform_policy_check(f"SELECT {call} AS a FROM source").expressions[0].this
        if isinstance(node, exp.Anonymous):
            anonymous.add(node.name.lower())
        else:
            assert isinstance(node, (exp.AggFunc, exp.Any)), call

    assert anonymous == ANONYMOUS_AGGREGATES


def test_a_query_that_needs_the_whole_input_is_refused_without_a_stop_rule():
    with pytest.raises(ConfigError) as refused:
        stream_query_check(
            "SELECT customer, count(*) AS n FROM source GROUP BY customer", has_stop_rule=False
        )

    assert refused.value.field == "transform.sql"
    assert "only when the input ends" in refused.value.reason
    assert "[stop]" in refused.value.reason and "window(ts" in refused.value.reason


def test_a_query_that_needs_the_whole_input_is_accepted_with_a_stop_rule():
    stream_query_check("SELECT count(*) AS n FROM source", has_stop_rule=True)


@pytest.mark.parametrize(
    "sql", ["SELECT * FROM source", "SELECT window(ts, '1 minute') AS w, count(*) FROM source GROUP BY w"]
)
def test_stateless_and_window_queries_need_no_stop_rule(sql):
    stream_query_check(sql, has_stop_rule=False, schema_ddl=SCHEMA)


@pytest.mark.parametrize(
    ("column", "message"),
    [
        ("day", "'day' is date32[day], not a TIMESTAMP column"),
        ("amount", "'amount' is double, not a TIMESTAMP column"),
        ("when_", "'when_' is not a column of the schema"),
    ],
)
def test_a_window_time_column_must_be_a_timestamp_of_the_schema(column, message):
    sql = f"SELECT window({column}, '1 minute') AS w, count(*) AS n FROM source GROUP BY w"

    with pytest.raises(ConfigError) as refused:
        stream_query_check(sql, has_stop_rule=False, schema_ddl=SCHEMA)

    assert refused.value.field == "transform.sql"
    assert message in refused.value.reason


def test_the_time_column_is_matched_without_regard_to_case():
    stream_query_check(
        "SELECT window(TS, '1 minute') AS w, count(*) AS n FROM source GROUP BY w",
        has_stop_rule=False,
        schema_ddl=SCHEMA,
    )
