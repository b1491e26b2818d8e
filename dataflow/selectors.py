"""Reads: what the commands, admin and dashboard show about flows and runs."""

from __future__ import annotations

from dataclasses import dataclass

import redis
from django.db.models import Count, OuterRef, Q, QuerySet, Subquery, Sum
from django.utils import timezone

from dataflow.models import (
    ACTIVE_RUN_STATUSES,
    Assignment,
    AssignmentOutcome,
    Connection,
    DataFlow,
    DeadLetter,
    EpochStatus,
    FlowRun,
    MetricSample,
    RunStatus,
    SplitStatus,
    TransformEpoch,
)
from dataflow.services.context import source_for
from dataflow.services.stalls import STALL_NOTE, run_stalled_for, stall_note


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


@dataclass(frozen=True)
class StreamProgress:
    """How an unbounded run goes, where a percentage means nothing: its latest rate and lag
    (from its latest sample; None before the first) and its last committed epoch."""

    records_per_s: float | None
    lag: int | None
    last_epoch: int | None
    last_epoch_rows: int | None

    def describe(self) -> str:
        """``12.5 rec/s lag=40 epoch=7 (+120 rows)``, leaving out what is not known yet."""
        parts = []
        if self.records_per_s is not None:
            parts.append(f"{self.records_per_s:.1f} rec/s")
        if self.lag is not None:
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


#: The statuses of a run that has ended.
ENDED_RUN_STATUSES = ("succeeded", "failed", "stopped")


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


#: The most runs ``flow_runs`` lists by default (the newest).
RUNS_LISTED = 50


def flow_runs(*, flow: DataFlow, limit: int = RUNS_LISTED) -> list[dict]:
    """The flow's newest runs, newest first: what started each, its outcome and counters
    (live while it runs) and how long it took (until now while it runs)."""
    rows = []
    for run in flow.runs.order_by("-id")[:limit]:
        progress = run_progress(run_id=run.pk)
        end = run.finished_at or timezone.now()
        # An ended run keeps its totals when a clean-up has removed its splits.
        records, errors = progress.records_read, progress.errors_count
        if progress.done:
            records, errors = max(run.records_read, records), max(run.errors_count, errors)
        rows.append(
            {
                "id": run.pk,
                "status": run.status,
                "paused": run.paused_at is not None,
                "trigger": run.trigger,
                "records_read": records,
                "rows_written": progress.rows_written,
                "errors_count": errors,
                "started_at": run.started_at,
                "duration_s": round((end - run.started_at).total_seconds(), 1),
                "message": progress.message,
            }
        )
    return rows


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
        "message": progress.message,
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
    try:
        return source_for(run).format_position
    except Exception:  # noqa: BLE001 - a status page shows raw positions instead
        return str


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


# Dashboard (dataflow/web): what a user may see, at a glance and per flow.

#: Runs, dead letters and run messages the flow page lists (the latest ones).
DASHBOARD_RUNS = 12
DASHBOARD_DEAD_LETTERS = 10
DASHBOARD_RUN_ERRORS = 5
#: Splits the flow page lists (the counts cover them all).
DASHBOARD_SPLITS = 200


def flows_visible(*, user):
    """The flows ``user`` may see: every flow for staff, only the ones they own otherwise."""
    flows = DataFlow.objects.all()
    if getattr(user, "is_staff", False):
        return flows
    if not getattr(user, "is_authenticated", False):
        return flows.none()
    return flows.filter(owner=user)


def flow_overview(*, user) -> list[dict]:
    """Each flow ``user`` may see, by name: its state, its latest run, the records that run
    read, its records/s (``run_records_per_s``) and the lag of its latest sample (None
    where no sample was taken, and once the run has ended)."""
    latest_run = FlowRun.objects.filter(flow=OuterRef("pk")).order_by("-id").values("id")[:1]
    flows = list(flows_visible(user=user).annotate(latest_run_id=Subquery(latest_run)))
    sample = MetricSample.objects.filter(run=OuterRef("pk"), split_id="").order_by("-at")
    runs = FlowRun.objects.filter(pk__in=[f.latest_run_id for f in flows if f.latest_run_id]).annotate(
        last_records_per_s=Subquery(sample.values("records_per_s")[:1]),
        last_lag=Subquery(sample.values("lag")[:1]),
        split_records=Sum("splits__records_read", default=0),
    )
    runs = {run.pk: run for run in runs}
    return [_overview_row(flow, runs.get(flow.latest_run_id)) for flow in flows]


def _flow_card(flow: DataFlow) -> dict:
    """What the dashboard shows of a flow itself, on the list and on its page."""
    return {
        "name": flow.name,
        "description": flow.description,
        "status": flow.status,
        "source_type": flow.source_type,
        "format_type": flow.format_type,
        "sink_type": flow.sink_type,
    }


def _overview_row(flow: DataFlow, run: FlowRun | None) -> dict:
    row = {
        **_flow_card(flow),
        "run": None,
        "records_read": 0,
        "records_per_s": None,
        "lag": None,
    }
    if run is None:
        return row
    row["run"] = {
        "id": run.pk,
        "status": run.status,
        "paused": run.paused_at is not None,
        "started_at": run.started_at,
        "finished_at": run.finished_at,
    }
    # Totals land on the run when it ends; until then its splits hold them.
    row["records_read"] = max(run.records_read, run.split_records)
    row["records_per_s"] = run_records_per_s(
        run=run, records_read=row["records_read"], sampled=run.last_records_per_s
    )
    # A paused run reads nothing, but its lag still grows.
    row["lag"] = run.last_lag if run.status in ACTIVE_RUN_STATUSES else None
    return row


