"""[flow] freshness and disable_after_failures through the API: accepted, refused with a
field-named 400, shown on the flow, the list and the status."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from dataflow.models import DataFlow
from dataflow.services.health import flows_health_check

pytestmark = pytest.mark.django_db


def test_health_fields_are_accepted_and_shown(api, body):
    created = api.post(
        "/api/flows/",
        {**body, "freshness": "15 minutes", "disable_after_failures": 4, "schedule": {"every": "1 hour"}},
        format="json",
    )

    assert created.status_code == 201, created.json()
    got = api.get("/api/flows/orders/").json()
    assert (got["freshness"], got["disable_after_failures"]) == ("15 minutes", 4)
    assert (got["stale"], got["stale_since"], got["schedule_paused"]) == (False, None, "")
    assert DataFlow.objects.get(name="orders").freshness_seconds == 900


@pytest.mark.parametrize(
    ("fields", "field", "reason"),
    [
        ({"freshness": "whenever"}, "freshness", "is not a duration"),
        ({"disable_after_failures": 2}, "disable_after_failures", "has none"),
        ({"disable_after_failures": 5000}, "disable_after_failures", "1000"),
    ],
)
def test_a_bad_health_field_is_a_400_naming_it(api, body, fields, field, reason):
    response = api.post("/api/flows/", {**body, **fields}, format="json")

    assert response.status_code == 400, response.json()
    assert reason in " ".join(response.json()[field])
    assert not DataFlow.objects.filter(name="orders").exists()


def test_a_stale_flow_is_stale_in_detail_list_and_status(api, body):
    assert api.post("/api/flows/", {**body, "freshness": "15 minutes"}, format="json").status_code == 201
    DataFlow.objects.filter(name="orders").update(created_at=timezone.now() - timedelta(hours=1))
    flows_health_check()

    detail = api.get("/api/flows/orders/").json()
    listed = api.get("/api/flows/").json()["results"][0]
    status = api.get("/api/flows/orders/status/").json()

    assert detail["stale"] and listed["stale"] and status["stale"]
    assert detail["stale_since"] == status["stale_since"] is not None


def test_a_stale_flow_read_back_and_put_keeps_its_fields(api, body):
    api.post("/api/flows/", {**body, "freshness": "1 hour"}, format="json")
    got = api.get("/api/flows/orders/").json()

    replaced = api.put("/api/flows/orders/", got, format="json")

    assert replaced.status_code == 200, replaced.json()
    assert replaced.json()["freshness"] == "1 hour"
