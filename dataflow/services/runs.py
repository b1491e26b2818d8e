"""Driving a run: enumerator ticks, reader slices, the Spark transform, and the end.

Celery tasks and ``runflow`` call these; the loops themselves live in
``source_support.runtime`` and are the same for every connector.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time

from django.conf import settings
from django.db import transaction
from django.db.models import F, Sum
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
from dataflow.services.cleanup import run_resumable
from dataflow.services.context import coordinator_for, run_key
from dataflow.services.queues import run_task_send
from dataflow.services.specs import flow_environment, transform_limits
from dataflow.services.stalls import STALL_NOTE, stall_note
from dataflow.services.transform_limits import (
    CancelReason,
    OutputRowsExceeded,
    TransformCancelled,
    TransformWatch,
    check_output_rows,
)
from dataflow.spark import is_out_of_memory, session_recover
from dataflow.store import DjangoRunStore
from source_support.coordination import Mark, RunCoordinator
from source_support.formats import FormatSpec
from source_support.landing import LandingZone, LandingZoneUnwritable
from source_support.registry import SINKS, BuildContext, Environment, build_source, source_is_unbounded
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


def landing_zone() -> LandingZone:
    return LandingZone(settings.DATAFLOW_LANDING_ROOT, fsync=settings.DATAFLOW_LANDING_FSYNC)


def source_for(run: FlowRun):
    """The run's source, built from the spec it started with."""
    spec = run.spec
    schema = parse_ddl(run.schema_ddl) if run.schema_ddl else None
    context = BuildContext(
        env=run_environment(run),
        batch_size=spec["batch_size"],
        schema=schema,
        flow_name=spec["name"],
        stop=spec.get("stop_rule") or {},
    )
    return build_source(
        spec["source_type"],
        spec["source_config"],
        FormatSpec(spec["format_type"], spec["format_options"]),
        context,
    )


def run_environment(run: FlowRun) -> Environment:
    """The environment the run's source and sink are built in: its connections resolved
    for the flow's owner now (a revoked grant stops the build with a ConfigError)."""
    flow = DataFlow.objects.select_related("owner").get(pk=run.flow_id)
    return flow_environment(run.spec, owner=flow.owner)


#: How long a tick may go on serving requests that keep arriving: a queued (Celery) tick,
#: and one run inline by a reader that asked for splits.
TICK_BUDGET_S = 5.0
INLINE_TICK_BUDGET_S = 1.0


def request_tick(*, run_id: int) -> None:
    """Asks for a prompt enumerator tick; at most one waits in the queue per run."""
    from dataflow import tasks

    if coordinator_for(run_id).mark_once(Mark.TICK_QUEUED, 30_000):
        run_task_send(tasks.tick_run, run_id)


def run_tick(*, run_id: int) -> None:
    """One enumerator tick: serve split requests, reclaim lapsed leases, start missing
    readers, and hand the run to Spark once every split is finished."""
    run = FlowRun.objects.select_related("flow").filter(pk=run_id).first()
    if run is None:
        return
    coordinator_for(run).clear_mark(Mark.TICK_QUEUED)
    unbounded = run_is_unbounded(run)
    if run.status == RunStatus.TRANSFORMING:
        _ensure_transform(run, unbounded=unbounded)
        return
    if run.status != RunStatus.READING:
        return
    failed = Split.objects.filter(run=run, status=SplitStatus.FAILED).first()
    if failed is not None:
        run_finish(run=run, status=RunStatus.FAILED, message=f"split failed: {failed.error}")
        return
    coordinator = coordinator_for(run)
    _sync_hold(run, coordinator)
    if unbounded and _records_rule_met(run):
        _end_input(run, coordinator)
        return
    result = _enumerate(run, source_for(run), budget_s=TICK_BUDGET_S)
    if result is None:
        return
    if result.more:
        request_tick(run_id=run.pk)
    _spawn_readers(run, coordinator, result)
    if result.exhausted and not Split.objects.filter(run=run).exclude(status=SplitStatus.FINISHED).exists():
        _reading_done(run, coordinator)
        return
    _watch_for_stall(run, coordinator, live=bool(result.live))
    from dataflow.services.metrics import metrics_sample
    from dataflow.services.stream_runs import stream_run_tick

    if unbounded:
        stream_run_tick(run=run, coordinator=coordinator, result=result)
    elif coordinator.mark_once(Mark.METRICS_DUE, int(settings.DATAFLOW_METRICS_SECONDS * 1000)):
        metrics_sample(run=run)  # a bounded run's progress, for its charts