def flow_dashboard(*, flow: DataFlow, run_id: int | None = None, since=None) -> dict:
    """Everything a flow's page shows: its status (``flow_status``) with each listed split's
    progress where its size is known, the latest run's metric series, the latest runs and
    the latest errors. The series holds only samples after ``since`` when ``run_id`` is
    still the latest run (a page that polls), else the whole series (``series_reset``);
    ``latest_sample`` is the run's latest sample either way. The run carries its
    ``records_per_s`` (``run_records_per_s``) and whether it has ``ended``."""
    status = flow_status(flow=flow, splits_max=DASHBOARD_SPLITS)
    run = flow.runs.order_by("-id").first()
    keep = run is not None and run_id == run.pk and since is not None
    status["flow"] = {**_flow_card(flow), "parallelism": flow.parallelism}
    status["series_reset"] = not keep
    status["series"] = [] if run is None else metrics_series(run=run, since=since if keep else None)
    latest = [] if run is None else metrics_series(run=run, limit=1)
    status["latest_sample"] = latest[0] if latest else None
    if run is not None:
        _add_split_progress(run, status["splits"])
        # An ended run has its totals even where its splits are gone.
        status["run"]["records_read"] = max(status["run"]["records_read"], run.records_read)
        sample = status["latest_sample"]
        status["run"]["records_per_s"] = run_records_per_s(
            run=run,
            records_read=status["run"]["records_read"],
            sampled=sample["records_per_s"] if sample else None,
        )
        # A run that has ended has no current lag or latency: its last ones are its final.
        status["run"]["ended"] = run.status in ENDED_RUN_STATUSES
    status["runs"] = _recent_runs(flow)
    status["errors"] = _recent_errors(flow)
    return status


def _add_split_progress(run: FlowRun, rows: list[dict]) -> None:
    """Sets ``size`` and ``progress`` (0..1) on rows whose split payload is a byte range
    (``start``, ``end``: the files connector) that positions count in; None elsewhere."""
    payloads = dict(
        run.splits.filter(split_id__in=[r["split_id"] for r in rows]).values_list("split_id", "payload")
    )
    for row in rows:
        extent = split_byte_range(payloads.get(row["split_id"]))
        row["size"], row["progress"] = None, None
        if row["state"] == SplitStatus.FINISHED:
            row["progress"] = 1.0
        if extent is not None:
            start, end = extent
            row["size"] = end - start
            if row["progress"] is None:
                row["progress"] = min(1.0, max(0.0, (row["position"] - start) / (end - start)))


#: A range that ends here runs to the end of a file whose length is not known up front.
_OPEN_END = 2**62


def split_byte_range(payload) -> tuple[int, int] | None:
    """(start, end) of a split whose payload is a byte range that positions count in (the
    files connector's); None for any other split (a stream, a compressed file)."""
    if not isinstance(payload, dict) or payload.get("compressed"):
        return None  # a compressed file's positions count uncompressed bytes
    start, end = payload.get("start"), payload.get("end")
    if not isinstance(start, int) or not isinstance(end, int) or not start < end < _OPEN_END:
        return None
    return start, end


def _recent_runs(flow: DataFlow) -> list[dict]:
    runs = list(
        flow.runs.order_by("-id").annotate(split_records=Sum("splits__records_read", default=0))[
            :DASHBOARD_RUNS
        ]
    )
    return [
        {
            "id": run.pk,
            "status": run.status,
            "paused": run.paused_at is not None,
            "trigger": run.trigger,
            "started_at": run.started_at,
            "finished_at": run.finished_at,
            "duration_s": None
            if run.finished_at is None
            else max(0.0, (run.finished_at - run.started_at).total_seconds()),
            "records_read": max(run.records_read, run.split_records),
            "rows_written": run.rows_written,
            "message": run_message(run),
        }
        for run in runs
    ]


def _recent_errors(flow: DataFlow) -> dict:
    """The latest runs that failed or say why they stopped, and the latest dead letters."""
    # As they read now: a stall note that no longer holds is dropped.
    said = flow.runs.exclude(message="").exclude(status=RunStatus.SUCCEEDED)
    fields = ("id", "status", "message", "finished_at", "started_at")
    runs = [
        {**{name: getattr(run, name) for name in fields}, "message": run_message(run)}
        for run in said.order_by("-id").only(*fields, "spec", "paused_at", "uid")[: DASHBOARD_RUN_ERRORS + 1]
    ]
    runs = [run for run in runs if run["message"]][:DASHBOARD_RUN_ERRORS]
    letters = DeadLetter.objects.filter(flow=flow).order_by("-id")
    return {
        "runs": runs,
        "dead_letters": [
            {
                "run_id": letter.run_id,
                "split_id": letter.split_id,
                "offset": letter.offset or str(letter.position),
                "line": letter.line,
                "error": letter.error,
                "raw": letter.raw[:300],
                "created_at": letter.created_at,
            }
            for letter in letters[:DASHBOARD_DEAD_LETTERS]
        ],
        "dead_letters_total": letters.count(),
    }


def connections_visible(*, user) -> QuerySet[Connection]:
    """The connections ``user`` may see: every one for staff, else those granted to the
    user directly or through one of the user's groups."""
    connections = Connection.objects.all()
    if user.is_staff or user.is_superuser:
        return connections
    return connections.filter(Q(users=user) | Q(groups__user=user)).distinct()
