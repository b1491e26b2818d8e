"""The bounded transform: the flow's Spark SQL over everything the run landed, published to
the sink in numbered attempts that the database fences (see ``transform``). A run whose
transform is the identity into a sink that takes landed files as they are publishes them
without Spark (``landed.landed_copy_applies``), through the same fence."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

import pyarrow.parquet as pq
from django.conf import settings
from django.db import transaction
from django.db.models.functions import Now

from dataflow.encryption import SecretUndecryptable
from dataflow.models import FlowRun, LandedBatch, RunStatus
from dataflow.services.context import coordinator_for, run_environment, run_key, run_secrets_check
from dataflow.services.expectations import ExpectationVerdict, expectations_apply, expectations_record
from dataflow.services.runs.finish import run_finish
from dataflow.services.runs.landed import landed_copy_applies
from dataflow.services.runs.replay import ReplayOutput, is_replay
from dataflow.services.runs.tick import request_tick, run_refused_secrets, transform_in_backoff
from dataflow.services.schema_changes import run_landed_ddl
from dataflow.services.specs import transform_limits
from dataflow.services.transform_check import transform_check as transform_analysis
from dataflow.services.transform_watch import (
    CancelReason,
    SinkRowsMismatch,
    TransformCancelled,
    TransformWatch,
    bounded_output,
    check_output_rows,
    check_staging_bytes,
    transform_is_deterministic,
    transforms_running_here,
    worker_leaving,
)
from dataflow.spark.errors import driver_lost_message, is_out_of_memory, spark_error_message
from dataflow.spark.jobs import observe_rows, quiet_query_errors
from dataflow.spark.session import application_id, session_recover, spark_job, warm_up_done
from source_support.coordination import Mark
from source_support.registry import SINKS, Publish
from source_support.schema import parse_ddl

log = logging.getLogger("dataflow.services.runs")

MAX_TRANSFORM_ATTEMPTS = 3


class TransformOutput(Protocol):
    """How an attempt's result reaches the sink, and what publishing it settles."""

    def write(self, result: Any, publish: Publish) -> bool: ...

    def published(self) -> None: ...


class SinkReplace:
    """A bounded run's way into the sink: the whole result replaces what the sink held."""

    def __init__(self, run: FlowRun, attempt: int) -> None:
        self.run, self.attempt = run, attempt

    def write(self, result: Any, publish: Publish) -> bool:
        spec = self.run.spec
        return SINKS[spec["sink_type"]].write(
            result,
            spec["sink_config"],
            attempt_key=f"{run_key(self.run)}-{self.attempt}",
            publish=publish,
            env=run_environment(self.run),
        )

    def published(self) -> None:
        pass  # the sink's swap is all


def _output_for(run: FlowRun, attempt: int) -> TransformOutput:
    return ReplayOutput(run) if is_replay(run) else SinkReplace(run, attempt)


def transform_check(*, run_id: int) -> None:
    """Analyzes the run's transform with Spark as the run starts, while readers read; a
    transform that cannot fit the data fails the run at once, before the whole source is
    read (but after what the readers read meanwhile, which the run counts: its message says
    so). Also starts the Spark session that the transform will use."""
    run = FlowRun.objects.filter(pk=run_id, status=RunStatus.READING).first()
    if run is None or landed_copy_applies(run.spec):  # the identity: nothing to analyze
        return
    # runflow starts its JVM as its run starts. A run that fails meanwhile (no file, a bad
    # record) ends the check here, instead of keeping runflow from exiting until Spark is up.
    while not warm_up_done(timeout=0.5):
        if not FlowRun.objects.filter(pk=run_id, status=RunStatus.READING).exists():
            return
    problem = transform_analysis(run_id=run_id)
    if problem:
        run_finish(run=run, status=RunStatus.FAILED, message=f"transform refused while reading: {problem}")