def _sync_hold(run: FlowRun, coordinator: RunCoordinator) -> None:
    """Sets the run's hold mark in Redis from the database (also after a Redis that lost
    it), under the run's row lock: ``flow_pause`` and ``flow_resume`` change ``paused_at``
    holding that lock and set the mark once they commit, so a tick that loaded the run
    before them cannot undo their mark (readers would read on while paused)."""
    with transaction.atomic():
        paused_at = FlowRun.objects.select_for_update().filter(pk=run.pk).values_list("paused_at", flat=True)
        coordinator.user_hold_set(paused_at.first() is not None)


def run_is_unbounded(run: FlowRun) -> bool:
    """Whether the run reads without end (a stream, files with ``watch``), until stopped or
    until its ``[stop]`` rule is met. A replay of dead letters is bounded whatever its source."""
    if run.spec.get("replay"):
        return False
    return source_is_unbounded(run.spec["source_type"], run.spec["source_config"])


def _spawn_readers(run: FlowRun, coordinator: RunCoordinator, result: TickResult) -> None:
    """Queues a reader for each subtask that has none, unless it is done and nothing waits
    (a reader of an unbounded run is done only once its enumerator says no more splits: a
    stop rule was met)."""
    done = coordinator.done_readers()
    for subtask in range(run.spec["parallelism"]):
        wanted = subtask not in done or result.pending > 0
        if subtask not in result.live and wanted and coordinator.claim_spawn(subtask):
            _enqueue_reader(run.pk, subtask, None)


def _records_rule_met(run: FlowRun) -> bool:
    """Whether the run's ``[stop] after_records`` rule is met by what readers committed."""
    limit = (run.spec.get("stop_rule") or {}).get("after_records")
    if not limit:
        return False
    read = Split.objects.filter(run=run).aggregate(n=Sum("records_read", default=0))["n"]
    return read >= limit


def _end_input(run: FlowRun, coordinator: RunCoordinator) -> None:
    """A global stop rule is met: every reader is told to stop (each commits what it read
    and leaves); once none is left, every split ends at its committed position and the run
    goes on to its last transform."""
    coordinator.stop()
    parallelism = run.spec.get("parallelism") or run.flow.parallelism
    if coordinator.live_readers(parallelism):
        return
    Split.objects.filter(run=run).exclude(status__in=[SplitStatus.FINISHED, SplitStatus.FAILED]).update(
        status=SplitStatus.FINISHED, owner_token="", owner_subtask=None
    )
    _reading_done(run, coordinator)


def _watch_for_stall(run: FlowRun, coordinator: RunCoordinator, *, live: bool) -> None:
    """Says on the run when it has work but no reader has run for ``DATAFLOW_STALL_SECONDS``
    (no worker consumes the queue, or every slot is taken), and takes it back once one runs.
    Views do not rely on it (see ``selectors.run_message``): it keeps the note in the
    run's history, e.g. for a webhook or the admin's raw field."""
    if live:
        coordinator.clear_mark(Mark.NO_READER_SINCE)
        if run.message.startswith(STALL_NOTE):
            FlowRun.objects.filter(pk=run.pk, message=run.message).update(message="")
        return
    idle = time.time() - coordinator.first_seen(Mark.NO_READER_SINCE, time.time())
    if idle >= settings.DATAFLOW_STALL_SECONDS and not run.message.startswith(STALL_NOTE):
        FlowRun.objects.filter(pk=run.pk, status=RunStatus.READING).update(message=stall_note(idle))


