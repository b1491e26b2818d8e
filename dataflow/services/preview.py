"""Preview: a flow's transform over a few real records of its source, before it runs.

``flow_preview`` holds a spec to the rules a run is held to (``flow_spec_validate`` with
the owner's connections and paths, the transform policy, the input checks a run starts
with), reads up to ``limit`` records through the real connector (``source_support.preview``:
nothing is landed, no checkpoint or consumer group is made, nothing is acknowledged
upstream) and runs the transform by Spark over them. It never writes a sink.
"""

from __future__ import annotations

import threading
from typing import Any

import pyarrow as pa
from django.conf import settings

from dataflow.services.environment import flow_environment
from dataflow.services.probes import bounded_number, probe_slot, within
from dataflow.services.runs.start import run_schema_resolve
from dataflow.services.specs import flow_spec_validate
from dataflow.services.streams.query import QueryKind, stream_query_classify
from dataflow.services.transform_check import transform_analyze
from dataflow.spark.errors import spark_error_message
from dataflow.spark.jobs import job_group, quiet_query_errors
from dataflow.spark.session import spark_job
from dataflow.transform_policy import SOURCE_VIEW
from source_support.errors import ConfigError
from source_support.formats import FormatSpec
from source_support.preview import PreviewRead, preview_read
from source_support.registry import BuildContext, build_source, source_is_unbounded
from source_support.schema import parse_ddl, spark_type

DEFAULT_LIMIT = 100
DEFAULT_TIMEOUT_S = 10.0
#: The shortest time limit: a connection takes a moment to open.
MIN_TIMEOUT_S = 0.5
FROM_CHOICES = ("start", "latest")
#: A bad record's raw text is cut to this many characters in the answer.
MAX_RAW_CHARS = 1000


def flow_preview(
    *,
    spec: dict[str, Any],
    owner,
    user=None,
    limit: object = None,
    timeout_s: object = None,
    start: object = None,
) -> dict[str, Any]:
    """The records of ``spec``'s source (up to ``limit``, default 100, at most
    ``DATAFLOW_PREVIEW_MAX_RECORDS``, read within ``timeout_s``, default 10 s, at most
    ``DATAFLOW_PREVIEW_MAX_SECONDS``; a stream's first or, ``start="latest"``, its newest),
    their schema (declared or inferred), every bad record with its reason and position,
    the transform's output rows and schema computed by Spark over those records, and the
    stream query classifier's verdict. ``owner``: the user whose connections and paths the
    spec may use (a stored flow's owner; None: the operator's). ``user``: who asks, held to
    ``DATAFLOW_PREVIEWS_PER_USER`` at once (TooManyAtOnce). ConfigError naming the field
    for a spec a run would refuse, a limit out of bounds, or a source that does not answer
    in time. Writes nothing anywhere."""
    most = settings.DATAFLOW_PREVIEW_MAX_RECORDS
    count = int(bounded_number(limit, field="limit", default=DEFAULT_LIMIT, least=1, most=most))
    if isinstance(limit, float) and not limit.is_integer():
        raise ConfigError("limit", "must be a whole number")
    seconds = bounded_number(
        timeout_s,
        field="timeout_s",
        default=DEFAULT_TIMEOUT_S,
        least=MIN_TIMEOUT_S,
        most=settings.DATAFLOW_PREVIEW_MAX_SECONDS,
    )
    where = "start" if start is None else start
    if where not in FROM_CHOICES:
        raise ConfigError("from", f"must be one of {', '.join(FROM_CHOICES)}, not {where!r}")
    values = flow_spec_validate(spec, owner=owner)
    with probe_slot(user=user, timeout_s=seconds):
        # The checks a run starts with, in this thread (they read the owner's connections);
        # each connector's own connect timeouts bound them.
        schema_ddl = run_schema_resolve(values, owner=owner)
        if not schema_ddl:
            read = PreviewRead(records=pa.table({}))
        else:
            source = _source(values, owner=owner, schema_ddl=schema_ddl, batch_size=count)
            read = within(
                seconds,
                lambda: preview_read(source, limit=count, timeout_s=seconds, latest=where == "latest"),
                field="source",
                what="the source",
            )
        records, cut = _within_bytes(read.records)
        output = _transform_output(values, records, schema_ddl=schema_ddl, limit=count, timeout_s=seconds)
    return {
        "flow": values["name"],
        "source": {
            "type": values["source_type"],
            "from": where,
            "splits": read.splits,
            "truncated": cut or read.truncated,
        },
        "schema": _columns(parse_ddl(schema_ddl)) if schema_ddl else [],
        "schema_origin": "declared" if "schema" in values["format_options"] else "inferred",
        "records": _rows(records),
        "bad_records": [
            {
                "position": bad.offset or str(bad.position),
                "line": bad.line,
                "reason": bad.reason,
                "raw": bad.raw[:MAX_RAW_CHARS],
            }
            for bad in read.bad_records
        ],
        "output": output,
        "query": _verdict(values),
        "limits": {"limit": count, "timeout_s": seconds},
    }


