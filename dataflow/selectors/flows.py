"""Reads of flows: lists with each flow's latest run, a flow's runs, where a flow is (its
status with its latest run and splits), and which steering actions fit its state."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db.models import Count, OuterRef, QuerySet, Subquery
from django.utils import timezone

from dataflow.models import DataFlow, DeadLetter, FlowRun, FlowStatus, RunStatus, Split, SplitStatus
from dataflow.selectors.runs import flow_latest_run, latest_runs_of, run_counter_live, run_progress
from dataflow.selectors.splits import split_rows
from dataflow.selectors.visibility import flows_visible
from dataflow.services.slots import cdc_flows, slots_report


def flow_list() -> list[tuple[DataFlow, FlowRun | None]]:
    """Every flow with its latest run."""
    flows = list(DataFlow.objects.all())
    runs = latest_runs_of(flows=flows)
    return [(flow, runs.get(flow.pk)) for flow in flows]


def flow_health_lines(*, flow: DataFlow) -> list[str]:
    """What ``[flow] freshness`` and ``disable_after_failures`` say of the flow, in words:
    nothing when it is fresh and its schedule goes on."""
    lines = []
    if flow.stale_since is not None:
        lines.append(
            f"stale: the sink has not moved for {flow.freshness} (stale since {flow.stale_since:%Y-%m-%d %H:%M:%S %Z})"
        )
    if flow.schedule_paused_message:
        lines.append(flow.schedule_paused_message)
    return lines


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
        last_run_records=run_counter_live(
            "records_read", status="last_run_status", run_ref="last_run_id", stored="last_run_stored_records"
        ),
        last_run_errors=run_counter_live(
            "errors_count", status="last_run_status", run_ref="last_run_id", stored="last_run_stored_errors"
        ),
    )


#: The most runs ``flow_runs`` lists by default (the newest).
RUNS_LISTED = 50


def flow_dead_letters(*, flow: DataFlow) -> QuerySet[DeadLetter]:
    """The flow's dead letters, oldest first: records that could not be read, and output rows
    an expectation dropped (``expectation`` names it)."""
    return flow.dead_letters.select_related("flow").order_by("id")


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


#: The splits a status lists per page by default, and the most a page may list: a stream
#: flow may have thousands of splits (a status that listed 1,000 of 10,000 took 77 s and
#: 157 KB); its counts by state cover them all.
STATUS_SPLITS_PAGE_SIZE = 100
STATUS_SPLITS_PAGE_MAX = 500


def flow_status(
    *, flow: DataFlow, splits_page: int = 1, splits_page_size: int = STATUS_SPLITS_PAGE_SIZE
) -> dict:
    """Where the flow is: its state, its latest run with live counters and its splits
    counted by state (in the database), and one page of its splits by id (``splits_page``,
    from 1, of at most ``STATUS_SPLITS_PAGE_MAX``), each with its state, reader, position
    (also in the source's words), records, lag and last error. Its cost does not grow with
    the number of splits."""
    splits_page_size = max(1, min(splits_page_size, STATUS_SPLITS_PAGE_MAX))
    splits_page = max(1, splits_page)
    run = flow_latest_run(flow=flow)
    out: dict = {
        "flow": flow.name,
        "status": flow.status,
        "stale": flow.stale_since is not None,
        "stale_since": flow.stale_since,
        "schedule_paused": flow.schedule_paused_message,
        "run": None,
        "splits": [],
        "splits_listed": 0,
        "splits_by_state": {},
        "splits_page": splits_page,
        "splits_pages": 0,
    }
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
        # one per expectation of the flow (at most MAX_EXPECTATIONS)
        "expectations": [{"name": name, **counts} for name, counts in (run.expectation_counts or {}).items()],
        "slot": flow_slot(flow=flow),
    }
    by_state = dict(run.splits.order_by().values_list("status").annotate(n=Count("id")))
    out["splits_by_state"] = by_state
    out["splits_pages"] = -(-sum(by_state.values()) // splits_page_size)
    out["splits"] = split_rows(run=run, limit=splits_page_size, offset=(splits_page - 1) * splits_page_size)
    out["splits_listed"] = len(out["splits"])
    return out


def flow_slot(*, flow: DataFlow) -> dict | None:
    """A postgres cdc flow's replication slot with its lag (``dataflow.services.slots``);
    None for other flows, and before a run made the slot."""
    found = slots_report(flows=[flow]).flows
    return found[0].as_dict() if found else None


def slots_visible(*, user: Any, operator: bool = False) -> dict[str, Any]:
    """The replication slots of the cdc flows ``user`` may see, with their lag; for staff
    (and the ``operator``: a management command), also the ``adf_`` slots left behind on
    those servers, which no flow owns. A ``ConfigError`` past
    ``DATAFLOW_POSTGRES_SLOT_SERVERS_MAX`` servers."""
    staff = operator or getattr(user, "is_staff", False)
    flows = cdc_flows() if operator else cdc_flows().filter(pk__in=flows_visible(user=user).values("pk"))
    return slots_report(flows=flows.select_related("owner").order_by("name"), left_behind=staff).as_dict()


def flow_status_report(
    *, flow: DataFlow, splits_page: int = 1, splits_page_size: int = STATUS_SPLITS_PAGE_SIZE
) -> dict[str, Any]:
    """``flow_status`` and ``last_error``: the latest run's message if it failed, else the
    error of the split that said one last, listed or not (None: no error)."""
    report = flow_status(flow=flow, splits_page=splits_page, splits_page_size=splits_page_size)
    run = report["run"]
    last_error = None
    if run is not None and run["status"] == RunStatus.FAILED and run["message"]:
        last_error = run["message"]
    elif run is not None:
        said = Split.objects.filter(run_id=run["id"]).exclude(error="").order_by("-updated_at", "-id")
        last_error = said.values_list("error", flat=True).first()
    return {**report, "last_error": last_error}


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
    latest = flow_latest_run(flow=flow)
    if latest is not None and latest.splits.filter(status=SplitStatus.FAILED).exists():
        names.append("restart_failed")
    return [ACTIONS[name] for name in names]
