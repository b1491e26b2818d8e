"""What a reading unbounded run does on each tick besides enumerating: its transform kept
going (a slice of ``driver`` queued by task name), backpressure, checkpoints
(``checkpoints``) and metric samples (``metrics``).

``runs.tick.run_tick`` calls ``stream_run_tick`` on each tick of a reading unbounded run.
"""

from __future__ import annotations

from django.conf import settings
from django.db.models import Sum

from dataflow.models import (
    ACTIVE_RUN_STATUSES,
    FlowRun,
    LandedBatch,
    RunStatus,
    Split,
)
from dataflow.services.checkpoints import checkpoint_take
from dataflow.services.context import coordinator_for
from dataflow.services.metrics import metrics_sample
from dataflow.services.queues import STREAM_TRANSFORM, run_task_send
from source_support.coordination import Mark, RedisRunCoordinator
from source_support.runtime import TickResult

#: How long a queued slice keeps another from being queued. Short: a slice whose worker
#: was killed holding its message must not stop the stream for long; a second slice
#: queued while the first still waits is harmless (it finds the lease held and leaves).
QUEUED_TTL_MS = 10_000

PAUSE_NOTE = "paused: "
WAITING_NOTE = "waiting: "


def stream_run_tick(*, run: FlowRun, coordinator: RedisRunCoordinator, result: TickResult) -> None:
    """The periodic work of a reading unbounded run, each step at its own pace."""
    ensure_stream_transform(run)
    run_backpressure(run=run, coordinator=coordinator)
    if coordinator.mark_once(Mark.CHECKPOINT_DUE, int(settings.DATAFLOW_CHECKPOINT_SECONDS * 1000)):
        checkpoint_take(run=run)
    if coordinator.mark_once(Mark.METRICS_DUE, int(settings.DATAFLOW_METRICS_SECONDS * 1000)):
        metrics_sample(run=run)
    _say_waiting(run, pending=result.pending)


def ensure_stream_transform(run: FlowRun) -> None:
    """Queues a slice of the run's streaming transform unless one is running or queued."""
    if run.status not in ACTIVE_RUN_STATUSES:
        return
    coordinator = coordinator_for(run)
    if coordinator.is_set(Mark.TRANSFORM_LEASE):
        return
    if coordinator.mark_once(Mark.TRANSFORM_QUEUED, QUEUED_TTL_MS):
        run_task_send(STREAM_TRANSFORM, run.pk)


def stream_transform_requeue(*, run_id: int) -> None:
    """Queues the next slice of the run's streaming transform (the last one asked to go on)."""
    run_task_send(STREAM_TRANSFORM, run_id)


def untransformed_records(run: FlowRun) -> int:
    """Records landed and committed but not yet taken by a transform epoch."""
    rows = LandedBatch.objects.filter(split__run=run, epoch__isnull=True)
    return rows.aggregate(n=Sum("records", default=0))["n"]


def run_backpressure(*, run: FlowRun, coordinator: RedisRunCoordinator) -> bool:
    """Pauses the run's readers while more than ``backpressure_records`` records wait for
    the transform, and lets them go on below half of it (so they do not flap); returns
    whether they are paused. Readers that pause read nothing, so memory stays bounded
    whatever the input rate."""
    limit = run.spec.get("backpressure_records", 1_000_000)
    waiting = untransformed_records(run)
    paused = coordinator.is_set(Mark.BACKPRESSURE)
    if not paused and waiting > limit:
        coordinator.backpressure_set(True)
        _set_note(
            run, f"{PAUSE_NOTE}{waiting:,} records wait for the transform (backpressure_records {limit:,})"
        )
        return True
    if paused and waiting <= limit // 2:
        coordinator.backpressure_set(False)
        _clear_note(run, PAUSE_NOTE)
        return False
    return paused


def _say_waiting(run: FlowRun, *, pending: int) -> None:
    """An unbounded source that has found nothing to read yet waits, and says so."""
    if Split.objects.filter(run=run).exists() or pending:
        _clear_note(run, WAITING_NOTE)
        return
    config = run.spec["source_config"]
    what = next((f"source.{k} {config[k]!r}" for k in ("streams", "path") if k in config), "the source")
    _set_note(run, f"{WAITING_NOTE}nothing matches {what} yet; new matches are picked up as they appear")


def _set_note(run: FlowRun, note: str) -> None:
    FlowRun.objects.filter(pk=run.pk, status=RunStatus.READING).exclude(message=note).update(message=note)


def _clear_note(run: FlowRun, prefix: str) -> None:
    FlowRun.objects.filter(pk=run.pk, message__startswith=prefix).update(message="")
