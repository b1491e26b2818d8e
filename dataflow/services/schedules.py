"""A bounded flow's runs on a timetable: ``[schedule]``, kept in django-celery-beat's tables.

The TOML shape (the REST API mirrors it as a ``"schedule": {...}`` object)::

    [schedule]                 # bounded flows only (not a stream, not files with watch = true)
    cron = "*/15 * * * *"      # five fields: minute hour day-of-month month day-of-week
    # or: every = "15 minutes" # a duration ("90 seconds", "2 hours", "1 day"), at least 10 seconds
    timezone = "Europe/Paris"  # with cron only; optional, default settings.TIME_ZONE

Exactly one of ``cron`` and ``every``. Beat sends ``dataflow.tasks.run_scheduled`` from the
PeriodicTask named ``dataflow-schedule:<flow name>``; a run it starts has trigger "schedule".
"""

from __future__ import annotations

import functools
import json
import logging
import zoneinfo
from typing import Any

from celery.schedules import crontab
from django.conf import settings
from django.core.exceptions import ValidationError
from django_celery_beat import validators
from django_celery_beat.models import CrontabSchedule, IntervalSchedule, PeriodicTask

from dataflow.models import DataFlow
from dataflow.services.queues import RUN_SCHEDULED
from source_support.config import check_fields
from source_support.durations import parse_duration_ms
from source_support.errors import ConfigError

log = logging.getLogger(__name__)

SCHEDULE_FIELDS: dict[str, type | tuple] = {"cron": str, "every": str, "timezone": str}
#: A run takes seconds to start (a Spark session alone takes ~8 s): a shorter interval
#: would only ever skip.
MIN_EVERY_SECONDS = 10
MAX_EVERY_SECONDS = 366 * 86_400
#: (what a user calls the field, the validator of django-celery-beat's column for it)
CRON_FIELDS = (
    ("minute", validators.minute_validator),
    ("hour", validators.hour_validator),
    ("day-of-month", validators.day_of_month_validator),
    ("month", validators.month_of_year_validator),
    ("day-of-week", validators.day_of_week_validator),
)
CRON_HELP = "five fields: minute hour day-of-month month day-of-week, e.g. '*/15 * * * *'"
#: The largest unit an interval is a whole number of, so the admin shows "every 15 minutes".
INTERVAL_PERIODS = (
    (86_400, IntervalSchedule.DAYS),
    (3_600, IntervalSchedule.HOURS),
    (60, IntervalSchedule.MINUTES),
    (1, IntervalSchedule.SECONDS),
)


def schedule_validate(table: dict[str, Any], *, unbounded: bool) -> dict[str, Any]:
    """The ``[schedule]`` table checked and normalized (``{}``: no schedule); ConfigError
    naming the field (``schedule.cron``, ``schedule.every``, ``schedule.timezone``, or
    ``schedule`` for the table as a whole) otherwise."""
    if not table:
        return {}
    check_fields("schedule", table, SCHEDULE_FIELDS)
    if unbounded:
        raise ConfigError(
            "schedule",
            "the source is unbounded (a stream, or files with watch = true): it runs until "
            "stopped; a schedule is for bounded flows",
        )
    if ("cron" in table) == ("every" in table):
        raise ConfigError(
            "schedule", f"give one of cron ({CRON_HELP}) or every (a duration such as '15 minutes')"
        )
    if "every" in table:
        if "timezone" in table:
            raise ConfigError("schedule.timezone", "applies to cron only: every counts from when it was set")
        every_seconds(table["every"])
        return {"every": table["every"].strip()}
    schedule = {"cron": " ".join(cron_fields(table["cron"]))}
    if "timezone" in table:
        schedule["timezone"] = _checked_timezone(table["timezone"])
    return schedule


def cron_fields(cron: str) -> list[str]:
    """The five fields of a cron expression, each checked as beat will read it."""
    fields = cron.split()
    if len(fields) != len(CRON_FIELDS):
        raise ConfigError("schedule.cron", f"{cron!r} has {len(fields)} field(s); give {CRON_HELP}")
    for value, (label, validator) in zip(fields, CRON_FIELDS, strict=True):
        try:
            validator(value)
        except ValidationError as exc:
            raise ConfigError(
                "schedule.cron", f"{label} {value!r} is invalid: {'; '.join(exc.messages)}"
            ) from None
    try:  # what beat itself parses (it refuses e.g. day-of-week 7)
        minute, hour, day_of_month, month, day_of_week = fields
        crontab(minute, hour, day_of_week=day_of_week, day_of_month=day_of_month, month_of_year=month)
    except ValueError as exc:
        raise ConfigError("schedule.cron", f"{cron!r} is invalid: {exc}") from None
    return fields


