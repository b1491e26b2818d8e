"""Reads of runs: where a run is and what it says, its live counters, records/s and duration,
how an unbounded run goes, its metric samples, and a flow's latest run."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import redis
from django.db.models import BigIntegerField, Case, Count, OuterRef, Q, QuerySet, Subquery, Sum, Value, When
from django.db.models.functions import Coalesce
from django.utils import timezone

from dataflow.models import (
    ACTIVE_RUN_STATUSES,
    DataFlow,
    EpochStatus,
    FlowRun,
    MetricSample,
    Split,
    SplitStatus,
    TransformEpoch,
)
from dataflow.services.stalls import STALL_NOTE, run_stalled_for, stall_note

#: The statuses of a run that has ended.
ENDED_RUN_STATUSES = ("succeeded", "failed", "stopped")


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
        return self.status in ENDED_RUN_STATUSES


def run_message(run: FlowRun) -> str:
    """What a run says, as every view shows it: its stored message, or, for a reading run
    that has had no live reader for ``DATAFLOW_STALL_SECONDS``, that it is stalled (worked
    out now, from its readers' leases and heartbeats in Redis, so it shows even when no
    tick runs to write it). A stall note that no longer holds is not shown."""
    try:
        idle = run_stalled_for(run)
    except redis.RedisError:
        return run.message  # a page must not break with Redis away; the tick's note stays
    stored = run.message
    if stored.startswith(STALL_NOTE):
        stored = ""
    if idle is None:
        return stored
    return stall_note(idle) + (f" (last: {stored})" if stored else "")


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
        message=run_message(run),
    )


def _rows_streamed(run: FlowRun) -> int | None:
    """Rows the committed epochs of a streaming transform wrote so far (None: no epoch)."""
    epochs = TransformEpoch.objects.filter(run=run, status=EpochStatus.COMMITTED)
    return epochs.aggregate(rows=Sum("rows_written"))["rows"]


@dataclass(frozen=True)
class StreamProgress:
    """How an unbounded run goes, where a percentage means nothing: its latest rate and lag
    (from its latest sample; None before the first) and its last committed epoch."""

    records_per_s: float | None
    lag: int | None
    last_epoch: int | None
    last_epoch_rows: int | None

    def describe(self, *, reading: bool = True) -> str:
        """``12.5 rec/s lag=40 epoch=7 (+120 rows)``, leaving out what is not known yet, and
        the rate and lag once the run no longer reads (``reading``: they were sampled while
        it read, and no longer hold)."""
        parts = []
        if self.records_per_s is not None and reading:
            parts.append(f"{self.records_per_s:.1f} rec/s")
        if self.lag is not None and reading:
            parts.append(f"lag={self.lag}")
        if self.last_epoch is None:
            parts.append("no epoch yet")
        else:
            parts.append(f"epoch={self.last_epoch} (+{self.last_epoch_rows or 0} rows)")
        return " ".join(parts)


def stream_progress(*, run_id: int) -> StreamProgress:
    """The rate, lag and last committed epoch of an unbounded run (see ``StreamProgress``)."""
    sample = MetricSample.objects.filter(run_id=run_id, split_id="").order_by("-at").first()
    epoch = (
        TransformEpoch.objects.filter(run_id=run_id, status=EpochStatus.COMMITTED)
        .order_by("-number")
        .values("number", "rows_written")
        .first()
    )
    return StreamProgress(
        records_per_s=None if sample is None else sample.records_per_s,
        lag=None if sample is None else sample.lag,
        last_epoch=None if epoch is None else epoch["number"],
        last_epoch_rows=None if epoch is None else epoch["rows_written"],
    )


def run_records_per_s(*, run: FlowRun, records_read: int, sampled: float | None) -> float | None:
    """The records/s every screen (dashboard, admin) shows for ``run``: while it reads and is
    not paused, ``sampled`` (what its latest metric sample measured, None before the first);
    once it has ended, ``records_read`` over its whole duration, start to end, so a finished
    run has one figure wherever it is shown; None in between (paused, transforming)."""
    if run.status in ENDED_RUN_STATUSES:
        if run.finished_at is None or run.started_at is None:
            return None
        seconds = (run.finished_at - run.started_at).total_seconds()
        return round(records_read / seconds, 1) if seconds > 0 else None
    if run.status == "reading" and run.paused_at is None:
        return sampled
    return None


def run_duration_s(*, started_at, finished_at) -> float | None:
    """Seconds from start to end, or to now for a run that has not ended."""
    if started_at is None:
        return None
    return ((finished_at or timezone.now()) - started_at).total_seconds()


def _split_total(field: str, run_ref: str) -> Subquery:
    totals = (
        Split.objects.filter(run_id=OuterRef(run_ref))
        .order_by()
        .values("run_id")
        .annotate(total=Sum(field))
        .values("total")
    )
    return Subquery(totals, output_field=BigIntegerField())


def run_counter_live(field: str, *, status: str, run_ref: str, stored: Any) -> Case:
    """A run's counter ``field`` as a query expression: summed over its splits while it is
    active (the run's own column is set only when it ends), the stored total once it has
    ended. ``status``, ``run_ref`` and ``stored`` name the run's status, id and stored total
    in the annotated query."""
    return Case(
        When(**{f"{status}__in": ACTIVE_RUN_STATUSES}, then=Coalesce(_split_total(field, run_ref), Value(0))),
        default=stored,
        output_field=BigIntegerField(),
    )


def runs_with_live_counters(queryset: QuerySet[FlowRun]) -> QuerySet[FlowRun]:
    """``queryset`` with ``live_records`` and ``live_errors``: summed over the splits of an
    active run, the stored totals of an ended one."""
    return queryset.annotate(
        live_records=run_counter_live("records_read", status="status", run_ref="pk", stored="records_read"),
        live_errors=run_counter_live("errors_count", status="status", run_ref="pk", stored="errors_count"),
    )


def run_live(*, run: FlowRun) -> dict[str, Any]:
    """What the admin's run pages show and poll: the run's live counters, its records/s
    (``run_records_per_s``, as the dashboard shows it), its latest lag and latency (from
    its metric samples), and its flow; ``rate`` is None while none is known."""
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


#: The most samples ``metrics_series`` returns: the latest ones (2 hours at 10 s).
SERIES_MAX = 720


def metrics_series(*, run: FlowRun, split_id: str = "", since=None, limit: int = SERIES_MAX) -> list[dict]:
    """A run's samples over time, oldest first: of the whole run (``split_id`` empty) or of
    one split; only those after ``since`` (a datetime) if given; at most the latest ``limit``."""
    samples = MetricSample.objects.filter(run=run, split_id=split_id)
    if since is not None:
        samples = samples.filter(at__gt=since)
    fields = ("at", "records_read", "bytes_read", "batches", "errors", "records_per_s", "lag", "latency_ms")
    latest = list(samples.order_by("-at").values(*fields)[:limit])
    return latest[::-1]


def flow_latest_run(*, flow: DataFlow) -> FlowRun | None:
    """The flow's newest run (None: it never ran)."""
    return flow.runs.order_by("-id").first()


def latest_runs_of(*, flows: list[DataFlow]) -> dict[int, FlowRun]:
    """The newest run of each of ``flows`` that has one, by flow id, in one query."""
    newest = FlowRun.objects.filter(flow=OuterRef("flow")).order_by("-id").values("id")[:1]
    runs = FlowRun.objects.filter(flow__in=flows, pk=Subquery(newest))
    return {run.flow_id: run for run in runs}
