"""The enumerator tick of a run: serve split requests, reclaim lapsed leases, start
missing readers, say when no reader runs, and hand the run to its transform once every
split is read (or its stop rule is met)."""

from __future__ import annotations

import logging
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Sum
from django.db.models.functions import Now

from dataflow.encryption import SecretUndecryptable
from dataflow.limits import SplitCeilingReached
from dataflow.models import FlowRun, RunStatus, Split, SplitStatus
from dataflow.services.context import coordinator_for, source_for
from dataflow.services.metrics import metrics_sample
from dataflow.services.queues import READ_SPLITS, RUN_TRANSFORM, TICK_RUN, run_task_send
from dataflow.services.quotas import quota_splits_exceeded
from dataflow.services.runs.failures import failed_run_message
from dataflow.services.runs.finish import run_finish
from dataflow.services.runs.replay import is_replay
from dataflow.services.stalls import STALL_NOTE, stall_note
from dataflow.services.streams.tick import ensure_stream_transform, stream_run_tick
from dataflow.services.ticks import flow_ticks_remove_orphan
from dataflow.store import DjangoRunStore
from source_support.api import Source
from source_support.coordination import Mark, RedisRunCoordinator
from source_support.registry import source_is_unbounded
from source_support.runtime import TickResult, enumerator_tick

log = logging.getLogger("dataflow.services.runs")

#: How long a tick may go on serving requests that keep arriving: a queued (Celery) tick,
#: and one run inline by a reader that asked for splits.
TICK_BUDGET_S = 5.0
INLINE_TICK_BUDGET_S = 1.0


def request_tick(*, run_id: int) -> None:
    """Asks for a prompt enumerator tick; at most one waits in the queue per run."""
    if coordinator_for(run_id).mark_once(Mark.TICK_QUEUED, 30_000):
        run_task_send(TICK_RUN, run_id)


def run_tick(*, run_id: int) -> None:
    """One enumerator tick: serve split requests, reclaim lapsed leases, start missing
    readers, and hand the run to Spark once every split is finished."""
    run = FlowRun.objects.select_related("flow").filter(pk=run_id).first()
    if run is None:
        return
    coordinator_for(run).clear_mark(Mark.TICK_QUEUED)
    try:
        _run_tick(run)
    except SecretUndecryptable as exc:
        run_refused_secrets(run, exc)


def run_refused_secrets(run: FlowRun, exc: SecretUndecryptable) -> None:
    """Fails an active run at once whose secrets (its own, or its connection's) no key of
    ``DATAFLOW_SECRET_KEYS`` decrypts: every retry would meet them too. The message names
    them and the setting, never a secret."""
    log.error("run %s: %s", run.pk, exc.reason)
    if run.status in (RunStatus.READING, RunStatus.TRANSFORMING):
        run_finish(run=run, status=RunStatus.FAILED, message=exc.reason)


def _run_tick(run: FlowRun) -> None:
    unbounded = run_is_unbounded(run)
    if run.status == RunStatus.TRANSFORMING:
        _ensure_transform(run, unbounded=unbounded)
        return
    if run.status != RunStatus.READING:
        return
    if Split.objects.filter(run=run, status=SplitStatus.FAILED).exists():
        run_finish(
            run=run, status=RunStatus.FAILED, message=failed_run_message(run=run, source=source_for(run))
        )
        return
    coordinator = coordinator_for(run)
    _sync_hold(run, coordinator)
    if unbounded and _records_rule_met(run):
        _end_input(run, coordinator)
        return
    result = _enumerate(run, source_for(run), budget_s=TICK_BUDGET_S)
    if result is None:
        return
    over_quota = quota_splits_exceeded(run=run)
    if over_quota:
        run_finish(run=run, status=RunStatus.FAILED, message=over_quota)
        return
    if result.more:
        request_tick(run_id=run.pk)
    _spawn_readers(run, coordinator, result)
    if result.exhausted and not Split.objects.filter(run=run).exclude(status=SplitStatus.FINISHED).exists():
        _reading_done(run, coordinator)
        return
    _watch_for_stall(run, coordinator, live=bool(result.live))
    if unbounded:
        stream_run_tick(run=run, coordinator=coordinator, result=result)
    elif coordinator.mark_once(Mark.METRICS_DUE, int(settings.DATAFLOW_METRICS_SECONDS * 1000)):
        metrics_sample(run=run)  # a bounded run's progress, for its charts


def _sync_hold(run: FlowRun, coordinator: RedisRunCoordinator) -> None:
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
    if is_replay(run):
        return False
    return source_is_unbounded(run.spec["source_type"], run.spec["source_config"])


def _spawn_readers(run: FlowRun, coordinator: RedisRunCoordinator, result: TickResult) -> None:
    """Queues a reader for each subtask that has none, unless it is done and nothing waits
    (a reader of an unbounded run is done only once its enumerator says no more splits: a
    stop rule was met)."""
    done = coordinator.done_readers()
    for subtask in range(run.spec["parallelism"]):
        wanted = subtask not in done or result.pending > 0
        if subtask not in result.live and wanted and coordinator.claim_spawn(subtask):
            run_task_send(READ_SPLITS, run.pk, subtask, None)