def _reading_done(run: FlowRun, coordinator: RunCoordinator) -> None:
    """Every split is read: hands the run to Spark, unless it read nothing and may not (a
    stream that had nothing to read until its stop rule is not a mistake)."""
    empty = "" if run_is_unbounded(run) else _empty_source_message(run)
    if empty:
        run_finish(run=run, status=RunStatus.FAILED, message=empty)
        return
    moved = FlowRun.objects.filter(pk=run.pk, status=RunStatus.READING).update(status=RunStatus.TRANSFORMING)
    if moved:
        coordinator.stop()  # readers still waiting for splits can go
        run.refresh_from_db()
        _ensure_transform(run, unbounded=run_is_unbounded(run))


def _empty_source_message(run: FlowRun) -> str:
    """Why a run that read no record must fail (a typo in a path must not replace the last
    good sink with an empty one); empty when it read records or ``allow_empty`` is set."""
    config = run.spec["source_config"]
    if config.get("allow_empty"):
        return ""
    if Split.objects.filter(run=run, records_read__gt=0).exists():
        return ""
    where = f"source.path {config['path']!r}" if "path" in config else "the source"
    found = "matched no file" if not Split.objects.filter(run=run).exists() else "holds no record"
    return (
        f"{where} {found}; the sink was left as it was "
        "(set allow_empty = true in [source] to accept an empty result)"
    )


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
        source=source_for(run),
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
    if run is None or subtask >= run.spec["parallelism"]:  # over, or rescaled below it
        return SliceReport(SliceOutcome.STOPPED, token)
    try:
        report = _read_slice(run, subtask, token)
    except LandingZoneUnwritable as exc:
        # Disk full, read-only or over quota: every reader would fail the same way, and
        # each retry would only add to what fills the disk.
        log.error("run %s: reader %s: %s", run.pk, subtask, exc)
        run_finish(
            run=run, status=RunStatus.FAILED, message=f"reader {subtask} could not land a batch: {exc}"
        )
        return SliceReport(SliceOutcome.STOPPED, token)
    except Exception as exc:  # noqa: BLE001 - counted and shown on the run, never silent
        log.exception("run %s: reader %s failed", run.pk, subtask)
        _reader_failed(run, subtask, exc)
        return SliceReport(SliceOutcome.LOST, token)
    if report.outcome in (SliceOutcome.DONE, SliceOutcome.STOPPED):
        request_tick(run_id=run_id)
    if report.outcome != SliceOutcome.CONTINUE:
        # The run may have ended while this slice read: what it landed after the run let go
        # of its files must go too.
        ended = FlowRun.objects.filter(pk=run_id).exclude(status__in=[RunStatus.READING]).first()
        if ended is not None:
            _landed_files_release(ended, ended.status)
    return report


def _reader_failed(run: FlowRun, subtask: int, exc: Exception) -> None:
    """Counts a failed reader task on the run and says why; past
    ``DATAFLOW_READER_FAILURE_LIMIT`` failures the run fails (a read-only landing zone, a
    missing disk... would otherwise make a run that reads nothing, forever)."""
    first_line = (str(exc).strip().splitlines() or [""])[0]
    reason = f"{type(exc).__name__}: {first_line}"[:500]
    with transaction.atomic():
        FlowRun.objects.filter(pk=run.pk, status=RunStatus.READING).update(
            reader_failures=F("reader_failures") + 1,
            message=f"reader {subtask} failed: {reason}",
        )
        failures = FlowRun.objects.filter(pk=run.pk).values_list("reader_failures", flat=True).first() or 0
    limit = settings.DATAFLOW_READER_FAILURE_LIMIT
    if failures >= limit:
        run_finish(
            run=run,
            status=RunStatus.FAILED,
            message=f"readers failed {failures} times (DATAFLOW_READER_FAILURE_LIMIT); last: {reason}",
        )


