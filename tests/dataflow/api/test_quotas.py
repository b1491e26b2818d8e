"""Per-user quotas, refused through the API with a 4xx naming the quota (the same services
the admin, TOML files and commands call)."""

from __future__ import annotations

import pytest

from dataflow.models import RunStatus, UserQuota
from dataflow.services.flows import flow_start
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


def test_a_run_beyond_the_concurrent_runs_quota_is_refused(api, make_flow, quotas):
    quotas(concurrent_runs=1)
    first, second = make_flow("first"), make_flow("second")

    started = act(api, first, "start")
    refused = act(api, second, "start")

    assert started.status_code == 202, started.content
    assert refused.status_code == 403 and refused.json()["quota"] == "concurrent_runs", refused.content


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


def test_a_superuser_has_no_quota(dirs, make_flow, quotas):
    quotas(flows=0, concurrent_runs=0)
    root = UserFactory(username="root", is_staff=True, is_superuser=True)

    flow_start(flow=make_flow("roots", owner=root))
