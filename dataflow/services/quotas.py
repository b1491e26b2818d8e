"""Per-user quotas: how many flows a user may own, how many of them may have a schedule and
how often it may fire, how many runs may be active at once, and how many splits their
active runs may hold. Defaults in ``DATAFLOW_USER_QUOTAS``, a user's ``UserQuota`` row
overrides any of them; superusers and the operator's flows (no owner) have none.

Every way in calls these from the same services (``flows.flow_apply``; every path that
makes a run active, through ``quota_check_run_start``: ``flows.flow_start`` (a start, a
restart, a restore, a scheduled run), ``flows.flow_resume`` of a stopped run,
``flows.flow_restart`` of a run's failed splits, ``dead_letters`` replays; and the tick):
the API answers a refusal 403 naming the quota, the admin, TOML files and commands show the
same message; a refused resume or restart also says so on the run, and a refused scheduled
run is recorded as a failed run of trigger "schedule".
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db.models import Count, Q

from dataflow.models import ACTIVE_RUN_STATUSES, DataFlow, FlowRun, PendingSplit, Split, UserQuota
from dataflow.services.errors import QuotaExceeded
from dataflow.services.schedules import every_seconds
from source_support.errors import ConfigError

QUOTAS = ("flows", "schedules", "min_schedule_seconds", "concurrent_runs", "splits")


def user_quotas(*, user) -> dict[str, int] | None:
    """The quotas that hold for ``user`` (None: none hold, a superuser or no user)."""
    if user is None or user.is_superuser:
        return None
    quotas = {name: int(settings.DATAFLOW_USER_QUOTAS[name]) for name in QUOTAS}
    own = UserQuota.objects.filter(user=user).values(*QUOTAS).first() or {}
    return quotas | {name: value for name, value in own.items() if value is not None}


def _refuse(quota: str, user, limit: int, what: str) -> QuotaExceeded:
    return QuotaExceeded(
        quota,
        f"quota {quota!r} of user {user.get_username()!r} reached: {what} (at most {limit}; "
        "an operator raises it in the user's quotas)",
    )


def quota_check_flow_apply(*, owner, flow: DataFlow | None, schedule: dict[str, Any]) -> None:
    """Refuses a flow that ``owner`` would create beyond their ``flows`` quota, a schedule
    beyond their ``schedules`` quota, or one firing more often than ``min_schedule_seconds``
    (ConfigError naming ``schedule.every``). ``flow``: the flow as stored (None: new)."""
    quotas = user_quotas(user=owner)
    if quotas is None:
        return
    if "every" in schedule and every_seconds(schedule["every"]) < quotas["min_schedule_seconds"]:
        raise ConfigError(
            "schedule.every",
            f"must be at least {quotas['min_schedule_seconds']} seconds (quota 'min_schedule_seconds')",
        )
    others = DataFlow.objects.filter(owner=owner).exclude(pk=flow.pk if flow else None)
    counts = others.aggregate(flows=Count("id"), schedules=Count("id", filter=~Q(schedule={})))
    if flow is None and counts["flows"] >= quotas["flows"]:
        raise _refuse("flows", owner, quotas["flows"], f"{counts['flows']} flows")
    if schedule and not (flow and flow.schedule) and counts["schedules"] >= quotas["schedules"]:
        raise _refuse("schedules", owner, quotas["schedules"], f"{counts['schedules']} flows with a schedule")


def quota_check_run_start(*, owner, run: FlowRun | None = None) -> None:
    """Refuses a run of ``owner``'s flow that would become active beyond their
    ``concurrent_runs`` quota, or while their active runs hold their ``splits`` quota
    already. ``run``: a run of theirs that is not active and becomes active again (a
    resume, a restart of failed splits): its splits count as held too. Nothing is refused
    for a run that is active already (nothing new starts)."""
    quotas = user_quotas(user=owner)
    if quotas is None or (run is not None and run.status in ACTIVE_RUN_STATUSES):
        return
    active = FlowRun.objects.filter(flow__owner=owner, status__in=ACTIVE_RUN_STATUSES).count()
    if active >= quotas["concurrent_runs"]:
        raise _refuse("concurrent_runs", owner, quotas["concurrent_runs"], f"{active} runs active")
    held = owner_splits(owner=owner)
    added = 0 if run is None else run.splits.count() + PendingSplit.objects.filter(run=run).count()
    if held + max(added, 1) > quotas["splits"]:
        what = f"their active runs hold {held} splits" + (f" and run {run.pk} has {added}" if run else "")
        raise _refuse("splits", owner, quotas["splits"], what)


def owner_splits(*, owner) -> int:
    """Splits (assigned or waiting in a backlog) of ``owner``'s active runs."""
    runs = FlowRun.objects.filter(flow__owner=owner, status__in=ACTIVE_RUN_STATUSES)
    return Split.objects.filter(run__in=runs).count() + PendingSplit.objects.filter(run__in=runs).count()


def quota_splits_exceeded(*, run: FlowRun) -> str | None:
    """Why ``run`` must fail because its owner's active runs hold more splits than their
    ``splits`` quota (discovery found more as it ran); None while within it."""
    owner = run.flow.owner
    quotas = user_quotas(user=owner)
    if quotas is None:
        return None
    held = owner_splits(owner=owner)
    if held <= quotas["splits"]:
        return None
    return str(_refuse("splits", owner, quotas["splits"], f"their active runs hold {held} splits"))