def transform(*, run_id: int) -> None:
    """Runs the flow's Spark SQL over everything the run landed and publishes the sink.

    Each attempt is numbered in the database (``FlowRun.transform_attempts``) and writes a
    staging directory of its own; it publishes, and ends the run, only while its number is
    still the run's, and only if the staged sink holds exactly the rows the job wrote. So a
    stale attempt (its Redis lease lost, another attempt started) can neither publish nor
    clean up. A deterministic error (the SQL does not fit the data) fails the run at once;
    any other error is retried with backoff up to ``MAX_TRANSFORM_ATTEMPTS``, from the same
    landed files, so a retry writes exactly what the first attempt would have.
    """
    run = FlowRun.objects.filter(pk=run_id).first()
    if run is None:
        return
    coordinator = coordinator_for(run)
    coordinator.clear_mark(Mark.TRANSFORM_QUEUED)
    if run.status != RunStatus.TRANSFORMING:
        return
    try:
        run_secrets_check(run)  # the sink's secrets: no attempt can write without them
    except SecretUndecryptable as exc:
        run_refused_secrets(run, exc)
        return
    if worker_leaving():
        request_tick(run_id=run.pk)  # another worker queues it again
        return
    lease_ms = int(settings.DATAFLOW_TRANSFORM_LEASE_SECONDS * 1000)
    with coordinator.held_lease(Mark.TRANSFORM_LEASE, lease_ms) as held:
        if not held:
            return
        attempt = _claim_transform_attempt(run.pk)
        if attempt is None:
            return
        run = FlowRun.objects.select_related("flow").get(pk=run.pk)
        watch = TransformWatch(
            run_id=run.pk,
            limits=transform_limits(run.spec),
            attempt=attempt,
            lease_lost=held.lost,
            staging_bytes=_staging_meter(run, attempt),
        )
        try:
            with transforms_running_here():
                if landed_copy_applies(run.spec):
                    _publish_landed(run, attempt, watch)
                else:
                    _run_spark_job(run, attempt, watch, _output_for(run, attempt))
        except TransformCancelled as exc:
            if worker_leaving():
                _transform_given_back(run, attempt)
            else:
                _transform_cancelled(run, attempt, exc)
        except Exception as exc:  # noqa: BLE001 - every failure is reported on the run
            if worker_leaving():
                _transform_given_back(run, attempt)
            else:
                _transform_failed(run, attempt, exc)
    if worker_leaving():
        request_tick(run_id=run.pk)  # the lease is free: the next worker starts at once


def _staging_meter(run: FlowRun, attempt: int) -> Callable[[], int | None] | None:
    """What the attempt's sink holds in its staging so far, if the sink can tell."""
    if is_replay(run):
        return None
    sink = SINKS[run.spec["sink_type"]]
    measure = sink.staging_bytes
    if measure is None:
        return None
    config, key = run.spec["sink_config"], f"{run_key(run)}-{attempt}"
    return lambda: measure(config, key)


def _transform_given_back(run: FlowRun, attempt: int) -> None:
    """Undoes the backoff of an attempt cut short by its worker's shutdown; the attempt's
    number stays spent, so nothing it might still do can publish."""
    log.warning("run %s: transform attempt %s given back: its worker is shutting down", run.pk, attempt)
    FlowRun.objects.filter(pk=run.pk, status=RunStatus.TRANSFORMING, transform_attempts=attempt).update(
        transform_started_at=None,
        message=f"transform attempt {attempt} given back: its worker shut down; another takes it up",
    )


def _claim_transform_attempt(run_id: int) -> int | None:
    """Numbers a new transform attempt of a transforming run; None if the run is not
    transforming or a failed attempt's backoff has not passed."""
    with transaction.atomic():
        run = FlowRun.objects.select_for_update().filter(pk=run_id, status=RunStatus.TRANSFORMING).first()
        if run is None or transform_in_backoff(run):
            return None
        run.transform_attempts += 1
        # The database's clock, which every worker's backoff check reads (theirs may disagree).
        FlowRun.objects.filter(pk=run.pk).update(
            transform_attempts=run.transform_attempts, transform_started_at=Now()
        )
        return run.transform_attempts


def _nothing_matched(run: FlowRun, attempt: int) -> bool:
    """Ends a run that found nothing to read (no schema could be fixed); True if so."""
    if run.schema_ddl:
        return False
    run_finish(
        run=run,
        status=RunStatus.SUCCEEDED,
        message="no input files matched; the sink was left as it was",
        attempt=attempt,
    )
    return True


def _landed_paths(run: FlowRun) -> list[str]:
    return list(
        LandedBatch.objects.filter(split__run=run)
        .order_by("split_id", "start_position")
        .values_list("path", flat=True)
    )


def _publish_landed(run: FlowRun, attempt: int, watch: TransformWatch) -> bool:
    """The identity transform without Spark: the sink publishes the landed files as its
    output (``SinkConnector.write_landed``) through the attempt's fence, if the staged
    sink holds exactly the landed rows; returns whether it published."""
    if _nothing_matched(run, attempt):
        return False
    spec = run.spec
    paths = _landed_paths(run)
    landed_rows = sum(pq.read_metadata(path).num_rows for path in paths)
    check_output_rows(watch.limits, landed_rows)

    def publish(staged_rows: int, swap) -> bool:
        if staged_rows != landed_rows:
            raise SinkRowsMismatch(
                f"the staged sink holds {staged_rows} rows but {landed_rows} were landed; nothing was published"
            )
        return _publish(run, attempt, swap, rows=staged_rows, output=SinkReplace(run, attempt))

    write_landed = SINKS[spec["sink_type"]].write_landed
    assert write_landed is not None  # landed_copy_applies checked it
    return write_landed(
        paths,
        parse_ddl(run_landed_ddl(run)),
        spec["sink_config"],
        attempt_key=f"{run_key(run)}-{attempt}",
        publish=publish,
        env=run_environment(run),
    )


