"""Driving a run: enumerator ticks, reader slices, the Spark transform, and the end.

Celery tasks and ``runflow`` call these; the loops themselves live in
``source_support.runtime`` and are the same for every connector.
"""

from __future__ import annotations

import logging
import os
import socket

from django.conf import settings
from django.db import transaction
from django.db.models import Sum
from django.utils import timezone

from dataflow.models import (
    DataFlow,
    FlowRun,
    FlowStatus,
    LandedBatch,
    RunStatus,
    Split,
    SplitStatus,
)
from dataflow.redis_client import get_redis
from dataflow.store import DjangoRunStore
from source_support.coordination import RunCoordinator
from source_support.formats import FormatSpec
from source_support.landing import LandingZone
from source_support.registry import SINKS, build_source
from source_support.runtime import (
    ReaderSettings,
    SliceOutcome,
    SliceReport,
    TickResult,
    enumerator_start,
    enumerator_tick,
    reader_slice,
)
from source_support.schema import parse_ddl

log = logging.getLogger(__name__)

MAX_TRANSFORM_ATTEMPTS = 3
FINAL_FLOW_STATUS = {
    RunStatus.SUCCEEDED: FlowStatus.SUCCEEDED,
    RunStatus.FAILED: FlowStatus.FAILED,
    RunStatus.STOPPED: FlowStatus.STOPPED,
}


def coordinator_for(run: FlowRun | int) -> RunCoordinator:
    run_id = run if isinstance(run, int) else run.pk
    lease_ms = int(settings.DATAFLOW_READER_LEASE_SECONDS * 1000)
    return RunCoordinator(get_redis(), str(run_id), lease_ms=lease_ms)


def landing_zone() -> LandingZone:
    return LandingZone(settings.DATAFLOW_LANDING_ROOT, fsync=settings.DATAFLOW_LANDING_FSYNC)


def _source_for(run: FlowRun):
    from dataflow.services.specs import environment

    spec = run.spec
    schema = parse_ddl(run.schema_ddl) if run.schema_ddl else None
    return build_source(
        spec["source_type"],
        spec["source_config"],
        FormatSpec(spec["format_type"], spec["format_options"]),
        env=environment(),
        batch_size=spec["batch_size"],
        schema=schema,
    )


#: How long a tick may go on serving requests that keep arriving: a queued (Celery) tick,
#: and one run inline by a reader that asked for splits.
TICK_BUDGET_S = 5.0
INLINE_TICK_BUDGET_S = 1.0


def request_tick(*, run_id: int) -> None:
    """Asks for a prompt enumerator tick; at most one waits in the queue per run."""
    from dataflow import tasks

    if coordinator_for(run_id).mark_once("tick-queued", 30_000):
        tasks.tick_run.delay(run_id)


def run_tick(*, run_id: int) -> None:
    """One enumerator tick: serve split requests, reclaim lapsed leases, start missing
    readers, and hand the run to Spark once every split is finished."""
    coordinator_for(run_id).clear_mark("tick-queued")
    run = FlowRun.objects.select_related("flow").filter(pk=run_id).first()
    if run is None:
        return
    if run.status == RunStatus.TRANSFORMING:
        _ensure_transform(run)
        return
    if run.status != RunStatus.READING:
        return
    failed = Split.objects.filter(run=run, status=SplitStatus.FAILED).first()
    if failed is not None:
        run_finish(run=run, status=RunStatus.FAILED, message=f"split failed: {failed.error}")
        return
    coordinator = coordinator_for(run)
    parallelism = run.spec["parallelism"]
    result = _enumerate(run, _source_for(run), budget_s=TICK_BUDGET_S)
    if result is None:
        return
    if result.more:
        request_tick(run_id=run.pk)
    done = coordinator.done_readers()
    for subtask in range(parallelism):
        wanted = subtask not in done or result.pending > 0
        if subtask not in result.live and wanted and coordinator.claim_spawn(subtask):
            _enqueue_reader(run.pk, subtask, None)
    if result.exhausted and not Split.objects.filter(run=run).exclude(status=SplitStatus.FINISHED).exists():
        moved = FlowRun.objects.filter(pk=run.pk, status=RunStatus.READING).update(
            status=RunStatus.TRANSFORMING
        )
        if moved:
            coordinator.stop()  # readers still waiting for splits can go
            run.refresh_from_db()
            _ensure_transform(run)


