"""What the REST API needs besides the flow services: creating a flow only if its name is
free, replacing or merging a stored spec with secrets sent back masked, and the rows a user
may see.

The API's body is the TOML spec flattened: the ``[flow]`` keys at the top level, each other
section an object. Its views turn it into the TOML shape and call these.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.db.models import OuterRef, QuerySet, Subquery

from dataflow.models import DataFlow, DeadLetter, FlowRun, RunStatus
from dataflow.selectors import flow_status, flows_visible
from dataflow.services.errors import FlowStateError
from dataflow.services.flows import flow_apply, flow_stop
from dataflow.services.notify import notify_unmasked
from dataflow.services.specs import flow_spec_of
from source_support.registry import unmask_section


class FlowExistsError(FlowStateError):
    """A flow of that name exists already (answered 409, as a state refusal)."""


def flow_create(*, spec: dict[str, Any], owner=None) -> DataFlow:
    """Creates the flow ``spec`` (TOML shape) describes, owned by ``owner``. Refuses with
    FlowExistsError if its name is taken (also by a flow created meanwhile: that insert
    makes ``flow_apply`` update instead, and the update is rolled back), and with
    ConfigError naming the field if the spec is not valid."""
    name = (spec.get("flow") or {}).get("name")
    if isinstance(name, str) and DataFlow.objects.filter(name=name).exists():
        raise FlowExistsError(f"a flow named {name!r} exists already")
    with transaction.atomic():
        flow, created = flow_apply(spec=spec, owner=owner)
        if not created:
            raise FlowExistsError(f"a flow named {name!r} exists already")
    return flow


def flow_replace(*, flow: DataFlow, spec: dict[str, Any]) -> DataFlow:
    """Replaces the flow's whole spec (a section or key left out takes its default or is
    removed). A secret sent back exactly as the API showed it keeps the stored secret.
    The flow keeps its name and owner; a running run keeps the settings it started with."""
    with transaction.atomic():
        flow = DataFlow.objects.select_for_update().get(pk=flow.pk)  # gone meanwhile: 404
        stored = flow_spec_of(flow)
        new = {
            section: _unmasked(section, table, stored.get(section))
            for section, table in spec.items()
            if section != "flow" and table is not None
        }
        new["flow"] = {**(spec.get("flow") or {}), "name": flow.name}
        flow, _ = flow_apply(spec=new, owner=flow.owner)
    return flow


def flow_merge(*, flow: DataFlow, changes: dict[str, Any]) -> DataFlow:
    """Merges ``changes`` (TOML shape, partial) into the flow's spec: a given ``[flow]`` key
    replaces the stored one (None: back to its default); a given section's keys are
    merged into the stored section (a key set to None is removed), unless it names another
    ``type``, which replaces the section; a section set to None is removed. Secrets sent
    back masked keep the stored ones."""
    with transaction.atomic():
        flow = DataFlow.objects.select_for_update().get(pk=flow.pk)
        spec = flow_spec_of(flow)
        flow_keys = {**spec["flow"], **(changes.get("flow") or {}), "name": flow.name}
        spec["flow"] = {k: v for k, v in flow_keys.items() if v is not None}
        for section, table in changes.items():
            if section == "flow":
                continue
            if table is None:
                spec.pop(section, None)
                continue
            stored = spec.get(section) or {}
            merged = (
                dict(table)
                if "type" in table and table["type"] != stored.get("type")
                else {**stored, **table}
            )
            spec[section] = _unmasked(section, {k: v for k, v in merged.items() if v is not None}, stored)
        flow, _ = flow_apply(spec=spec, owner=flow.owner)
    return flow


def _unmasked(section: str, table: Any, stored: dict[str, Any] | None) -> Any:
    if not isinstance(table, dict) or not stored:
        return table
    if section == "notify":
        return notify_unmasked(table, stored)
    return unmask_section(section, table, stored)


# Reads.


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


def flow_stop_active(*, flow: DataFlow) -> FlowRun:
    """Stops the flow's active run (``flow_stop``); refuses with FlowStateError if it has none."""
    run = flow_stop(flow=flow)
    if run is None:
        raise FlowStateError(f"flow {flow.name!r} has no active run to stop")
    return run
