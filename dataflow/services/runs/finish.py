"""The end of a run: its outcome on the run and the flow, the flow's tick switched off,
its webhook told, then its Redis keys and (when no longer needed) its landed files let go."""

from __future__ import annotations

import logging

from django.conf import settings
from django.db import transaction
from django.db.models import Sum
from django.utils import timezone

from dataflow.models import DataFlow, FlowRun, FlowStatus, RunStatus, Split
from dataflow.services.cleanup import run_resumable
from dataflow.services.context import coordinator_for, landing_zone, run_key
from dataflow.services.health import run_failures_check
from dataflow.services.lineage import run_lineage_emit
from dataflow.services.metrics import metrics_sample
from dataflow.services.notify import run_notify
from dataflow.services.schema_changes import schema_changes_notify
from dataflow.services.ticks import flow_ticks_set

log = logging.getLogger("dataflow.services.runs")

FINAL_FLOW_STATUS = {
    RunStatus.SUCCEEDED: FlowStatus.SUCCEEDED,
    RunStatus.FAILED: FlowStatus.FAILED,
    RunStatus.STOPPED: FlowStatus.STOPPED,
}


def run_finish(
    *,
    run: FlowRun,
    status: RunStatus,
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
        flow_ticks_set(flow=DataFlow.objects.get(pk=run.flow_id), enabled=False)
        run_notify(run=run, status=status)  # the webhook is called once this commits
        schema_changes_notify(run=run)
        run_failures_check(run=run, status=status)
        transaction.on_commit(lambda: _release_run(run, status))
        transaction.on_commit(lambda: _lineage_end(run.pk), robust=True)
    log.info("run %s of %s: %s %s", run.pk, run.flow.name, status, message)
    return True


def _lineage_end(run_id: int) -> None:
    run = FlowRun.objects.select_related("flow__owner").filter(pk=run_id).first()
    if run is not None:
        run_lineage_emit(run=run)  # COMPLETE, FAIL or ABORT, sent off this thread


def _release_run(run: FlowRun, status: str) -> None:
    try:
        metrics_sample(run=run)  # its last figures, so a short run's charts have an end
    except Exception as exc:  # noqa: BLE001 - charts must never keep a run from ending
        log.warning("run %s: no last metric sample: %s", run.pk, exc)
    coordinator = coordinator_for(run)
    coordinator.purge()
    coordinator.stop()  # a reader that missed the purge still sees the run is over
    landed_files_release(run, status)


def landed_files_release(run: FlowRun, status: str) -> None:
    """Removes the landed files of a run that has ended and needs them no more: after
    success the sink holds the result, and a failed run that cannot go on (only ``restart
    --failed`` of its failed splits can) has no use for them either. A run that can still be
    resumed keeps them (``cleanup`` says what it holds); so does every run with
    ``DATAFLOW_KEEP_LANDED``."""
    if settings.DATAFLOW_KEEP_LANDED:
        return
    if status == RunStatus.SUCCEEDED or (status == RunStatus.FAILED and not run_resumable(run=run)):
        landing_zone().discard_run(run_key(run))