def _records_rule_met(run: FlowRun) -> bool:
    """Whether the run's ``[stop] after_records`` rule is met by what readers committed."""
    limit = (run.spec.get("stop_rule") or {}).get("after_records")
    if not limit:
        return False
    read = Split.objects.filter(run=run).aggregate(n=Sum("records_read", default=0))["n"]
    return read >= limit


def _end_input(run: FlowRun, coordinator: RedisRunCoordinator) -> None:
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


def _watch_for_stall(run: FlowRun, coordinator: RedisRunCoordinator, *, live: bool) -> None:
    """Says on the run when it has work but no reader has run for ``DATAFLOW_STALL_SECONDS``
    (no worker consumes the queue, or every slot is taken), and takes it back once one runs.
    Views do not rely on it (see ``selectors.runs.run_message``): it keeps the note in the
    run's history, e.g. for a webhook or the admin's raw field."""
    if live:
        coordinator.clear_mark(Mark.NO_READER_SINCE)
        if run.message.startswith(STALL_NOTE):
            FlowRun.objects.filter(pk=run.pk, message=run.message).update(message="")
        return
    idle = coordinator.now() - coordinator.first_seen(Mark.NO_READER_SINCE)  # one clock: Redis's
    if idle >= settings.DATAFLOW_STALL_SECONDS and not run.message.startswith(STALL_NOTE):
        FlowRun.objects.filter(pk=run.pk, status=RunStatus.READING).update(message=stall_note(idle))


def _reading_done(run: FlowRun, coordinator: RedisRunCoordinator) -> None:
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
    if "path" in config:
        where, nothing = f"source.path {config['path']!r}", "matched no file"
    elif "bucket" in config:
        url = f"s3://{config['bucket']}/{config.get('prefix', '')}"
        where, nothing = (
            f"source.prefix and source.pattern ({url}, {config.get('pattern', '**')})",
            "matched no object",
        )
    else:
        where, nothing = "the source", "gave no split"
    found = nothing if not Split.objects.filter(run=run).exists() else "holds no record"
    return (
        f"{where} {found}; the sink was left as it was "
        "(set allow_empty = true in [source] to accept an empty result)"
    )


def _enumerate(run: FlowRun, source: Source, *, budget_s: float) -> TickResult | None:
    """One ``enumerator_tick``; a source past its flow's split ceiling fails the run (the
    pass that found too many is rolled back) and returns None."""
    try:
        return enumerator_tick(
            source=source,
            coordinator=coordinator_for(run),
            store=DjangoRunStore(run),
            parallelism=run.spec["parallelism"],
            atomic=transaction.atomic,
            budget_s=budget_s,
        )
    except SplitCeilingReached as exc:
        log.warning("run %s: %s", run.pk, exc)
        run_finish(run=run, status=RunStatus.FAILED, message=str(exc))
        return None


def serve_split_requests(run: FlowRun, source: Source) -> None:
    """Runs the enumerator in the thread of a reader that just asked for splits, so the
    request does not wait for a free worker slot behind other readers. If another tick is
    at work, that tick serves the request; what a short budget leaves goes to a queued tick."""
    result = _enumerate(run, source, budget_s=INLINE_TICK_BUDGET_S)
    if result is not None and result.more:
        request_tick(run_id=run.pk)


def flow_tick_request(*, flow_id: int) -> None:
    """Beat's periodic tick of a flow: queues a tick of its active run, if it has one and
    none waits (``request_tick``: in its owner's line, so one owner's many flows do not
    hold up another's); the tick of a flow that no longer exists removes itself."""
    run_id = (
        FlowRun.objects.filter(flow_id=flow_id, status__in=[RunStatus.READING, RunStatus.TRANSFORMING])
        .values_list("pk", flat=True)
        .first()
    )
    if run_id is not None:
        request_tick(run_id=run_id)
    else:
        flow_ticks_remove_orphan(flow_id=flow_id)


def flow_tick(*, flow_id: int) -> None:
    """The periodic tick of a flow: ticks its active run, if it has one; the tick of a
    flow that no longer exists removes itself from the schedule."""
    run = FlowRun.objects.filter(
        flow_id=flow_id, status__in=[RunStatus.READING, RunStatus.TRANSFORMING]
    ).first()
    if run is not None:
        run_tick(run_id=run.pk)
    else:
        flow_ticks_remove_orphan(flow_id=flow_id)


def _ensure_transform(run: FlowRun, *, unbounded: bool = False) -> None:
    """Queues the Spark job unless one is running or its retry backoff has not passed; an
    unbounded run's streaming transform makes its last epoch instead."""
    if unbounded:
        ensure_stream_transform(run)
        return
    coordinator = coordinator_for(run)
    if coordinator.is_set(Mark.TRANSFORM_LEASE):
        return
    if transform_in_backoff(run):
        return
    if coordinator.mark_once(Mark.TRANSFORM_QUEUED, 60_000):
        run_task_send(RUN_TRANSFORM, run.pk)


def transform_in_backoff(run: FlowRun) -> bool:
    """True while a failed transform attempt waits before the next (2, 4, 8... s, at most 60)."""
    if not (run.transform_attempts and run.transform_started_at):
        return False
    backoff = timedelta(seconds=min(60, 2**run.transform_attempts))
    # On the database's clock, which wrote transform_started_at: not this worker's.
    return FlowRun.objects.filter(pk=run.pk, transform_started_at__gt=Now() - backoff).exists()