def every_seconds(every: str) -> int:
    """The seconds of ``every``, a whole number from MIN_EVERY_SECONDS to a year."""
    try:
        ms = parse_duration_ms(every)
    except ValueError as exc:
        raise ConfigError("schedule.every", str(exc)) from None
    if ms % 1000:
        raise ConfigError("schedule.every", f"{every!r} is not a whole number of seconds")
    if not MIN_EVERY_SECONDS <= ms // 1000 <= MAX_EVERY_SECONDS:
        raise ConfigError(
            "schedule.every", f"{every!r} must be at least {MIN_EVERY_SECONDS} seconds and at most 366 days"
        )
    return ms // 1000


@functools.cache
def _known_timezones() -> frozenset[str]:
    return frozenset(zoneinfo.available_timezones())


def _checked_timezone(name: str) -> str:
    if name.strip() not in _known_timezones():
        raise ConfigError(
            "schedule.timezone", f"{name!r} is not a known time zone (such as 'UTC' or 'Europe/Paris')"
        )
    return name.strip()


def schedule_task_name(flow: DataFlow) -> str:
    return f"dataflow-schedule:{flow.name}"


def schedule_sync(*, flow: DataFlow) -> PeriodicTask | None:
    """Makes beat's entry for the flow match ``flow.schedule``: creates or updates the
    PeriodicTask ``dataflow-schedule:<name>`` (enabled, not one-off), or removes it when
    the flow has no schedule. Returns the entry, if any."""
    if not flow.schedule:
        schedule_remove(flow=flow)
        return None
    name = schedule_task_name(flow)
    args = json.dumps([flow.pk])
    # An entry of this flow under another name (the flow was renamed) would run it twice.
    PeriodicTask.objects.filter(task=RUN_SCHEDULED, args=args).exclude(name=name).delete()
    crontab_row, interval_row = _beat_schedule(flow.schedule)
    entry, _ = PeriodicTask.objects.update_or_create(
        name=name,
        defaults={
            "task": RUN_SCHEDULED,
            "args": args,
            "crontab": crontab_row,
            "interval": interval_row,
            "one_off": False,
            "enabled": True,
            "description": f"scheduled runs of flow {flow.name} ([schedule] {json.dumps(flow.schedule)})",
        },
    )
    return entry


def schedule_remove(*, flow: DataFlow) -> None:
    """Removes the flow's entry from beat's schedule (by name, and by the flow's id, so an
    entry left under an older name goes too)."""
    PeriodicTask.objects.filter(name=schedule_task_name(flow)).delete()
    PeriodicTask.objects.filter(task=RUN_SCHEDULED, args=json.dumps([flow.pk])).delete()


def _beat_schedule(schedule: dict[str, Any]) -> tuple[CrontabSchedule | None, IntervalSchedule | None]:
    """The django-celery-beat row of a validated schedule (shared by flows that agree)."""
    if "cron" in schedule:
        minute, hour, day_of_month, month, day_of_week = cron_fields(schedule["cron"])
        row, _ = CrontabSchedule.objects.get_or_create(
            minute=minute,
            hour=hour,
            day_of_month=day_of_month,
            month_of_year=month,
            day_of_week=day_of_week,
            timezone=schedule.get("timezone") or settings.TIME_ZONE,
        )
        return row, None
    seconds = every_seconds(schedule["every"])
    unit, period = next((u, p) for u, p in INTERVAL_PERIODS if seconds % u == 0)
    row, _ = IntervalSchedule.objects.get_or_create(every=seconds // unit, period=period)
    return None, row


def schedule_remove_orphan(*, flow_id: int) -> None:
    """Removes the schedule entry of a flow that no longer exists: it would otherwise
    start nothing, forever."""
    PeriodicTask.objects.filter(task=RUN_SCHEDULED, args=json.dumps([flow_id])).delete()
