"""[flow] freshness and disable_after_failures: stale flows told once, failing scheduled
flows paused; against real PostgreSQL, a real Celery worker and a real webhook receiver."""

from __future__ import annotations

import tomllib
from datetime import timedelta

import pytest
from django.utils import timezone
from django_celery_beat.models import PeriodicTask

from dataflow.models import DataFlow, DeliveryStatus, EpochStatus, RunStatus, TransformEpoch, WebhookDelivery
from dataflow.monitoring import FlowCollector
from dataflow.services.flows import flow_apply
from dataflow.services.health import flows_health_check
from dataflow.services.runs.finish import run_finish
from dataflow.services.schedules import schedule_task_name
from dataflow.services.specs import flow_spec_of, flow_spec_validate
from dataflow.services.toml_export import flow_toml
from source_support.errors import ConfigError
from tests.dataflow.services.test_notify import quick_retries, receiver  # noqa: F401 - fixtures
from tests.factories import DataFlowFactory, FlowRunFactory
from tests.helpers import wait_until


def _backdate(flow: DataFlow, *, hours: float) -> None:
    """The flow (and its runs' ends) as if made ``hours`` ago: no waiting in the test."""
    then = timezone.now() - timedelta(hours=hours)
    DataFlow.objects.filter(pk=flow.pk).update(created_at=then)
    flow.runs.update(started_at=then, finished_at=then)


def _stale_events(flow: DataFlow) -> list[WebhookDelivery]:
    return list(WebhookDelivery.objects.filter(flow=flow, event="flow.stale"))


def _delivered(flow: DataFlow, event: str, count: int) -> None:
    def over() -> bool:
        done = WebhookDelivery.objects.filter(flow=flow, event=event).exclude(status=DeliveryStatus.PENDING)
        return done.count() >= count

    wait_until(over, 30, lambda: f"deliveries: {list(WebhookDelivery.objects.values())}")


def test_a_bounded_flow_past_its_freshness_is_stale_and_told_once(worker, receiver, quick_retries):  # noqa: F811
    flow = DataFlowFactory(freshness="15 minutes", notify={"webhook": receiver.url})
    FlowRunFactory(flow=flow, status=RunStatus.SUCCEEDED)
    _backdate(flow, hours=1)

    first = flows_health_check()
    second = flows_health_check()

    assert (first.stale, second.stale) == ([flow.name], [])
    flow.refresh_from_db()
    assert flow.stale_since is not None
    _delivered(flow, "flow.stale", 1)
    assert [c.body["event"] for c in receiver.calls] == ["flow.stale"]
    call = receiver.calls[0]
    assert call.headers["X-Dataflow-Event"] == "flow.stale"
    assert (call.body["flow"], call.body["status"], call.body["freshness"]) == (
        flow.name,
        "stale",
        "15 minutes",
    )


def test_a_flow_fresh_in_between_is_told_again_when_it_goes_stale_again(worker, receiver, quick_retries):  # noqa: F811
    flow = DataFlowFactory(freshness="15 minutes", notify={"webhook": receiver.url})
    FlowRunFactory(flow=flow, status=RunStatus.SUCCEEDED)
    _backdate(flow, hours=1)
    assert flows_health_check().stale == [flow.name]

    run = FlowRunFactory(flow=flow, running=True)
    run_finish(run=run, status=RunStatus.SUCCEEDED, rows_written=10)  # the sink moved
    flow.refresh_from_db()
    assert flow.stale_since is None
    assert flows_health_check().stale == []
    _backdate(flow, hours=1)
    assert flows_health_check().stale == [flow.name]

    _delivered(flow, "flow.stale", 2)
    assert len(_stale_events(flow)) == 2
    assert [c.body["event"] for c in receiver.calls].count("flow.stale") == 2


@pytest.mark.django_db
def test_a_flow_within_its_freshness_or_without_one_is_not_stale():
    recent = DataFlowFactory(freshness="15 minutes")
    FlowRunFactory(flow=recent, status=RunStatus.SUCCEEDED)  # ended just now
    without = DataFlowFactory()
    _backdate(without, hours=100)

    assert flows_health_check().stale == []
    assert not DataFlow.objects.filter(stale_since__isnull=False).exists()


@pytest.mark.django_db
def test_a_failed_run_does_not_move_the_sink():
    flow = DataFlowFactory(freshness="15 minutes")
    FlowRunFactory(flow=flow, status=RunStatus.SUCCEEDED)
    _backdate(flow, hours=1)
    FlowRunFactory(flow=flow, failed=True)  # ended just now, but wrote nothing

    assert flows_health_check().stale == [flow.name]


@pytest.mark.django_db
def test_a_stream_is_fresh_while_its_epochs_are_published_and_stale_once_they_stop():
    flow = DataFlowFactory(freshness="15 minutes")
    run = FlowRunFactory(flow=flow, running=True)
    _backdate(flow, hours=1)
    run.refresh_from_db()
    epoch = TransformEpoch.objects.create(
        run=run, number=1, status=EpochStatus.COMMITTED, committed_at=timezone.now()
    )
    assert flows_health_check().stale == []

    TransformEpoch.objects.filter(pk=epoch.pk).update(committed_at=timezone.now() - timedelta(hours=1))
    assert flows_health_check().stale == [flow.name]