def _read_slice(run: FlowRun, subtask: int, token: str | None) -> SliceReport:
    spec = run.spec
    source = source_for(run)
    return reader_slice(
        source=source,
        coordinator=coordinator_for(run),
        store=DjangoRunStore(run),
        landing=landing_zone(),
        run_key=run_key(run),
        subtask=subtask,
        token=token,
        settings=ReaderSettings(
            slice_seconds=settings.DATAFLOW_READER_SLICE_SECONDS,
            poll_interval_s=spec["poll_interval_ms"] / 1000,
            skip_errors=spec["skip_errors"],
            park_seconds=settings.DATAFLOW_READER_PARK_SECONDS,
            location=f"{socket.gethostname()}:{os.getpid()}",
            stop_after_records=(spec.get("stop_rule") or {}).get("after_records"),
        ),
        on_split_request=lambda: serve_split_requests(run, source),
    )


def reader_requeue(*, run_id: int, subtask: int, token: str | None) -> None:
    """Queues the next slice of a reader (its previous slice asked to go on)."""
    _enqueue_reader(run_id, subtask, token)


def _enqueue_reader(run_id: int, subtask: int, token: str | None) -> None:
    from dataflow import tasks

    run_task_send(tasks.read_splits, run_id, subtask, token)


# The transform.


def transform_check(*, run_id: int) -> None:
    """Analyzes the run's transform with Spark as the run starts, while readers read; a
    transform that cannot fit the data fails the run at once, before the whole source is
    read. Also starts the Spark session that the transform will use."""
    from dataflow.services.transform_check import transform_check as analyze

    run = FlowRun.objects.filter(pk=run_id, status=RunStatus.READING).first()
    if run is None:
        return
    problem = analyze(run_id=run_id)
    if problem:
        run_finish(run=run, status=RunStatus.FAILED, message=f"transform refused before reading: {problem}")


def _ensure_transform(run: FlowRun, *, unbounded: bool = False) -> None:
    """Queues the Spark job unless one is running or its retry backoff has not passed; an
    unbounded run's streaming transform makes its last epoch instead."""
    if unbounded:
        from dataflow.services.streaming import ensure_stream_transform

        ensure_stream_transform(run)
        return
    coordinator = coordinator_for(run)
    if coordinator.is_set(Mark.TRANSFORM_LEASE):
        return
    if _in_backoff(run):
        return
    if coordinator.mark_once(Mark.TRANSFORM_QUEUED, 60_000):
        from dataflow import tasks

        run_task_send(tasks.run_transform, run.pk)


def _in_backoff(run: FlowRun) -> bool:
    """True while a failed transform attempt waits before the next (2, 4, 8... s, at most 60)."""
    if not (run.transform_attempts and run.transform_started_at):
        return False
    backoff = min(60, 2**run.transform_attempts)
    return (timezone.now() - run.transform_started_at).total_seconds() < backoff


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
    if _worker_leaving.is_set():
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
            run_id=run.pk, limits=transform_limits(run.spec), attempt=attempt, lease_lost=held.lost
        )
        try:
            with _transforms_here:
                _run_spark_job(run, attempt, watch)
        except TransformCancelled as exc:
            if _worker_leaving.is_set():
                _transform_given_back(run, attempt)
            else:
                _transform_cancelled(run, attempt, exc)
        except Exception as exc:  # noqa: BLE001 - every failure is reported on the run
            if _worker_leaving.is_set():
                _transform_given_back(run, attempt)
            else:
                _transform_failed(run, attempt, exc)
    if _worker_leaving.is_set():
        request_tick(run_id=run.pk)  # the lease is free: the next worker starts at once


