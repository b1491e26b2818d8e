"""Checking a run's transform with Spark as the run starts, while its readers read.

Spark analyzes the query over an empty DataFrame of the run's schema: a column that does not
exist, a type that does not fit, a ``partition_by`` column the query does not output are
found in about a second (once the Spark session is up) instead of after the whole source was
read.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.errors import AnalysisException

from dataflow.models import FlowRun
from dataflow.services.expectations import expectations_analyze
from dataflow.services.schema_changes import run_landed_ddl
from dataflow.spark.jobs import quiet_query_errors
from dataflow.spark.session import spark_job
from dataflow.transform_policy import SOURCE_VIEW, transform_policy_check
from source_support.errors import ConfigError

# Defense in depth behind the allow-list: plan nodes that run code other than Spark's own
# expressions, or read something other than the view.
FORBIDDEN_PLAN_NODES = (
    "CallMethodViaReflection",
    "ScriptTransformation",
    "ScalaUDF",
    "PythonUDF",
    "HiveGenericUDF",
    "HiveSimpleUDF",
    "HiveGenericUDTF",
    "UnresolvedRelation",
)


def transform_check(*, run_id: int) -> str | None:
    """None if the run's transform fits its schema and sink, else why not.

    The message names the field (``transform.sql: ...``, ``sink.partition_by: ...``) and, for
    an analysis error, is Spark's own first line (the column and Spark's suggestion), without
    the Java stack trace. Runs Spark in this process: call it where Spark jobs run.
    """
    run = FlowRun.objects.get(pk=run_id)
    sql = run.spec["transform_sql"]
    partition_by = (run.spec.get("sink_config") or {}).get("partition_by") or []
    try:
        transform_policy_check(sql)
    except ConfigError as exc:
        return str(exc)
    if not run.schema_ddl:
        return None  # nothing was inferred (an empty source): the run itself says so
    with spark_job() as spark:
        # the landed columns: under rescue, _rescued too (evolve's columns are known only as read)
        return transform_analyze(
            spark,
            sql=sql,
            schema_ddl=run_landed_ddl(run),
            partition_by=partition_by,
            expectations=run.spec.get("expectations") or [],
        )


def transform_analyze(
    spark, *, sql: str, schema_ddl: str, partition_by: list[str], expectations: Sequence[dict[str, str]] = ()
) -> str | None:
    """Spark's analysis of ``sql`` over an empty view ``source`` of ``schema_ddl``.

    ``sql`` must have passed ``transform_policy_check``: Spark runs a command (SET, ADD JAR)
    as soon as it is given one.
    """
    spark.createDataFrame([], schema_ddl).createOrReplaceTempView(SOURCE_VIEW)
    try:
        with quiet_query_errors():
            frame = spark.sql(sql)
            names = frame.schema.fieldNames()
    except AnalysisException as exc:
        return f"transform.sql: {_first_line(exc)}"
    forbidden = _forbidden_plan_nodes(frame)
    if forbidden:
        return f"transform.sql: the analyzed query uses {', '.join(forbidden)}, which a transform may not use"
    lowered = {n.lower() for n in names}
    for column in partition_by:
        if column.lower() not in lowered:
            return (
                f"sink.partition_by: {column!r} is not a column of the transform's output "
                f"({', '.join(names)})"
            )
    with quiet_query_errors():
        return expectations_analyze(spark, frame, list(expectations))


def _first_line(exc: Exception) -> str:
    text = str(exc).strip()
    return text.splitlines()[0].rstrip(";").strip() if text else type(exc).__name__


def _forbidden_plan_nodes(frame) -> list[str]:
    jdf = getattr(frame, "_jdf", None)
    if jdf is None:
        return []  # Spark Connect: no plan on this side; the allow-list has checked the query
    try:
        plan = jdf.queryExecution().analyzed().toJSON()
    except Exception:  # noqa: BLE001 - a plan that cannot be shown as JSON; the allow-list has checked it
        return []
    return [name for name in FORBIDDEN_PLAN_NODES if f'.{name}"' in plan]
