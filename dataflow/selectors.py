"""Reads: what the commands, admin and dashboard show about flows and runs."""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Count, OuterRef, Q, Subquery, Sum

from dataflow.models import DataFlow, EpochStatus, FlowRun, SplitStatus, TransformEpoch


@dataclass(frozen=True)
class RunProgress:
    status: str
    splits_total: int
    splits_finished: int
    records_read: int
    errors_count: int
    rows_written: int | None
    message: str

    @property
    def done(self) -> bool:
        return self.status in ("succeeded", "failed", "stopped")


def run_progress(*, run_id: int) -> RunProgress:
    """Where a run is; counters are summed over its splits, so they are live while it runs."""
    run = FlowRun.objects.get(pk=run_id)
    counts = run.splits.aggregate(
        known=Count("id"),
        finished=Count("id", filter=Q(status=SplitStatus.FINISHED)),
        records=Sum("records_read", default=0),
        errors=Sum("errors_count", default=0),
    )
    return RunProgress(
        status=run.status,
        splits_total=counts["known"] + run.splits_pending,
        splits_finished=counts["finished"],
        records_read=counts["records"],
        errors_count=counts["errors"],
        rows_written=run.rows_written if run.rows_written is not None else _rows_streamed(run),
        message=run.message,
    )


def _rows_streamed(run: FlowRun) -> int | None:
    """Rows the committed epochs of a streaming transform wrote so far (None: no epoch)."""
    epochs = TransformEpoch.objects.filter(run=run, status=EpochStatus.COMMITTED)
    return epochs.aggregate(rows=Sum("rows_written"))["rows"]


def flow_list() -> list[tuple[DataFlow, FlowRun | None]]:
    """Every flow with its latest run."""
    latest = FlowRun.objects.filter(flow=OuterRef("pk")).order_by("-id").values("id")[:1]
    flows = list(DataFlow.objects.annotate(latest_run_id=Subquery(latest)))
    runs = FlowRun.objects.in_bulk([f.latest_run_id for f in flows if f.latest_run_id])
    return [(flow, runs.get(flow.latest_run_id)) for flow in flows]