def _source(values: dict[str, Any], *, owner, schema_ddl: str, batch_size: int):
    context = BuildContext(
        env=flow_environment(values, owner=owner),
        batch_size=batch_size,
        schema=parse_ddl(schema_ddl),
        flow_name=values["name"],
        stop=values["stop_rule"],
        probe=True,
    )
    fmt = FormatSpec(values["format_type"], values["format_options"])
    return build_source(values["source_type"], values["source_config"], fmt, context)


def _within_bytes(records: pa.Table) -> tuple[pa.Table, str]:
    """``records`` cut to ``DATAFLOW_PREVIEW_MAX_BYTES``, and why if it was cut."""
    most = settings.DATAFLOW_PREVIEW_MAX_BYTES
    if records.num_rows == 0 or records.nbytes <= most:
        return records, ""
    keep = max(1, records.num_rows * most // records.nbytes)
    return records.slice(0, keep), f"the limit of {most} bytes (DATAFLOW_PREVIEW_MAX_BYTES)"


def _transform_output(
    values: dict[str, Any], records: pa.Table, *, schema_ddl: str, limit: int, timeout_s: float
) -> dict[str, Any]:
    """The transform's output over ``records`` (at most ``limit`` rows), or why it failed.
    Spark runs it in a job group of its own, cancelled after ``timeout_s``."""
    if not schema_ddl:
        return {
            "schema": [],
            "rows": [],
            "error": "the source holds nothing yet: no schema to run the transform on",
        }
    sql = values["transform_sql"]
    partition_by = values["sink_config"].get("partition_by") or []
    with spark_job() as spark:
        problem = transform_analyze(spark, sql=sql, schema_ddl=schema_ddl, partition_by=partition_by)
        if problem:
            return {"schema": [], "rows": [], "error": problem}
        name = f"preview-{threading.get_ident()}"
        with job_group(spark, name, f"preview of {values['name']}") as group:
            # A first job on a cold session takes seconds more than the reading's limit.
            timer = threading.Timer(max(timeout_s, settings.DATAFLOW_PREVIEW_MAX_SECONDS), group.cancel)
            timer.start()
            try:
                spark.createDataFrame(records, schema=schema_ddl).createOrReplaceTempView(SOURCE_VIEW)
                with quiet_query_errors():
                    output = spark.sql(sql).limit(limit).toArrow()
            except Exception as exc:  # noqa: BLE001 - Spark's errors (py4j's too): said in the answer
                reason = "cancelled at the time limit" if not timer.is_alive() else spark_error_message(exc)
                return {"schema": [], "rows": [], "error": f"transform.sql: {reason}"}
            finally:
                timer.cancel()
    output, _ = _within_bytes(output)
    return {"schema": _columns(output.schema), "rows": _rows(output), "error": ""}


def _verdict(values: dict[str, Any]) -> dict[str, Any]:
    """The stream query classifier's verdict on the transform, and what it means here."""
    query = stream_query_classify(values["transform_sql"])
    unbounded = source_is_unbounded(values["source_type"], values["source_config"])
    return {
        "kind": query.kind.value,
        "time_column": query.time_column,
        "window_ms": query.window_ms,
        "reason": query.reason,
        "needs_stop_rule": unbounded and query.kind == QueryKind.WHOLE_INPUT,
    }


def _columns(schema: pa.Schema) -> list[dict[str, str]]:
    return [{"name": f.name, "type": spark_type(f.type)} for f in schema]


def _rows(table: pa.Table) -> list[dict[str, Any]]:
    return [{k: _json_value(v) for k, v in row.items()} for row in table.to_pylist()]


def _json_value(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, dict):
        return {str(k): _json_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_value(v) for v in value]
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    return str(value)  # dates, times, decimals: as their text, the same in JSON and tables
