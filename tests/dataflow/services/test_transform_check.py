"""A run's transform is analyzed by Spark over an empty DataFrame of its schema, as its readers read."""

from __future__ import annotations

import pytest

from dataflow.models import FlowRun
from dataflow.services.runs.transform import transform_check as run_transform_check
from dataflow.services.transform_check import transform_analyze, transform_check
from dataflow.spark.session import spark_job
from tests.factories import DataFlowFactory, FlowRunFactory, SplitFactory

SCHEMA = "`id` BIGINT, `country` STRING, `ts` TIMESTAMP, `user` STRUCT<`name`: STRING, `tags`: ARRAY<STRING>>"


@pytest.fixture()
def make_run(dirs):
    flow = DataFlowFactory()

    def make(sql: str, *, partition_by=None, schema_ddl: str = SCHEMA) -> int:
        # The spec as a run keeps it: checks made when the flow was saved may be older or,
        # with an inferred schema, may not have seen the columns.
        sink = {"path": str(dirs.out / "sink"), "compression": "snappy"}
        if partition_by:
            sink["partition_by"] = partition_by
        values = {"transform_sql": sql, "sink_type": "parquet", "sink_config": sink}
        return FlowRunFactory(flow=flow, running=True, spec=values, schema_ddl=schema_ddl).pk

    return make


@pytest.mark.django_db
def test_an_unknown_column_is_named_with_sparks_suggestion_and_no_stack_trace(make_run):
    message = transform_check(run_id=make_run("SELECT country, count(*) AS n FROM source GROUP BY contry"))

    assert message.startswith("transform.sql: [UNRESOLVED_COLUMN.WITH_SUGGESTION]")
    assert "`contry`" in message and "`country`" in message
    assert "\n" not in message and "org.apache" not in message


@pytest.mark.django_db
def test_a_partition_by_column_the_query_does_not_output_is_named(make_run):
    run_id = make_run("SELECT country, count(*) AS n FROM source GROUP BY country", partition_by=["contry"])

    assert transform_check(run_id=run_id) == (
        "sink.partition_by: 'contry' is not a column of the transform's output (country, n)"
    )


@pytest.mark.django_db
@pytest.mark.slow
def test_a_transform_that_fits_the_schema_passes(make_run):
    sql = (
        "SELECT country, user.name AS who, size(user.tags) AS tags, window(ts, '5 minutes') AS w "
        "FROM source WHERE id > 0"
    )

    assert transform_check(run_id=make_run(sql, partition_by=["COUNTRY"])) is None


@pytest.mark.django_db
def test_a_transform_outside_the_allow_list_is_refused_before_spark_sees_it(make_run):
    message = transform_check(run_id=make_run("SET spark.sql.runSQLOnFiles=true"))

    assert message.startswith("transform.sql: must be one SELECT query")
    with spark_job() as spark:
        assert spark.conf.get("spark.sql.runSQLOnFiles") == "false"


@pytest.mark.django_db
def test_reflection_is_refused_by_the_plan_check_too():
    with spark_job() as spark:
        message = transform_analyze(
            spark,
            sql="SELECT reflect('java.lang.System', 'getenv', 'HOME') AS h FROM source",
            schema_ddl=SCHEMA,
            partition_by=[],
        )

    assert message == (
        "transform.sql: the analyzed query uses CallMethodViaReflection, which a transform may not use"
    )


def test_spark_does_not_substitute_environment_variables_in_sql(monkeypatch):
    monkeypatch.setenv("ADF_TEST_SECRET", "s3cr3t")
    with spark_job() as spark:
        value = spark.sql("SELECT '${env:ADF_TEST_SECRET}' AS v").collect()[0].v

    assert value == "${env:ADF_TEST_SECRET}"


@pytest.mark.django_db
def test_a_refused_transform_fails_its_run_saying_it_was_refused_while_reading(make_run):
    # The check runs as readers read (they do not wait for Spark to start): what they read
    # meanwhile is counted, and the message must not say nothing was read.
    run_id = make_run("SELECT country, count(*) AS n FROM source GROUP BY contry")
    SplitFactory(run_id=run_id, records_read=26_115)

    run_transform_check(run_id=run_id)

    run = FlowRun.objects.get(pk=run_id)
    assert (run.status, run.records_read) == ("failed", 26_115)
    assert run.message.startswith("transform refused while reading: transform.sql: [UNRESOLVED_COLUMN")


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("check", "why"),
    [
        ("country", "is string, not a boolean"),
        ("humidity > 1", "humidity"),
        ("id > 0", None),
    ],
)
def test_spark_checks_each_expectation_over_the_output_as_the_run_starts(check, why):
    """What the save could not tell without Spark (a column's type; a column of a query
    whose output it could not name) is refused as the run starts, naming the expectation."""
    with spark_job() as spark:
        message = transform_analyze(
            spark,
            sql="SELECT * FROM source",
            schema_ddl=SCHEMA,
            partition_by=[],
            expectations=[{"name": "fine", "check": "id >= 0"}, {"name": "odd", "check": check}],
        )

    if why is None:
        assert message is None
    else:
        assert message is not None and message.startswith("expect[1].check: expectation 'odd': ")
        assert why in message