@pytest.mark.django_db
def test_lifting_the_freshness_makes_a_stale_flow_fresh():
    flow = DataFlowFactory(freshness="15 minutes")
    _backdate(flow, hours=1)
    assert flows_health_check().stale == [flow.name]
    spec = flow_spec_of(flow)
    spec["flow"].pop("freshness")
    flow_apply(spec=spec)

    assert flows_health_check().fresh == [flow.name]
    flow.refresh_from_db()
    assert flow.stale_since is None


@pytest.mark.django_db
def test_the_stale_gauge_is_reported_for_flows_with_a_freshness():
    stale = DataFlowFactory(name="late", freshness="15 minutes")
    _backdate(stale, hours=1)
    DataFlowFactory(name="on-time", freshness="2 hours")
    DataFlowFactory(name="unwatched")
    flows_health_check()

    families = {family.name: family for family in FlowCollector().collect()}
    gauge = {s.labels["flow"]: s.value for s in families["dataflow_flow_stale"].samples}

    assert gauge == {"late": 1, "on-time": 0}


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("fields", "field", "reason"),
    [
        ({"freshness": "soon"}, "flow.freshness", "is not a duration"),
        ({"freshness": "10 seconds"}, "flow.freshness", "at least 60 seconds"),
        ({"freshness": 15}, "flow.freshness", "must be"),
        ({"disable_after_failures": -1}, "flow.disable_after_failures", "between 0 and 1000"),
        ({"disable_after_failures": 3}, "flow.disable_after_failures", "has none"),
    ],
)
def test_bad_health_fields_are_refused_naming_the_field(dirs, fields, field, reason):
    flow = DataFlowFactory()
    doc = flow_spec_of(flow)
    doc["flow"].update(fields)

    with pytest.raises(ConfigError) as refused:
        flow_spec_validate(doc)

    assert refused.value.field == field
    assert reason in str(refused.value)


@pytest.mark.django_db
def test_health_fields_round_trip_through_toml():
    flow = DataFlowFactory(freshness="15 minutes", disable_after_failures=5, schedule={"every": "1 hour"})

    doc = tomllib.loads(flow_toml(flow=flow, reveal_secrets=True))

    assert (doc["flow"]["freshness"], doc["flow"]["disable_after_failures"]) == ("15 minutes", 5)
    values = flow_spec_validate(doc)
    assert (values["freshness_seconds"], values["disable_after_failures"]) == (900, 5)
    plain = DataFlowFactory()
    assert "freshness" not in tomllib.loads(flow_toml(flow=plain))["flow"]


# disable_after_failures


def _entry(flow: DataFlow) -> PeriodicTask:
    return PeriodicTask.objects.get(name=schedule_task_name(flow))


def _fail_runs(flow: DataFlow, count: int) -> None:
    for _ in range(count):
        run = FlowRunFactory(flow=flow, running=True)
        run_finish(run=run, status=RunStatus.FAILED, message="split failed: bad record")


def test_a_scheduled_flow_is_paused_after_n_failures_in_a_row_and_told(worker, receiver, quick_retries):  # noqa: F811
    flow = DataFlowFactory(
        schedule={"every": "1 hour"},
        disable_after_failures=3,
        notify={"webhook": receiver.url, "on": ["stopped"]},
    )

    _fail_runs(flow, 2)
    assert _entry(flow).enabled
    _fail_runs(flow, 1)

    flow.refresh_from_db()
    assert not _entry(flow).enabled
    assert flow.schedule_paused_message.startswith("schedule paused: 3 runs failed in a row")
    _delivered(flow, "flow.paused", 1)
    assert [c.body["event"] for c in receiver.calls] == ["flow.paused"]
    assert receiver.calls[0].body["message"] == flow.schedule_paused_message
    _fail_runs(flow, 1)  # paused already: told once
    assert WebhookDelivery.objects.filter(flow=flow, event="flow.paused").count() == 1


@pytest.mark.django_db
def test_a_success_resets_the_count_of_failures():
    flow = DataFlowFactory(schedule={"every": "1 hour"}, disable_after_failures=3)
    _fail_runs(flow, 2)
    run = FlowRunFactory(flow=flow, running=True)
    run_finish(run=run, status=RunStatus.SUCCEEDED, rows_written=1)
    _fail_runs(flow, 2)

    flow.refresh_from_db()
    assert _entry(flow).enabled and flow.schedule_paused_message == ""
    _fail_runs(flow, 1)
    assert not _entry(flow).enabled


@pytest.mark.django_db
def test_a_paused_schedule_goes_on_when_the_flow_is_saved_or_a_run_succeeds():
    flow = DataFlowFactory(schedule={"every": "1 hour"}, disable_after_failures=1)
    _fail_runs(flow, 1)
    assert not _entry(flow).enabled

    flow_apply(spec=flow_spec_of(flow))
    flow.refresh_from_db()
    assert _entry(flow).enabled and flow.schedule_paused_message == ""

    _fail_runs(flow, 1)
    assert not _entry(flow).enabled
    run = FlowRunFactory(flow=flow, running=True)
    run_finish(run=run, status=RunStatus.SUCCEEDED, rows_written=1)
    assert _entry(flow).enabled