#: Set once this process's worker is shutting down (SIGTERM: a warm shutdown).
_worker_leaving = threading.Event()


class _RunningTransforms:
    """How many transform attempts run their Spark job in this process."""

    def __init__(self) -> None:
        self.count = 0
        self._lock = threading.Lock()

    def __enter__(self) -> None:
        with self._lock:
            self.count += 1

    def __exit__(self, *exc) -> None:
        with self._lock:
            self.count -= 1


_transforms_here = _RunningTransforms()


def transforms_running_here():
    """Counts the block as a transform running its Spark job in this process: a worker
    that leaves (``transforms_give_back``) cancels its jobs until the block ends."""
    return _transforms_here


def worker_leaving() -> bool:
    """Whether this process's worker is shutting down (SIGTERM: a warm shutdown)."""
    return _worker_leaving.is_set()


def transforms_give_back(*, every_s: float = 0.5) -> None:
    """This worker process is leaving: its transform attempts cancel their Spark jobs and
    give their runs back at once (the lease released, no failure counted, no backoff), so
    another worker takes them up without waiting for the lease to lapse; a transform task
    that arrives now is left for another worker. Cancels again every ``every_s`` while an
    attempt still runs: a job submitted just after a cancel is not cancelled by it."""
    from dataflow.spark import cancel_jobs  # loads PySpark: only where a worker leaves

    _worker_leaving.set()
    while _transforms_here.count:
        cancel_jobs()
        time.sleep(every_s)


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
        if run is None or _in_backoff(run):
            return None
        run.transform_attempts += 1
        run.transform_started_at = timezone.now()
        run.save(update_fields=["transform_attempts", "transform_started_at"])
        return run.transform_attempts


class SinkRowsMismatch(RuntimeError):
    """The staged sink does not hold the rows the Spark job wrote."""


def _run_spark_job(run: FlowRun, attempt: int, watch: TransformWatch) -> bool:
    """Stages the sink and publishes it through the attempt's fence, its Spark jobs in a job
    group of the attempt's own, under ``watch``; returns whether it published (False: a
    later attempt has taken over)."""
    from dataflow.spark import application_id, observe_rows, quiet_query_errors, spark_job

    spec = run.spec
    if not run.schema_ddl:
        run_finish(
            run=run,
            status=RunStatus.SUCCEEDED,
            message="no input files matched; the sink was left as it was",
            attempt=attempt,
        )
        return False
    paths = list(
        LandedBatch.objects.filter(split__run=run)
        .order_by("split_id", "start_position")
        .values_list("path", flat=True)
    )
    # A session of its own: its view "source" is not another run's, and on a cluster the
    # application ends with the job (see dataflow/spark.py).
    group = f"adf-{run_key(run)}-{attempt}"
    with (
        spark_job() as spark,
        quiet_query_errors(),
        watch.watching(spark, name=group, description=f"run {run.pk} of {spec['name']}, attempt {attempt}"),
    ):
        FlowRun.objects.filter(pk=run.pk).update(spark_app_id=application_id(spark)[:100])
        if paths:
            frame = spark.read.schema(run.schema_ddl).parquet(*paths)
        else:
            frame = spark.createDataFrame([], run.schema_ddl)
        frame.createOrReplaceTempView("source")
        result, job_rows_written = observe_rows(spark.sql(spec["transform_sql"]), "sink_rows")

        def publish(staged_rows: int, swap) -> bool:
            job_rows = job_rows_written()
            if staged_rows != job_rows:
                raise SinkRowsMismatch(
                    f"the staged sink holds {staged_rows} rows but the job wrote {job_rows}; "
                    "nothing was published"
                )
            check_output_rows(watch.limits, staged_rows)
            return _publish(run, attempt, swap, rows=staged_rows)

        sink = SINKS[spec["sink_type"]]
        if spec.get("replay"):
            # Replayed dead letters join the rows earlier runs wrote, as a stream's epoch does.
            from dataflow.services.dead_letters import replay_epoch_key

            epoch_key = replay_epoch_key(run)
            return sink.append(
                result, spec["sink_config"], epoch_key=epoch_key, publish=publish, env=run_environment(run)
            )
        return sink.write(
            result,
            spec["sink_config"],
            attempt_key=f"{run_key(run)}-{attempt}",
            publish=publish,
            env=run_environment(run),
        )


