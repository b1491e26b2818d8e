"""A flow's periodic enumerator tick in django-celery-beat's table: the one place that
writes it (a flow's ``[schedule]`` entry is ``schedules``'s)."""

from __future__ import annotations

import json

from django.conf import settings
from django_celery_beat.models import IntervalSchedule, PeriodicTask

from dataflow.models import DataFlow
from dataflow.services.queues import TICK_FLOW


def flow_ticks_set(*, flow: DataFlow, enabled: bool) -> None:
    """Switches the flow's periodic tick on (a run is active) or off (it ended)."""
    every, _ = IntervalSchedule.objects.get_or_create(
        every=settings.DATAFLOW_TICK_SECONDS, period=IntervalSchedule.SECONDS
    )
    PeriodicTask.objects.update_or_create(
        name=_tick_task_name(flow),
        defaults={"task": TICK_FLOW, "interval": every, "args": json.dumps([flow.pk]), "enabled": enabled},
    )


def flow_ticks_remove(*, flow: DataFlow) -> None:
    """Removes the flow's periodic tick (the flow is being deleted)."""
    PeriodicTask.objects.filter(name=_tick_task_name(flow)).delete()


def flow_ticks_remove_orphan(*, flow_id: int) -> None:
    """Removes the periodic tick of a flow that no longer exists (deleted without
    ``flow_delete``, e.g. by a cascade or a raw query): it would otherwise tick forever."""
    if not DataFlow.objects.filter(pk=flow_id).exists():
        PeriodicTask.objects.filter(task=TICK_FLOW, args=json.dumps([flow_id])).delete()


def _tick_task_name(flow: DataFlow) -> str:
    return f"dataflow-tick:{flow.name}"
