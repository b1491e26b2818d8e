"""[schedule]: validated with the flow, kept in beat's schedule, and starting runs that never overlap."""

from __future__ import annotations

import copy
import json

import pytest
from django_celery_beat.models import PeriodicTask
from django_celery_beat.schedulers import DatabaseScheduler

from dataflow.celery import app as celery_app
from dataflow.models import FlowRun, RunStatus
from dataflow.services.flows import flow_apply, flow_delete, flow_run_scheduled, flow_start
from dataflow.services.specs import flow_spec_of
from source_support.errors import ConfigError
from tests.helpers import logs_of, spec, write_csv


@pytest.fixture()
def nightly(dirs) -> dict:
    """A bounded flow's spec that runs at 02:30 Paris time."""
    write_csv(dirs.data / "a.csv", range(10))
    doc = spec("nightly", str(dirs.data / "*.csv"), str(dirs.out / "sink"))
    doc["schedule"] = {"cron": "30 2 * * *", "timezone": "Europe/Paris"}
    return doc


@pytest.fixture()
def schedule_log(caplog):
    """What the schedules service logs."""
    with logs_of(caplog, "dataflow.services.schedules"):
        yield caplog


def _with_schedule(doc: dict, schedule: dict | None) -> dict:
    doc = copy.deepcopy(doc)
    if schedule is None:
        doc.pop("schedule", None)
    else:
        doc["schedule"] = schedule
    return doc


def _entry() -> PeriodicTask | None:
    return (
        PeriodicTask.objects.select_related("crontab", "interval")
        .filter(name="dataflow-schedule:nightly")
        .first()
    )


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("schedule", "field", "reason"),
    [
        ({"cron": "61 * * * *"}, "schedule.cron", "minute '61' is invalid"),
        ({"cron": "0 6 * *"}, "schedule.cron", "has 4 field(s); give five fields"),
        ({"cron": "0 6 * * 7"}, "schedule.cron", "is invalid"),
        ({"cron": "@daily"}, "schedule.cron", "has 1 field(s)"),
        ({"cron": 15}, "schedule.cron", "must be a string"),
        ({"cron": "*/15 * * * *", "every": "15 minutes"}, "schedule", "give one of cron"),
        ({"timezone": "UTC"}, "schedule", "give one of cron"),
        ({"every": "5 seconds"}, "schedule.every", "at least 10 seconds"),
        ({"every": "10500 ms"}, "schedule.every", "not a whole number of seconds"),
        ({"every": "often"}, "schedule.every", "is not a duration"),
        (
            {"cron": "0 6 * * *", "timezone": "Mars/Olympus_Mons"},
            "schedule.timezone",
            "not a known time zone",
        ),
        ({"every": "1 hour", "timezone": "UTC"}, "schedule.timezone", "applies to cron only"),
        ({"at": "6am"}, "schedule.at", "is not a field of schedule"),
    ],
)
def test_a_bad_schedule_is_refused_naming_the_field(nightly, schedule, field, reason):
    with pytest.raises(ConfigError) as refused:
        flow_apply(spec=_with_schedule(nightly, schedule))

    assert refused.value.field == field
    assert reason in refused.value.reason
    assert _entry() is None


def test_a_schedule_on_a_stream_is_refused(dirs):
    stream = {
        "flow": {"name": "orders"},
        "source": {"type": "redis_streams", "streams": "orders:*"},
        "format": {"type": "fields", "schema": "id BIGINT"},
        "transform": {"sql": "SELECT * FROM source"},
        "sink": {"type": "parquet", "path": str(dirs.out / "orders")},
        "schedule": {"every": "1 hour"},
    }

    with pytest.raises(ConfigError) as refused:
        flow_apply(spec=stream)

    assert refused.value.field == "schedule"
    assert "the source is unbounded" in refused.value.reason


