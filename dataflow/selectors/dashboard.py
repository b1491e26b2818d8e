"""Reads of the dashboard (``dataflow/web``): the overview of the flows a user may see, and
everything a flow's page shows."""

from __future__ import annotations

import logging
from typing import Any

import redis
from django.db.models import Model, OuterRef, Subquery, Sum

from dataflow.models import ACTIVE_RUN_STATUSES, DataFlow, DeadLetter, FlowRun, MetricSample, RunStatus
from dataflow.selectors.flows import flow_health_lines, flow_status
from dataflow.selectors.runs import (
    ENDED_RUN_STATUSES,
    flow_latest_run,
    metrics_series,
    run_message,
    run_records_per_s,
)
from dataflow.selectors.splits import split_rows_add_progress
from dataflow.selectors.visibility import flows_visible
from dataflow.services.beat import beat_health
from dataflow.services.schema_changes import run_schema_changes

log = logging.getLogger(__name__)

#: Runs, dead letters and run messages the flow page lists (the latest ones).
DASHBOARD_RUNS = 12
DASHBOARD_DEAD_LETTERS = 10
DASHBOARD_RUN_ERRORS = 5
#: Splits the flow page lists (the counts cover them all).
DASHBOARD_SPLITS = 200


def flow_overview(*, user) -> list[dict]:
    """Each flow ``user`` may see, by name: its state, its latest run, the records that run
    read, its records/s (``run_records_per_s``) and the lag of its latest sample (None
    where no sample was taken, and once the run has ended)."""
    latest_run = FlowRun.objects.filter(flow=OuterRef("pk")).order_by("-id").values("id")[:1]
    flows = list(flows_visible(user=user).annotate(latest_run_id=Subquery(latest_run)))
    sample = MetricSample.objects.filter(run=OuterRef("pk"), split_id="").order_by("-at")
    runs = FlowRun.objects.filter(
        pk__in=[_column(f, "latest_run_id") for f in flows if _column(f, "latest_run_id")]
    ).annotate(
        last_records_per_s=Subquery(sample.values("records_per_s")[:1]),
        last_lag=Subquery(sample.values("lag")[:1]),
        split_records=Sum("splits__records_read", default=0),
    )
    runs = {run.pk: run for run in runs}
    return [_overview_row(flow, runs.get(_column(flow, "latest_run_id"))) for flow in flows]


def fleet_warnings() -> list[str]:
    """What the dashboard warns every user of about the fleet: that celery beat has not
    ticked for too long (flows' ticks and schedules wait for it). Empty when all is well."""
    try:
        beat = beat_health()
    except redis.RedisError as exc:
        log.warning("dashboard: beat's last tick not read, Redis did not answer: %s", exc)
        return []
    return [f"Scheduler (celery beat): {beat.summary}"] if beat.stale else []


def _column(row: Model, name: str) -> Any:
    """A column ``annotate()`` added to ``row``: django-stubs types these only through mypy's
    plugin, which pyright does not run."""
    return getattr(row, name)


def _flow_card(flow: DataFlow) -> dict:
    """What the dashboard shows of a flow itself, on the list and on its page."""
    return {
        "name": flow.name,
        "description": flow.description,
        "status": flow.status,
        "stale": flow.stale_since is not None,
        "health": flow_health_lines(flow=flow),
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
    row["records_read"] = max(run.records_read, _column(run, "split_records"))
    row["records_per_s"] = run_records_per_s(
        run=run, records_read=row["records_read"], sampled=_column(run, "last_records_per_s")
    )
    # A paused run reads nothing, but its lag still grows.
    row["lag"] = _column(run, "last_lag") if run.status in ACTIVE_RUN_STATUSES else None
    return row


def flow_dashboard(*, flow: DataFlow, run_id: int | None = None, since=None) -> dict:
    """Everything a flow's page shows: its status (``flow_status``) with each listed split's
    progress where its size is known, the latest run's metric series, the latest runs and
    the latest errors. The series holds only samples after ``since`` when ``run_id`` is
    still the latest run (a page that polls), else the whole series (``series_reset``);
    ``latest_sample`` is the run's latest sample either way. The run carries its
    ``records_per_s`` (``run_records_per_s``) and whether it has ``ended``."""
    status = flow_status(flow=flow, splits_page_size=DASHBOARD_SPLITS)
    run = flow_latest_run(flow=flow)
    keep = run is not None and run_id == run.pk and since is not None
    status["flow"] = {**_flow_card(flow), "parallelism": flow.parallelism}
    status["series_reset"] = not keep
    status["series"] = [] if run is None else metrics_series(run=run, since=since if keep else None)
    latest = [] if run is None else metrics_series(run=run, limit=1)
    status["latest_sample"] = latest[0] if latest else None
    if run is not None:
        split_rows_add_progress(run=run, rows=status["splits"])
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
    # The latest run's schema changes (format.on_schema_change), one per column and kind.
    status["schema_changes"] = [] if run is None else run_schema_changes(run)
    return status


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
            "records_read": max(run.records_read, _column(run, "split_records")),
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