def _enumerate(run: FlowRun, source, *, budget_s: float) -> TickResult | None:
    return enumerator_tick(
        source=source,
        coordinator=coordinator_for(run),
        store=DjangoRunStore(run),
        parallelism=run.spec["parallelism"],
        atomic=transaction.atomic,
        budget_s=budget_s,
    )


def run_prepare(run: FlowRun) -> None:
    """Discovers the run's splits as it starts (inside the transaction that creates it)."""
    enumerator_start(
        source=_source_for(run),
        coordinator=coordinator_for(run),
        store=DjangoRunStore(run),
        parallelism=run.spec["parallelism"],
    )


def serve_split_requests(run: FlowRun, source) -> None:
    """Runs the enumerator in the thread of a reader that just asked for splits, so the
    request does not wait for a free worker slot behind other readers. If another tick is
    at work, that tick serves the request; what a short budget leaves goes to a queued tick."""
    result = _enumerate(run, source, budget_s=INLINE_TICK_BUDGET_S)
    if result is not None and result.more:
        request_tick(run_id=run.pk)


def flow_tick(*, flow_id: int) -> None:
    """The periodic tick of a flow: ticks its active run, if it has one; the tick of a
    flow that no longer exists removes itself from the schedule."""
    from dataflow.services.flows import flow_schedule_remove_orphan

    run = FlowRun.objects.filter(
        flow_id=flow_id, status__in=[RunStatus.READING, RunStatus.TRANSFORMING]
    ).first()
    if run is not None:
        run_tick(run_id=run.pk)
    else:
        flow_schedule_remove_orphan(flow_id=flow_id)


def read_slice(*, run_id: int, subtask: int, token: str | None) -> SliceReport:
    """One time slice of reader ``subtask`` of a run (see ``source_support.runtime``)."""
    run = FlowRun.objects.filter(pk=run_id, status=RunStatus.READING).first()
    if run is None:
        return SliceReport(SliceOutcome.STOPPED, token)
    spec = run.spec
    source = _source_for(run)
    report = reader_slice(
        source=source,
        coordinator=coordinator_for(run),
        store=DjangoRunStore(run),
        landing=landing_zone(),
        run_key=str(run.pk),
        subtask=subtask,
        token=token,
        settings=ReaderSettings(
            slice_seconds=settings.DATAFLOW_READER_SLICE_SECONDS,
            poll_interval_s=spec["poll_interval_ms"] / 1000,
            skip_errors=spec["skip_errors"],
            park_seconds=settings.DATAFLOW_READER_PARK_SECONDS,
            location=f"{socket.gethostname()}:{os.getpid()}",
        ),
        on_split_request=lambda: serve_split_requests(run, source),
    )
    if report.outcome in (SliceOutcome.DONE, SliceOutcome.STOPPED):
        request_tick(run_id=run_id)
    return report


def _enqueue_reader(run_id: int, subtask: int, token: str | None) -> None:
    from dataflow import tasks

    tasks.read_splits.delay(run_id, subtask, token)


# The transform.


def _ensure_transform(run: FlowRun) -> None:
    """Queues the Spark job unless one is running or its retry backoff has not passed."""
    coordinator = coordinator_for(run)
    if coordinator.is_set("transform-lease"):
        return
    if _in_backoff(run):
        return
    if coordinator.mark_once("transform-queued", 60_000):
        from dataflow import tasks

        tasks.run_transform.delay(run.pk)


def _in_backoff(run: FlowRun) -> bool:
    """True while a failed transform attempt waits before the next (2, 4, 8... s, at most 60)."""
    if not (run.transform_attempts and run.transform_started_at):
        return False
    backoff = min(60, 2**run.transform_attempts)
    return (timezone.now() - run.transform_started_at).total_seconds() < backoff


