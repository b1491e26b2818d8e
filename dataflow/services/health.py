"""A flow's health: ``[flow] freshness`` (is its sink moving?) and ``[flow]
disable_after_failures`` (a scheduled flow that keeps failing stops being started).

Freshness: a flow's sink *moved* when its latest run succeeded (a bounded flow) or its
latest stream epoch was published (``TransformEpoch.committed_at``); a flow that never
moved counts from when it was created. Beat's ``flows_health_check`` (each minute) asks the
database, with the database's clock, which flows with a freshness went longer than it
without moving: each becomes stale (``DataFlow.stale_since``) and its webhook gets one
``flow.stale`` event; it is told again only after it was fresh in between (its sink moved,
or its freshness was lifted). Each check handles at most ``HEALTH_CHECK_BATCH`` changes.

Failures: when a run of a flow with a ``[schedule]`` and ``disable_after_failures = N``
fails and its N latest runs all failed, the schedule's beat entry is disabled, the flow
says why (``schedule_paused_message``) and its webhook gets a ``flow.paused`` event. A
save of the flow (admin, API, TOML) or a run that succeeds lifts the pause.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import timedelta

from django.db import transaction
from django.db.models import (
    DateTimeField,
    DurationField,
    ExpressionWrapper,
    F,
    IntegerField,
    OuterRef,
    Q,
    Subquery,
)
from django.db.models.functions import Coalesce, Greatest, Now
from django_celery_beat.models import PeriodicTask

from dataflow.models import DataFlow, EpochStatus, FlowRun, RunStatus, TransformEpoch
from dataflow.services.notify import flow_notify
from dataflow.services.schedules import schedule_task_name

log = logging.getLogger(__name__)

#: The most flows one check turns stale or fresh: a check's cost is bounded whatever the
#: number of flows; the next check (a minute later) goes on with the rest.
HEALTH_CHECK_BATCH = 500


@dataclass(frozen=True)
class HealthChanges:
    """What one check changed: the flows that became stale and those fresh again."""

    stale: list[str]
    fresh: list[str]


def _flows_with_due():
    """Flows with a freshness, each with ``due``: when it goes stale unless its sink moves."""
    last_success = (
        FlowRun.objects.filter(flow=OuterRef("pk"), status=RunStatus.SUCCEEDED, finished_at__isnull=False)
        .order_by("-finished_at")
        .values("finished_at")[:1]
    )
    last_epoch = (
        TransformEpoch.objects.filter(
            run__flow=OuterRef("pk"), status=EpochStatus.COMMITTED, committed_at__isnull=False
        )
        .order_by("-committed_at")
        .values("committed_at")[:1]
    )
    moved = Greatest(
        Coalesce(Subquery(last_success), F("created_at")),
        Coalesce(Subquery(last_epoch), F("created_at")),
        output_field=DateTimeField(),
    )
    # An IntegerField, not the model's PositiveIntegerField: SQLite (the embedded default)
    # multiplies a duration only by a field Django knows as a number.
    seconds = ExpressionWrapper(F("freshness_seconds"), output_field=IntegerField())
    window = ExpressionWrapper(seconds * timedelta(seconds=1), output_field=DurationField())
    return DataFlow.objects.filter(freshness_seconds__gt=0).annotate(
        due=ExpressionWrapper(moved + window, output_field=DateTimeField())
    )


def flows_health_check(*, batch: int = HEALTH_CHECK_BATCH) -> HealthChanges:
    """Marks stale the flows whose sink went longer than their freshness without moving
    (each one's webhook told once) and fresh again those whose sink moved since or whose
    freshness was lifted; a few queries, at most ``batch`` flows changed each way."""
    fresh_ids = list(
        DataFlow.objects.filter(stale_since__isnull=False, freshness_seconds=0).values_list("pk", flat=True)[
            :batch
        ]
    )
    fresh_ids += list(
        _flows_with_due()
        .filter(stale_since__isnull=False, due__gt=Now())
        .values_list("pk", flat=True)[: batch - len(fresh_ids)]
    )
    fresh = []
    if fresh_ids:
        fresh = list(DataFlow.objects.filter(pk__in=fresh_ids).values_list("name", flat=True))
        DataFlow.objects.filter(pk__in=fresh_ids).update(stale_since=None)
    stale = []
    due_ids = list(
        _flows_with_due()
        .filter(stale_since__isnull=True, due__lte=Now())
        .values_list("pk", flat=True)[:batch]
    )
    for flow_id in due_ids:
        with transaction.atomic():
            # Conditional: a check running at the same time marks it, and tells, only once.
            if DataFlow.objects.filter(pk=flow_id, stale_since__isnull=True).update(stale_since=Now()):
                flow_notify(flow_id=flow_id, event="flow.stale")
                stale.append(DataFlow.objects.values_list("name", flat=True).get(pk=flow_id))
    if stale:
        log.warning("flows stale (their sink has not moved for their freshness): %s", ", ".join(stale))
    return HealthChanges(stale=stale, fresh=fresh)


def run_failures_check(*, run: FlowRun, status: str) -> bool:
    """Inside ``run_finish``'s transaction, once ``run`` has ended with ``status``: a
    success lifts a pause of the flow's schedule; a failure that makes
    ``disable_after_failures`` runs failed in a row pauses it (beat's entry disabled, the
    message on the flow, the webhook told). Returns whether it paused the schedule."""
    flow = DataFlow.objects.only("pk", "name", "schedule", "disable_after_failures").get(pk=run.flow_id)
    if status == RunStatus.SUCCEEDED:
        DataFlow.objects.filter(pk=flow.pk).update(stale_since=None)  # its sink just moved
        if (
            DataFlow.objects.filter(pk=flow.pk)
            .exclude(schedule_paused_message="")
            .update(schedule_paused_message="")
        ):
            _schedule_entry_enable(flow, enabled=True)
        return False
    limit = flow.disable_after_failures
    if status != RunStatus.FAILED or not limit or not flow.schedule:
        return False
    latest = list(flow.runs.order_by("-id").values_list("status", flat=True)[:limit])
    if len(latest) < limit or any(s != RunStatus.FAILED for s in latest):
        return False
    message = (
        f"schedule paused: {limit} {'run' if limit == 1 else 'runs'} failed in a row (the latest: run {run.pk}); "
        "save the flow or run it successfully to resume the schedule"
    )
    paused = (
        DataFlow.objects.filter(pk=flow.pk, schedule_paused_message="")
        .filter(~Q(schedule={}))
        .update(schedule_paused_message=message)
    )
    if not paused:
        return False  # paused already
    _schedule_entry_enable(flow, enabled=False)
    flow_notify(flow_id=flow.pk, event="flow.paused")
    log.warning("flow %s: %s", flow.name, message)
    return True


def _schedule_entry_enable(flow: DataFlow, *, enabled: bool) -> None:
    # save(), not update(): its signal tells a running beat that its schedule changed.
    entry = PeriodicTask.objects.filter(name=schedule_task_name(flow)).first()
    if entry is not None and entry.enabled != enabled:
        entry.enabled = enabled
        entry.save(update_fields=["enabled"])
