"""When a reading run has no live reader: worked out from Redis when asked, so every view
(and the tick) says the same, even with no tick running."""

from __future__ import annotations

from django.conf import settings

from dataflow.models import FlowRun, RunStatus
from dataflow.services.context import coordinator_for

#: How a stall note begins; other notes also begin "waiting: " (a stream whose pattern
#: matches nothing yet), and only this one is worked out anew by each view.
STALL_NOTE = "waiting: no reader has run"


def stall_note(idle_s: float) -> str:
    """What a reading run says when no reader has run for ``idle_s`` seconds."""
    queue = settings.CELERY_TASK_DEFAULT_QUEUE
    return (
        f"{STALL_NOTE} for {int(idle_s)} s: is a Celery worker consuming queue {queue!r}, with a free slot?"
    )


def run_stalled_for(run: FlowRun) -> float | None:
    """Seconds a reading, unpaused run has had no live reader, once that is at least
    ``DATAFLOW_STALL_SECONDS``; None otherwise. Read from Redis when asked (a reader's
    lease and its last heartbeat), so it holds with no tick running: the process that ran
    the readers and the tick may be gone. Measured on Redis's clock, as the heartbeat was
    (a reader or a web process whose clock is minutes off sees no false stall)."""
    if run.status != RunStatus.READING or run.paused_at is not None:
        return None
    coordinator = coordinator_for(run)
    parallelism = run.spec.get("parallelism") or run.flow.parallelism
    if coordinator.live_readers(parallelism):
        return None
    idle = coordinator.now() - coordinator.reader_alive_since()
    return idle if idle >= settings.DATAFLOW_STALL_SECONDS else None