def _run_spark_job(run: FlowRun, attempt: int, watch: TransformWatch, output: TransformOutput) -> bool:
    """Stages the sink and publishes it through the attempt's fence, its Spark jobs in a job
    group of the attempt's own, under ``watch``; returns whether it published (False: a
    later attempt has taken over)."""
    spec = run.spec
    if _nothing_matched(run, attempt):
        return False
    paths = _landed_paths(run)
    # A session of its own: its view "source" is not another run's, and on a cluster the
    # application ends with the job (see dataflow/spark.py).
    group = f"adf-{run_key(run)}-{attempt}"
    with (
        spark_job() as spark,
        quiet_query_errors(),
        watch.watching(spark, name=group, description=f"run {run.pk} of {spec['name']}, attempt {attempt}"),
    ):
        FlowRun.objects.filter(pk=run.pk).update(spark_app_id=application_id(spark)[:100])
        landed_ddl = run_landed_ddl(run)
        if paths:
            frame = spark.read.schema(landed_ddl).parquet(*paths)
        else:
            frame = spark.createDataFrame([], landed_ddl)
        frame.createOrReplaceTempView("source")
        # Stops writing one row past the run's bound; that row fails the run below.
        result = bounded_output(spark.sql(spec["transform_sql"]), watch.limits)
        result, verdict = expectations_apply(result, spec.get("expectations") or [])
        result, job_rows_written = observe_rows(result, "sink_rows")

        def publish(staged_rows: int, swap) -> bool:
            job_rows = job_rows_written()
            if staged_rows != job_rows:
                raise SinkRowsMismatch(
                    f"the staged sink holds {staged_rows} rows but the job wrote {job_rows}; "
                    "nothing was published"
                )
            check_output_rows(watch.limits, staged_rows)
            if watch.staging_bytes is not None:  # a write quicker than the watch's round
                check_staging_bytes(watch.limits, watch.staging_bytes())
            return _publish(run, attempt, swap, rows=staged_rows, output=output, verdict=verdict)

        return output.write(result, publish)


def _publish(
    run: FlowRun,
    attempt: int,
    swap: Callable[[], None],
    *,
    rows: int,
    output: TransformOutput,
    verdict: ExpectationVerdict | None = None,
) -> bool:
    """Swaps the staged sink in and ends the run, in one transaction that holds the run's
    row, if ``attempt`` is still the run's current one; False (nothing done) otherwise.
    The expectations' ``verdict`` (counts, dropped rows) is kept in the same transaction."""
    with transaction.atomic():
        current = (
            FlowRun.objects.select_for_update()
            .filter(pk=run.pk, status=RunStatus.TRANSFORMING, transform_attempts=attempt)
            .exists()
        )
        if not current:
            log.warning("run %s: transform attempt %s is stale; it publishes nothing", run.pk, attempt)
            return False
        swap()
        output.published()
        expectations_record(run=run, verdict=verdict)
        run_finish(run=run, status=RunStatus.SUCCEEDED, rows_written=rows, attempt=attempt)
    return True


def _transform_cancelled(run: FlowRun, attempt: int, exc: TransformCancelled) -> None:
    """A timeout or a full staging directory fails the run; any other cancel was for a run
    that ended or an attempt that is no longer the run's, which has nothing more to say."""
    if exc.reason in (CancelReason.TIMEOUT, CancelReason.STAGING_FULL):
        run_finish(run=run, status=RunStatus.FAILED, message=str(exc), attempt=attempt)
    else:
        log.info("run %s: transform attempt %s cancelled: %s", run.pk, attempt, exc.reason.value)


def _transform_failed(run: FlowRun, attempt: int, exc: Exception) -> None:
    if isinstance(exc, SecretUndecryptable):  # its connection's, met as the sink was built
        run_refused_secrets(run, exc)
        return
    message = spark_error_message(exc)
    out_of_memory = is_out_of_memory(exc)
    # A query Spark refused cannot have hurt the session; anything else may have killed it.
    broken = (
        session_recover(out_of_memory=out_of_memory)
        if out_of_memory or not transform_is_deterministic(exc)
        else ""
    )
    if broken:
        # The same query would do it again: no retry.
        run_finish(
            run=run, status=RunStatus.FAILED, message=driver_lost_message(message, broken), attempt=attempt
        )
        return
    if transform_is_deterministic(exc) or attempt >= MAX_TRANSFORM_ATTEMPTS:
        run_finish(run=run, status=RunStatus.FAILED, message=f"transform failed: {message}", attempt=attempt)
    else:
        log.warning("run %s: transform attempt %s failed: %s", run.pk, attempt, message, exc_info=exc)
        FlowRun.objects.filter(pk=run.pk, status=RunStatus.TRANSFORMING, transform_attempts=attempt).update(
            message=f"transform attempt {attempt} failed, will retry: {message}"
        )
