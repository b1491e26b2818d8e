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


#: The most splits ``flow_status`` lists (a files source may have thousands; the counts
#: cover them all).
STATUS_SPLITS_MAX = 1000


def flow_status(*, flow: DataFlow, splits_max: int = STATUS_SPLITS_MAX) -> dict:
    """Where the flow is: its state, its latest run with live counters, and per split its
    state, reader, position (also in the source's words), records, lag and last error."""
    run = flow.runs.order_by("-id").first()
    out: dict = {"flow": flow.name, "status": flow.status, "run": None, "splits": [], "splits_listed": 0}
    if run is None:
        return out
    progress = run_progress(run_id=run.pk)
    out["run"] = {
        "id": run.pk,
        "status": run.status,
        "paused": run.paused_at is not None,
        "trigger": run.trigger,
        "started_at": run.started_at,
        "finished_at": run.finished_at,
        "message": run.message,
        "splits_total": progress.splits_total,
        "splits_finished": progress.splits_finished,
        "records_read": progress.records_read,
        "errors_count": progress.errors_count,
        "rows_written": progress.rows_written,
    }
    out["splits"] = _split_rows(run, splits_max)
    out["splits_listed"] = len(out["splits"])
    return out


def _split_rows(run: FlowRun, limit: int) -> list[dict]:
    from dataflow.models import Assignment, AssignmentOutcome, MetricSample

    splits = list(run.splits.order_by("split_id")[:limit])
    readers = {
        a.split_id: a
        for a in Assignment.objects.filter(split__in=splits, outcome=AssignmentOutcome.ACTIVE).only(
            "split_id", "subtask", "reader_location"
        )
    }
    latest = MetricSample.objects.filter(run=run, split_id=OuterRef("split_id")).order_by("-at")
    lags = dict(
        run.splits.filter(pk__in=[s.pk for s in splits])
        .annotate(lag=Subquery(latest.values("lag")[:1]))
        .values_list("split_id", "lag")
    )
    format_position = _position_formatter(run)
    rows = []
    for split in splits:
        reader = readers.get(split.pk)
        rows.append(
            {
                "split_id": split.split_id,
                "state": split.status,
                "reader": None
                if reader is None
                else {"subtask": reader.subtask, "location": reader.reader_location},
                "position": split.position,
                "offset": format_position(split.position),
                "records_read": split.records_read,
                "bytes_read": split.bytes_read,
                "errors_count": split.errors_count,
                "lag": lags.get(split.split_id),
                "error": split.error,
            }
        )
    return rows


def _position_formatter(run: FlowRun):
    """The source's ``format_position``, or ``str`` where the source cannot be built now
    (a config that no longer validates must not break a status page)."""
    from dataflow.services.runs import source_for

    try:
        return source_for(run).format_position
    except Exception:  # noqa: BLE001 - a status page shows raw positions instead
        return str


#: The most samples ``metrics_series`` returns: the latest ones (2 hours at 10 s).
SERIES_MAX = 720


def metrics_series(*, run: FlowRun, split_id: str = "", since=None, limit: int = SERIES_MAX) -> list[dict]:
    """A run's samples over time, oldest first: of the whole run (``split_id`` empty) or of
    one split; only those after ``since`` (a datetime) if given; at most the latest ``limit``."""
    from dataflow.models import MetricSample

    samples = MetricSample.objects.filter(run=run, split_id=split_id)
    if since is not None:
        samples = samples.filter(at__gt=since)
    fields = ("at", "records_read", "bytes_read", "batches", "errors", "records_per_s", "lag", "latency_ms")
    latest = list(samples.order_by("-at").values(*fields)[:limit])
    return latest[::-1]
