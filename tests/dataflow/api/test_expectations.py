"""Expectations through every way in: the API's flow body (saved, refused with a 400 naming
the expectation, replaced by PATCH), the run detail's counts (owner only: bob gets a 404
for alice's run), ``/metrics``, the dashboard's table, ``flowctl status`` and the admin's
flow form. One real run (worker, Spark, PostgreSQL, Redis) gives the counts."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command
from django.test import Client

from dataflow.admin.forms import flow_form_class, flow_initial
from dataflow.models import DataFlow, RunStatus
from tests.dataflow.api.conftest import client_of
from tests.helpers import Beat, wait_for_run

EXPECT = [
    {"name": "low ids", "check": "id < 7", "on_fail": "drop"},
    {"name": "has sensor", "check": "sensor IS NOT NULL"},
]


@pytest.fixture()
def alice_api(alice):
    return client_of(alice)


@pytest.fixture()
def bob_api(bob):
    return client_of(bob)


@pytest.mark.django_db
def test_expectations_are_saved_from_the_body_and_shown(alice_api, body):
    created = alice_api.post("/api/flows/", {**body, "expect": EXPECT}, format="json")

    assert created.status_code == 201, created.json()
    assert created.json()["expect"] == [
        {"name": "low ids", "check": "id < 7", "on_fail": "drop"},
        {"name": "has sensor", "check": "sensor IS NOT NULL", "on_fail": "warn"},
    ]
    patched = alice_api.patch("/api/flows/orders/", {"expect": [EXPECT[1]]}, format="json")
    assert patched.status_code == 200, patched.json()
    assert [e["name"] for e in patched.json()["expect"]] == ["has sensor"]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("check", "reason"),
    [
        ("id + 1", "is not a boolean"),
        ("java_method('java.lang.System', 'exit', 1) IS NULL", "java_method"),
        ("temperature > 0", "refers to column 'temperature'"),  # the transform drops it
    ],
)
def test_a_bad_check_is_a_400_naming_the_expectation(alice_api, body, check, reason):
    bad = [EXPECT[0], {"name": "broken", "check": check}]
    response = alice_api.post("/api/flows/", {**body, "expect": bad}, format="json")

    assert response.status_code == 400, response.json()
    message = " ".join(response.json()["expect[1].check"])
    assert "expectation 'broken'" in message and reason in message
    assert not DataFlow.objects.filter(name="orders").exists()


@pytest.mark.django_db
def test_expect_must_be_an_array(alice_api, body):
    response = alice_api.post("/api/flows/", {**body, "expect": {"name": "x"}}, format="json")
    assert response.status_code == 400
    assert "expect" in response.json()


@pytest.mark.slow
def test_counts_of_a_run_are_the_owners_only_on_every_surface(
    worker, alice, bob, alice_api, bob_api, body, settings
):
    assert alice_api.post("/api/flows/", {**body, "expect": EXPECT}, format="json").status_code == 201
    started = alice_api.post("/api/flows/orders/start/", format="json")
    assert started.status_code in (200, 201, 202), started.json()
    with Beat():
        run = wait_for_run(DataFlow.objects.get(name="orders").runs.get())
    assert run.status == RunStatus.SUCCEEDED, run.message
    counts = [
        {"name": "low ids", "on_fail": "drop", "passed": 7, "failed": 3},
        {"name": "has sensor", "on_fail": "warn", "passed": 10, "failed": 0},
    ]

    detail = alice_api.get(f"/api/runs/{run.pk}/")
    assert detail.status_code == 200
    assert detail.json()["expectations"] == counts
    assert detail.json()["rows_written"] == 7
    assert alice_api.get("/api/flows/orders/status/").json()["run"]["expectations"] == counts
    letters = alice_api.get("/api/flows/orders/dead-letters/").json()["results"]
    assert sorted(letter["expectation"] for letter in letters) == ["low ids"] * 3

    assert bob_api.get(f"/api/runs/{run.pk}/").status_code == 404
    assert bob_api.get("/api/flows/orders/status/").status_code == 404
    assert bob_api.get("/api/flows/orders/dead-letters/").status_code == 404

    settings.DATAFLOW_METRICS_PUBLIC = True
    metrics = Client().get("/metrics").content.decode()
    assert (
        'dataflow_expectation_rows{expectation="low ids",flow="orders",on_fail="drop",result="failed"} 3.0'
        in metrics
    )

    page = Client()
    page.force_login(alice)
    html = page.get("/flows/orders/").content.decode()
    assert "low ids" in html and "has sensor" in html
    bob_page = Client()
    bob_page.force_login(bob)
    assert bob_page.get("/flows/orders/").status_code == 404

    out = io.StringIO()
    call_command("flowctl", "status", "orders", stdout=out)
    assert "low ids     drop     7       3" in out.getvalue()


@pytest.mark.django_db
def test_the_admin_form_edits_expectations_as_toml(make_flow):
    flow = make_flow(expect=[{"name": "low ids", "check": "id < 7", "on_fail": "drop"}])
    initial = flow_initial(flow)
    assert initial["expectations"] == '[[expect]]\nname = "low ids"\ncheck = "id < 7"\non_fail = "drop"\n'

    form_class = flow_form_class()
    data = {**initial, "expectations": '[[expect]]\nname = "nope"\ncheck = "id + 1"\n'}
    form = form_class(data=data, instance=flow)
    assert not form.is_valid()
    assert "expectation 'nope'" in " ".join(form.errors["expectations"])

    form = form_class(
        data={**initial, "expectations": '[[expect]]\nname = "ok"\ncheck = "id > 0"\n'}, instance=flow
    )
    assert form.is_valid(), form.errors
    assert form.spec["expect"] == [{"name": "ok", "check": "id > 0"}]