@pytest.mark.django_db
def test_a_cron_schedule_becomes_a_beat_entry_and_reads_back_as_written(nightly):
    flow, _ = flow_apply(spec=nightly)

    entry = _entry()
    assert (entry.task, json.loads(entry.args), entry.enabled, entry.one_off) == (
        "dataflow.tasks.run_scheduled",
        [flow.pk],
        True,
        False,
    )
    assert entry.interval is None
    cron = entry.crontab
    assert (cron.minute, cron.hour, cron.day_of_month, cron.month_of_year, cron.day_of_week) == (
        "30",
        "2",
        "*",
        "*",
        "*",
    )
    assert str(cron.timezone) == "Europe/Paris"
    assert flow_spec_of(flow)["schedule"] == {"cron": "30 2 * * *", "timezone": "Europe/Paris"}


@pytest.mark.django_db
@pytest.mark.slow
def test_beat_reads_the_entry_and_its_task_starts_a_scheduled_run(nightly):
    flow, _ = flow_apply(spec=_with_schedule(nightly, {"every": "15 minutes"}))

    beat = DatabaseScheduler(app=celery_app, lazy=True)
    entry = beat.all_as_schedule()["dataflow-schedule:nightly"]
    celery_app.loader.import_default_modules()  # as a worker does: registers dataflow.tasks
    celery_app.tasks[entry.task].apply(args=entry.args)

    assert entry.schedule.run_every.total_seconds() == 900
    run = FlowRun.objects.get(flow=flow)
    assert (run.trigger, run.status) == ("schedule", RunStatus.READING)


@pytest.mark.django_db
def test_changing_or_removing_the_schedule_updates_or_removes_the_entry(nightly):
    flow, _ = flow_apply(spec=nightly)

    flow_apply(spec=_with_schedule(nightly, {"every": "2 hours"}))
    entry = _entry()
    assert entry.crontab is None
    assert (entry.interval.every, entry.interval.period) == (2, "hours")
    assert PeriodicTask.objects.filter(task="dataflow.tasks.run_scheduled").count() == 1

    flow_apply(spec=_with_schedule(nightly, None))
    assert _entry() is None
    flow.refresh_from_db()
    assert flow.schedule == {}
    assert "schedule" not in flow_spec_of(flow)


@pytest.mark.django_db
def test_deleting_the_flow_removes_its_schedule(nightly, dirs):
    flow, _ = flow_apply(spec=nightly)
    weekly = _with_schedule(nightly, {"every": "7 days"})
    weekly["flow"]["name"], weekly["sink"]["path"] = "weekly", str(dirs.out / "weekly")
    flow_apply(spec=weekly)

    flow_delete(flow=flow)

    assert _entry() is None
    assert PeriodicTask.objects.filter(name="dataflow-schedule:weekly", enabled=True).exists()


@pytest.mark.django_db
def test_a_scheduled_run_is_skipped_while_the_last_one_is_still_running(nightly, schedule_log):
    flow, _ = flow_apply(spec=nightly)
    manual = flow_start(flow=flow)

    skipped = flow_run_scheduled(flow_id=flow.pk)

    assert skipped is None
    assert list(FlowRun.objects.filter(flow=flow)) == [manual]
    assert "flow nightly: scheduled run skipped: still running" in schedule_log.text


@pytest.mark.django_db
def test_a_scheduled_run_starts_once_the_last_one_has_ended(nightly):
    from dataflow.services.runs.finish import run_finish

    flow, _ = flow_apply(spec=nightly)
    first = flow_run_scheduled(flow_id=flow.pk)
    run_finish(run=first, status=RunStatus.SUCCEEDED)

    second = flow_run_scheduled(flow_id=flow.pk)

    assert second is not None and second.pk != first.pk
    assert second.trigger == "schedule"
    assert FlowRun.objects.filter(flow=flow, status=RunStatus.READING).get() == second


@pytest.mark.django_db
def test_the_entry_of_a_flow_deleted_some_other_way_removes_itself(nightly):
    flow, _ = flow_apply(spec=nightly)
    flow_id = flow.pk
    flow.delete()  # e.g. a raw delete in a shell: flow_delete did not run

    assert flow_run_scheduled(flow_id=flow_id) is None
    assert _entry() is None
    assert not FlowRun.objects.exists()
