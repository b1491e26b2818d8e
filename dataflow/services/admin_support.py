"""Reads the admin needs beyond ``dataflow.selectors``: lists annotated with live counters
(one query per page, whatever its length), a run's progress as the admin polls it, how far
a split is, and which steering actions fit a flow's state."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db.models import BigIntegerField, Case, OuterRef, QuerySet, Subquery, Sum, Value, When
from django.db.models.functions import Coalesce
from django.utils import timezone

from dataflow.models import ACTIVE_RUN_STATUSES, DataFlow, FlowRun, FlowStatus, Split, SplitStatus
from dataflow.selectors import metrics_series, run_progress, run_records_per_s, split_byte_range


def _split_total(field: str, run_ref: str) -> Subquery:
    totals = (
        Split.objects.filter(run_id=OuterRef(run_ref))
        .order_by()
        .values("run_id")
        .annotate(total=Sum(field))
        .values("total")
    )
    return Subquery(totals, output_field=BigIntegerField())


def _live(field: str, *, status: str, run_ref: str, stored: Any) -> Case:
    """A run's counter: summed over its splits while it is active (the run's own column is
    set only when it ends), the stored total once it has ended."""
    return Case(
        When(**{f"{status}__in": ACTIVE_RUN_STATUSES}, then=Coalesce(_split_total(field, run_ref), Value(0))),
        default=stored,
        output_field=BigIntegerField(),
    )


def flows_with_last_run(queryset: QuerySet[DataFlow]) -> QuerySet[DataFlow]:
    """``queryset`` with each flow's latest run: ``last_run_id``, ``last_run_status``,
    ``last_run_records``, ``last_run_errors`` (live while it runs), ``last_run_started_at``
    and ``last_run_finished_at`` (None without a run). One query for any number of flows."""
    latest = FlowRun.objects.filter(flow=OuterRef("pk")).order_by("-id")

    def last(field: str) -> Subquery:
        return Subquery(latest.values(field)[:1])

    return queryset.annotate(
        last_run_id=last("id"),
        last_run_status=last("status"),
        last_run_started_at=last("started_at"),
        last_run_finished_at=last("finished_at"),
        last_run_stored_records=last("records_read"),
        last_run_stored_errors=last("errors_count"),
    ).annotate(
        last_run_records=_live(
            "records_read", status="last_run_status", run_ref="last_run_id", stored="last_run_stored_records"
        ),
        last_run_errors=_live(
            "errors_count", status="last_run_status", run_ref="last_run_id", stored="last_run_stored_errors"
        ),
    )


def runs_with_live_counters(queryset: QuerySet[FlowRun]) -> QuerySet[FlowRun]:
    """``queryset`` with ``live_records`` and ``live_errors``: summed over the splits of an
    active run, the stored totals of an ended one."""
    return queryset.annotate(
        live_records=_live("records_read", status="status", run_ref="pk", stored="records_read"),
        live_errors=_live("errors_count", status="status", run_ref="pk", stored="errors_count"),
    )


def run_duration_s(*, started_at, finished_at) -> float | None:
    """Seconds from start to end, or to now for a run that has not ended."""
    if started_at is None:
        return None
    return ((finished_at or timezone.now()) - started_at).total_seconds()


def run_live(*, run: FlowRun) -> dict[str, Any]:
    """What the admin's run pages show and poll: the run's live counters, its records/s
    (``selectors.run_records_per_s``, as the dashboard shows it), its latest lag and latency
    (from its metric samples), and its flow; ``rate`` is None while none is known."""
    progress = run_progress(run_id=run.pk)
    samples = metrics_series(run=run, limit=1)
    sample = samples[-1] if samples else None
    # An ended run keeps its totals when a clean-up has removed its splits.
    records = max(run.records_read, progress.records_read) if progress.done else progress.records_read
    records_per_s = run_records_per_s(
        run=run, records_read=records, sampled=sample["records_per_s"] if sample else None
    )
    return {
        "run": {
            "id": run.pk,
            "status": progress.status,
            "paused": run.paused_at is not None,
            "done": progress.done,
            "message": progress.message,
            "trigger": run.trigger,
            "started_at": run.started_at.isoformat() if run.started_at else None,
            "finished_at": run.finished_at.isoformat() if run.finished_at else None,
            "duration_s": run_duration_s(started_at=run.started_at, finished_at=run.finished_at),
            "records_read": records,
            "errors_count": progress.errors_count,
            "rows_written": progress.rows_written,
            "splits_total": progress.splits_total,
            "splits_finished": progress.splits_finished,
        },
        "rate": None
        if sample is None and records_per_s is None
        else {
            "at": sample["at"].isoformat() if sample else None,
            "records_per_s": records_per_s,
            "lag": sample["lag"] if sample else None,
            "latency_ms": sample["latency_ms"] if sample else None,
        },
        "flow": {"id": run.flow_id, "name": run.flow.name, "status": run.flow.status},
    }


def split_share(*, split: Split) -> float | None:
    """How much of the split was read, from 0 to 1, where its size is known: a finished
    split is read whole; a split whose payload is a byte range (``start``, ``end``: a
    file's) is read up to its position. None for a split of unknown size (a stream)."""
    if split.status == SplitStatus.FINISHED:
        return 1.0
    extent = split_byte_range(split.payload)
    if extent is None:
        return None
    start, end = extent
    return min(1.0, max(0.0, (split.position - start) / (end - start)))


@dataclass(frozen=True)
class FlowAction:
    """A steering button: its name in the URL, its label, and what it does, in words."""

    name: str
    label: str
    title: str


ACTIONS = {
    "start": FlowAction("start", "Start", "Start a new run"),
    "pause": FlowAction("pause", "Pause", "Hold the readers; they keep their splits"),
    "resume": FlowAction("resume", "Resume", "Go on from where the run was paused or stopped"),
    "stop": FlowAction("stop", "Stop", "Stop the run; landed data and checkpoints are kept"),
    "restart": FlowAction("restart", "Restart", "Stop the active run, if any, and start a new one"),
    "restart_failed": FlowAction(
        "restart_failed", "Restart failed splits", "Read the latest run's failed splits again"
    ),
}
ACTIONS_BY_STATUS = {
    FlowStatus.IDLE: ("start",),
    FlowStatus.RUNNING: ("pause", "stop", "restart"),
    FlowStatus.PAUSED: ("resume", "stop", "restart"),
    FlowStatus.STOPPED: ("resume", "start"),
    FlowStatus.SUCCEEDED: ("start",),
    FlowStatus.FAILED: ("start",),
}


def flow_actions(*, flow: DataFlow) -> list[FlowAction]:
    """The steering actions that fit the flow's state (the services still decide: a
    button that no longer fits is refused with the service's reason)."""
    names = list(ACTIONS_BY_STATUS.get(flow.status, tuple(ACTIONS)))
    latest = flow.runs.order_by("-id").first()
    if latest is not None and latest.splits.filter(status=SplitStatus.FAILED).exists():
        names.append("restart_failed")
    return [ACTIONS[name] for name in names]