def _publish(run: FlowRun, attempt: int, swap, *, rows: int) -> bool:
    """Swaps the staged sink in and ends the run, in one transaction that holds the run's
    row, if ``attempt`` is still the run's current one; False (nothing done) otherwise."""
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
        if run.spec.get("replay"):
            from dataflow.services.dead_letters import dead_letters_replay_commit

            dead_letters_replay_commit(run=run)  # with the rows that reached the sink
        run_finish(run=run, status=RunStatus.SUCCEEDED, rows_written=rows, attempt=attempt)
    return True


def _transform_cancelled(run: FlowRun, attempt: int, exc: TransformCancelled) -> None:
    """A timeout fails the run; any other cancel was for a run that ended or an attempt that
    is no longer the run's, which has nothing more to say."""
    if exc.reason == CancelReason.TIMEOUT:
        run_finish(run=run, status=RunStatus.FAILED, message=str(exc), attempt=attempt)
    else:
        log.info("run %s: transform attempt %s cancelled: %s", run.pk, attempt, exc.reason.value)


def _transform_failed(run: FlowRun, attempt: int, exc: Exception) -> None:
    message = _spark_error_message(exc)
    out_of_memory = is_out_of_memory(exc)
    # A query Spark refused cannot have hurt the session; anything else may have killed it.
    broken = (
        session_recover(out_of_memory=out_of_memory) if out_of_memory or not _is_deterministic(exc) else ""
    )
    if broken:
        # The same query would do it again: no retry.
        run_finish(
            run=run, status=RunStatus.FAILED, message=driver_lost_message(message, broken), attempt=attempt
        )
        return
    if _is_deterministic(exc) or attempt >= MAX_TRANSFORM_ATTEMPTS:
        run_finish(run=run, status=RunStatus.FAILED, message=f"transform failed: {message}", attempt=attempt)
    else:
        log.warning("run %s: transform attempt %s failed: %s", run.pk, attempt, message, exc_info=exc)
        FlowRun.objects.filter(pk=run.pk, status=RunStatus.TRANSFORMING, transform_attempts=attempt).update(
            message=f"transform attempt {attempt} failed, will retry: {message}"
        )


def driver_lost_message(error: str, found: str) -> str:
    """What a run says when its transform ran the Spark driver out of memory or the driver
    died under it: ``found`` (from ``session_recover``) and Spark's own line ``error``."""
    memory = "out of memory" in found
    hint = "the query needs more memory than the driver has (SPARK_DRIVER_MEMORY); " if memory else ""
    restart = "" if "Connect server" in found else "a new Spark session starts with the next job"
    return f"transform failed: {found} ({error[:300]}); {hint}{restart}".rstrip("; ")


#: SQLSTATE classes of errors that the same query over the same data raises again: data
#: exceptions (a bad cast), syntax and access rules, unsupported features, constraints.
DETERMINISTIC_SQLSTATE_CLASSES = ("22", "42", "0A", "23")


def _is_deterministic(exc: Exception) -> bool:
    """Whether a retry from the same landed files would fail the same way."""
    if isinstance(exc, SinkRowsMismatch):
        return False
    if isinstance(exc, OutputRowsExceeded):
        return True
    if type(exc).__name__ in ("AnalysisException", "ParseException", "IllegalArgumentException"):
        return True
    sqlstate = exc.getSqlState() if hasattr(exc, "getSqlState") else None
    return bool(sqlstate) and sqlstate[:2] in DETERMINISTIC_SQLSTATE_CLASSES


