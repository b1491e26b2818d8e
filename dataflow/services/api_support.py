"""What the REST API reads besides ``dataflow.selectors``: the rows a user may see."""

from __future__ import annotations

from typing import Any

from django.db.models import OuterRef, QuerySet, Subquery

from dataflow.models import DataFlow, DeadLetter, FlowRun, RunStatus
from dataflow.selectors import flow_status, flows_visible


def flows_of(*, user) -> QuerySet[DataFlow]:
    """The flows ``user`` may see and steer (``selectors.flows_visible``: every flow for
    staff, their own otherwise), with their owners."""
    return flows_visible(user=user).select_related("owner")


def runs_of(*, user) -> QuerySet[FlowRun]:
    """The runs of the flows ``user`` may see."""
    return FlowRun.objects.filter(flow__in=flows_of(user=user)).select_related("flow")


def dead_letters_of(*, user) -> QuerySet[DeadLetter]:
    """The dead letters of the flows ``user`` may see."""
    return DeadLetter.objects.filter(flow__in=flows_of(user=user)).select_related("flow")


def flow_latest_run(*, flow: DataFlow) -> FlowRun | None:
    """The flow's newest run (None: it never ran)."""
    return flow.runs.order_by("-id").first()


def latest_runs_of(*, flows: list[DataFlow]) -> dict[int, FlowRun]:
    """The newest run of each of ``flows`` that has one, by flow id, in one query."""
    newest = FlowRun.objects.filter(flow=OuterRef("flow")).order_by("-id").values("id")[:1]
    runs = FlowRun.objects.filter(flow__in=flows, pk=Subquery(newest))
    return {run.flow_id: run for run in runs}


def flow_status_report(*, flow: DataFlow) -> dict[str, Any]:
    """``selectors.flow_status`` and ``last_error``: the latest run's message if it failed,
    else the error of the last listed split that has one (None: no error)."""
    report = flow_status(flow=flow)
    run = report["run"]
    last_error = None
    if run is not None and run["status"] == RunStatus.FAILED and run["message"]:
        last_error = run["message"]
    else:
        failed = [s for s in report["splits"] if s["error"]]
        last_error = failed[-1]["error"] if failed else None
    return {**report, "last_error": last_error}
