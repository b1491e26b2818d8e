"""Per-user quotas, refused through the API with a 4xx naming the quota (the same services
the admin, TOML files and commands call)."""

from __future__ import annotations

import pytest

from dataflow.models import FlowRun, RunStatus, Split, SplitStatus, UserQuota
from dataflow.services.dead_letters import dead_letters_replay
from dataflow.services.errors import QuotaExceeded
from dataflow.services.flows import flow_run_scheduled, flow_start, flow_stop
from dataflow.services.runs.tick import run_tick
from tests.dataflow.api.test_actions import act
from tests.factories import DataFlowFactory, UserFactory
from tests.helpers import write_csv

pytestmark = pytest.mark.django_db


@pytest.fixture()
def quotas(settings):
    def set_quotas(**given):
        settings.DATAFLOW_USER_QUOTAS = {**settings.DATAFLOW_USER_QUOTAS, **given}

    return set_quotas


def test_a_flow_beyond_the_users_flows_quota_is_refused_naming_it(api, owner, body, make_flow, quotas):
    quotas(flows=2)
    make_flow("first")
    make_flow("second")

    refused = api.post("/api/flows/", body, format="json")
    UserQuota.objects.create(user=owner, flows=3)  # an operator raises it for this user
    allowed = api.post("/api/flows/", body, format="json")

    assert refused.status_code == 403, refused.content
    assert refused.json()["quota"] == "flows"
    assert "quota 'flows'" in refused.json()["detail"] and "at most 2" in refused.json()["detail"]
    assert allowed.status_code == 201, allowed.content


@pytest.mark.slow
def test_schedules_beyond_the_quota_or_too_often_are_refused(api, body, make_flow, quotas):
    quotas(schedules=1, min_schedule_seconds=600)
    make_flow("nightly", schedule={"every": "1 hour"})

    too_many = api.post("/api/flows/", {**body, "schedule": {"every": "1 hour"}}, format="json")
    too_often = api.post("/api/flows/", {**body, "schedule": {"every": "5 minutes"}}, format="json")
    unscheduled = api.post("/api/flows/", body, format="json")

    assert too_many.status_code == 403 and too_many.json()["quota"] == "schedules", too_many.content
    assert too_often.status_code == 400
    assert "min_schedule_seconds" in str(too_often.json()["schedule.every"])
    assert unscheduled.status_code == 201, unscheduled.content


@pytest.mark.slow
def test_a_run_beyond_the_concurrent_runs_quota_is_refused(api, make_flow, quotas):
    quotas(concurrent_runs=1)
    first, second = make_flow("first"), make_flow("second")

    started = act(api, first, "start")
    refused = act(api, second, "start")

    assert started.status_code == 202, started.content
    assert refused.status_code == 403 and refused.json()["quota"] == "concurrent_runs", refused.content


@pytest.mark.slow
def test_a_run_whose_discovery_passes_the_splits_quota_fails_naming_it(dirs, owner, quotas):
    quotas(splits=2)
    for i in range(3):
        write_csv(dirs.data / f"part-{i}.csv", range(10))
    flow = DataFlowFactory(name="many", owner=owner, source_path=str(dirs.data))

    run = flow_start(flow=flow)
    run_tick(run_id=run.pk)

    run.refresh_from_db()
    assert run.status == RunStatus.FAILED
    assert "quota 'splits'" in run.message, run.message


@pytest.mark.slow
def test_a_superuser_has_no_quota(dirs, make_flow, quotas):
    quotas(flows=0, concurrent_runs=0)
    root = UserFactory(username="root", is_staff=True, is_superuser=True)

    flow_start(flow=make_flow("roots", owner=root))


# Every path that makes a run active asks the quotas (issue 25, 2.3): a schedule, a resume,
# a restart of failed splits, a replay of dead letters, besides a start.


@pytest.mark.slow
def test_a_scheduled_run_beyond_the_quota_is_recorded_as_a_failed_run_naming_it(make_flow, quotas):
    quotas(concurrent_runs=1)
    flow_start(flow=make_flow("busy"))
    nightly = make_flow("nightly", schedule={"every": "1 hour"})

    run = flow_run_scheduled(flow_id=nightly.pk)

    assert run is not None, "a refusal is recorded, not skipped as 'still running'"
    assert (run.status, run.trigger) == (RunStatus.FAILED, "schedule")
    assert run.message.startswith("the run could not start: quota 'concurrent_runs' of user "), run.message
    assert "(at most 1;" in run.message
    nightly.refresh_from_db()
    assert nightly.status == "failed"


@pytest.mark.slow
def test_resuming_a_stopped_run_beyond_the_quota_is_refused_and_said_on_the_run(api, make_flow, quotas):
    quotas(concurrent_runs=1)
    first, second = make_flow("first"), make_flow("second")
    stopped = flow_start(flow=first)
    flow_stop(flow=first)
    flow_start(flow=second)

    refused = act(api, first, "resume")

    assert refused.status_code == 403 and refused.json()["quota"] == "concurrent_runs", refused.content
    stopped.refresh_from_db()
    assert stopped.status == RunStatus.STOPPED
    assert stopped.message.startswith("not resumed: quota 'concurrent_runs'"), stopped.message


def test_restarting_failed_splits_beyond_the_splits_quota_is_refused_and_said_on_the_run(
    api, dirs, owner, quotas
):
    write_csv(dirs.data / "part-0.csv", range(10))
    flow = DataFlowFactory(name="many", owner=owner, source_path=str(dirs.data))
    run = flow_start(flow=flow)
    flow_stop(flow=flow)
    for i in range(3):  # as a run whose three splits failed leaves them (payloads are not read)
        Split.objects.create(
            run=run, split_id=f"part-{i}", payload={}, status=SplitStatus.FAILED, error="boom"
        )
    FlowRun.objects.filter(pk=run.pk).update(status=RunStatus.FAILED)
    quotas(splits=2)  # the run holds 4

    refused = act(api, flow, "restart", only_failed="true")

    assert refused.status_code == 403 and refused.json()["quota"] == "splits", refused.content
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED
    assert run.message.startswith("failed splits not restarted: quota 'splits'"), run.message
    assert f"and run {run.pk} has 4" in run.message  # 3 failed, part-0 in its backlog
    assert Split.objects.filter(run=run, status=SplitStatus.FAILED).count() == 3, "left as they were"


def test_a_replay_of_dead_letters_beyond_the_quota_is_refused_naming_it(make_flow, quotas):
    quotas(concurrent_runs=1)
    flow_start(flow=make_flow("busy"))

    with pytest.raises(QuotaExceeded) as refused:
        dead_letters_replay(flow=make_flow("replayed"), ids=[1])

    assert refused.value.quota == "concurrent_runs"