def _spark_error_message(exc: Exception) -> str:
    """One line that says what went wrong: Spark's own first line, or for an error raised in
    the JVM (``An error occurred while calling o103.parquet.``) the Java exception and its
    root cause (``Mkdirs failed to create ...``)."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    first = lines[0]
    if first.startswith("An error occurred while calling") and len(lines) > 1:
        thrown = lines[1].lstrip(": ")
        causes = [line.removeprefix("Caused by: ") for line in lines if line.startswith("Caused by: ")]
        first = " caused by ".join(dict.fromkeys(_short_java_name(t) for t in [thrown, *causes[-1:]]))
    return first[:2000]


def _short_java_name(text: str) -> str:
    """``org.apache.hadoop.fs.X: message`` -> ``X: message``."""
    name, sep, rest = text.partition(": ")
    return f"{name.rsplit('.', 1)[-1]}{sep}{rest}" if "." in name and " " not in name else text


def run_finish(
    *,
    run: FlowRun,
    status: str,
    message: str = "",
    rows_written: int | None = None,
    attempt: int | None = None,
) -> bool:
    """Ends a run; the flow takes the run's outcome and its periodic tick is switched off.

    With ``attempt``, only while that transform attempt is still the run's current one (a
    stale attempt cannot end a run). Returns whether this call ended the run. Once the
    transaction commits, the run's Redis keys are purged (readers still in a slice find
    their lease gone and leave) and, after success, its landed files are removed (the sink
    holds the result); they are kept otherwise, so nothing read is lost when a run fails or
    is stopped.
    """
    from dataflow.services.flows import flow_schedule_off
    from dataflow.services.notify import run_notify

    with transaction.atomic():
        totals = Split.objects.filter(run_id=run.pk).aggregate(
            records=Sum("records_read", default=0), errors=Sum("errors_count", default=0)
        )
        active = FlowRun.objects.filter(pk=run.pk, status__in=[RunStatus.READING, RunStatus.TRANSFORMING])
        if attempt is not None:
            active = active.filter(status=RunStatus.TRANSFORMING, transform_attempts=attempt)
        updated = active.update(
            status=status,
            message=message,
            rows_written=rows_written,
            finished_at=timezone.now(),
            records_read=totals["records"],
            errors_count=totals["errors"],
        )
        if not updated:
            return False
        DataFlow.objects.filter(pk=run.flow_id).update(status=FINAL_FLOW_STATUS[status])
        flow_schedule_off(flow=DataFlow.objects.get(pk=run.flow_id))
        run_notify(run=run, status=status)  # the webhook is called once this commits
        transaction.on_commit(lambda: _release_run(run, status))
    log.info("run %s of %s: %s %s", run.pk, run.flow.name, status, message)
    return True


def _release_run(run: FlowRun, status: str) -> None:
    from dataflow.services.metrics import metrics_sample

    try:
        metrics_sample(run=run)  # its last figures, so a short run's charts have an end
    except Exception as exc:  # noqa: BLE001 - charts must never keep a run from ending
        log.warning("run %s: no last metric sample: %s", run.pk, exc)
    coordinator = coordinator_for(run)
    coordinator.purge()
    coordinator.stop()  # a reader that missed the purge still sees the run is over
    _landed_files_release(run, status)


def _landed_files_release(run: FlowRun, status: str) -> None:
    """Removes the landed files of a run that has ended and needs them no more: after
    success the sink holds the result, and a failed run that cannot go on (only ``restart
    --failed`` of its failed splits can) has no use for them either. A run that can still be
    resumed keeps them (``cleanup`` says what it holds); so does every run with
    ``DATAFLOW_KEEP_LANDED``."""
    if settings.DATAFLOW_KEEP_LANDED:
        return
    if status == RunStatus.SUCCEEDED or (status == RunStatus.FAILED and not run_resumable(run=run)):
        landing_zone().discard_run(run_key(run))