def transform(*, run_id: int) -> None:
    """Runs the flow's Spark SQL over everything the run landed and commits the sink.

    A deterministic error (the SQL does not fit the data) fails the run at once; any other
    error is retried with backoff up to ``MAX_TRANSFORM_ATTEMPTS``, from the same landed
    files, so a retry writes exactly what the first attempt would have.
    """
    coordinator = coordinator_for(run_id)
    coordinator.clear_mark("transform-queued")
    run = FlowRun.objects.select_related("flow").filter(pk=run_id, status=RunStatus.TRANSFORMING).first()
    if run is None:
        return
    lease_ms = int(settings.DATAFLOW_TRANSFORM_LEASE_SECONDS * 1000)
    with coordinator.held_lease("transform-lease", lease_ms) as held:
        if not held:
            return
        run.refresh_from_db()  # a task queued before the last attempt ended must not skip its backoff
        if run.status != RunStatus.TRANSFORMING or _in_backoff(run):
            return
        FlowRun.objects.filter(pk=run.pk).update(
            transform_attempts=run.transform_attempts + 1,
            transform_started_at=timezone.now(),
        )
        try:
            rows, message = _run_spark_job(run)
        except Exception as exc:  # noqa: BLE001 - every failure is reported on the run
            _transform_failed(run, exc)
            return
        run_finish(run=run, status=RunStatus.SUCCEEDED, message=message, rows_written=rows)


def _run_spark_job(run: FlowRun) -> tuple[int | None, str]:
    from dataflow.spark import spark_job

    spec = run.spec
    if not run.schema_ddl:
        return None, "no input files matched; the sink was left as it was"
    paths = list(
        LandedBatch.objects.filter(split__run=run)
        .order_by("split_id", "start_position")
        .values_list("path", flat=True)
    )
    # A session of its own: its view "source" is not another run's, and on a cluster the
    # application ends with the job (see dataflow/spark.py).
    with spark_job() as spark:
        if paths:
            frame = spark.read.schema(run.schema_ddl).parquet(*paths)
        else:
            frame = spark.createDataFrame([], run.schema_ddl)
        frame.createOrReplaceTempView("source")
        result = spark.sql(spec["transform_sql"])
        rows = SINKS[spec["sink_type"]].write(result, spec["sink_config"], run_key=str(run.pk))
    return rows, ""


def _transform_failed(run: FlowRun, exc: Exception) -> None:
    message = _spark_error_message(exc)
    run.refresh_from_db()
    deterministic = type(exc).__name__ in (
        "AnalysisException",
        "ParseException",
        "IllegalArgumentException",
    )
    if deterministic or run.transform_attempts >= MAX_TRANSFORM_ATTEMPTS:
        run_finish(run=run, status=RunStatus.FAILED, message=f"transform failed: {message}")
    else:
        log.warning(
            "run %s: transform attempt %s failed: %s",
            run.pk,
            run.transform_attempts,
            message,
        )
        FlowRun.objects.filter(pk=run.pk).update(message=f"transform attempt failed, will retry: {message}")


def _spark_error_message(exc: Exception) -> str:
    text = str(exc).strip()
    first = text.splitlines()[0] if text else type(exc).__name__
    return first[:2000]


def run_finish(*, run: FlowRun, status: str, message: str = "", rows_written: int | None = None) -> None:
    """Ends a run; the flow takes the run's outcome and its periodic tick is switched off.

    Landed files are removed after success (the sink holds the result) and kept otherwise,
    so nothing read is lost when a run fails or is stopped.
    """
    from dataflow.services.flows import flow_schedule_off

    with transaction.atomic():
        totals = Split.objects.filter(run_id=run.pk).aggregate(
            records=Sum("records_read", default=0), errors=Sum("errors_count", default=0)
        )
        updated = FlowRun.objects.filter(
            pk=run.pk, status__in=[RunStatus.READING, RunStatus.TRANSFORMING]
        ).update(
            status=status,
            message=message,
            rows_written=rows_written,
            finished_at=timezone.now(),
            records_read=totals["records"],
            errors_count=totals["errors"],
        )
        if not updated:
            return
        DataFlow.objects.filter(pk=run.flow_id).update(status=FINAL_FLOW_STATUS[status])
        flow_schedule_off(flow=DataFlow.objects.get(pk=run.flow_id))
    coordinator = coordinator_for(run)
    coordinator.purge()  # readers still in a slice find their lease gone and leave
    coordinator.stop()
    if status == RunStatus.SUCCEEDED and not settings.DATAFLOW_KEEP_LANDED:
        landing_zone().discard_run(str(run.pk))
    log.info("run %s of %s: %s %s", run.pk, run.flow.name, status, message)
