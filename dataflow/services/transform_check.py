"""Checking a run's transform with Spark before any record is read.

Spark analyzes the query over an empty DataFrame of the run's schema: a column that does not
exist, a type that does not fit, a ``partition_by`` column the query does not output are
found in about a second instead of after the whole source was read.

A query that passes is then run once over a few made-up rows of the schema, read from and
written to Parquet in a scratch directory (``transform_warm_up``): a JVM's first Spark job
spends seconds loading Parquet's reader and writer and compiling the query's code, and this
way it spends them while the readers read, not after.
"""

from __future__ import annotations

import logging
import shutil

from dataflow.models import FlowRun, RunStatus
from dataflow.spark import milestone, quiet_query_errors
from dataflow.transform_policy import SOURCE_VIEW, transform_policy_check
from source_support.errors import ConfigError

log = logging.getLogger(__name__)

#: Rows of the warm-up job: enough for the JVM to compile the hot loops, cheap to make.
WARM_UP_ROWS = 100_000

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
    from dataflow.spark import spark_job

    with spark_job() as spark:
        return transform_analyze(spark, sql=sql, schema_ddl=run.schema_ddl, partition_by=partition_by)


def transform_warm_up(*, run_id: int) -> None:
    """Runs the run's transform over ``WARM_UP_ROWS`` made-up rows of its schema, from
    Parquet to Parquet in a scratch directory inside the run's landing directory (removed
    after), so that the real job finds Parquet's classes loaded and the query's code compiled.

    Only while the run is still reading (once it transforms, this would only compete with
    the real job), only with a local master (on a cluster it would hold the cluster's
    cores), and best effort: made-up rows may not suit a query (a cast, a division), and a
    failure here is logged at DEBUG and changes nothing. Publishes nothing.
    """
    from dataflow.services.runs import landing_zone, run_key
    from dataflow.spark import runs_beyond_this_process, spark_job

    run = FlowRun.objects.filter(pk=run_id, status=RunStatus.READING).first()
    if run is None or not run.schema_ddl or runs_beyond_this_process():
        return
    scratch = landing_zone().run_dir(run_key(run)) / "_warm-up"
    try:
        with spark_job() as spark, quiet_query_errors():
            _warm_up_job(
                spark, sql=run.spec["transform_sql"], schema_ddl=run.schema_ddl, scratch=str(scratch)
            )
        milestone("warm")
    except Exception as exc:  # noqa: BLE001 - a warm-up only saves time; the real job reports errors
        log.debug("run %s: transform warm-up failed: %s", run_id, _first_line(exc))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _warm_up_job(spark, *, sql: str, schema_ddl: str, scratch: str) -> None:
    from pyspark.sql import functions as F

    schema = spark.createDataFrame([], schema_ddl).schema
    rows = spark.range(0, WARM_UP_ROWS, numPartitions=2)
    rows.select(*(_made_up(F.col("id"), f.dataType).alias(f.name) for f in schema.fields)).write.parquet(
        f"{scratch}/in", compression="snappy"
    )
    spark.read.schema(schema_ddl).parquet(f"{scratch}/in").createOrReplaceTempView(SOURCE_VIEW)
    result = spark.sql(sql).observe("warm_up_rows", F.count(F.lit(1)).alias("rows"))
    result.write.parquet(f"{scratch}/out", compression="snappy")


def _made_up(i, data_type):
    """A column of ``data_type`` made from the row number ``i``: varied values for the
    common types, nulls for the others."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    if isinstance(data_type, T.BooleanType):
        return i % 2 == 0
    if isinstance(data_type, T.DecimalType):
        return (
            (i % 10).cast(data_type) if data_type.precision > data_type.scale else F.lit(None).cast(data_type)
        )
    if isinstance(data_type, (T.IntegralType, T.FractionalType)):
        return (i % 100).cast(data_type)
    if isinstance(data_type, T.StringType):
        return F.concat(F.lit("v"), (i % 50).cast("string"))
    if isinstance(data_type, (T.TimestampType, T.TimestampNTZType)):
        return F.timestamp_seconds(i).cast(data_type)
    if isinstance(data_type, T.DateType):
        return F.date_from_unix_date((i % 20_000).cast("int"))
    return F.lit(None).cast(data_type)


def transform_analyze(spark, *, sql: str, schema_ddl: str, partition_by: list[str]) -> str | None:
    """Spark's analysis of ``sql`` over an empty view ``source`` of ``schema_ddl``.

    ``sql`` must have passed ``transform_policy_check``: Spark runs a command (SET, ADD JAR)
    as soon as it is given one.
    """
    from pyspark.errors import AnalysisException

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
    return None


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
