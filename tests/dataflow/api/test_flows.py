"""Flows through the API: create, read, list, replace, merge, delete."""

from __future__ import annotations

import pytest

from dataflow.models import DataFlow, FlowRun, FlowStatus, RunStatus
from dataflow.services.flows import flow_start

pytestmark = pytest.mark.django_db


def test_a_created_flow_reads_back_as_it_was_posted(api, body, owner):
    created = api.post("/api/flows/", body, format="json")

    assert created.status_code == 201, created.json()
    assert created["Location"].endswith("/api/flows/orders/")
    got = api.get("/api/flows/orders/").json()
    for key, value in body.items():
        if isinstance(value, dict):
            assert got[key].items() >= value.items(), key  # stored sections add their defaults
        else:
            assert got[key] == value, key
    assert got["status"] == "idle"
    assert got["owner"] == owner.username
    assert got["last_run"] is None
    assert got["url"] == "http://testserver/api/flows/orders/"
    assert got["created_at"] and got["updated_at"]
    assert DataFlow.objects.get(name="orders").owner == owner


def test_a_name_that_exists_is_a_conflict(api, body):
    assert api.post("/api/flows/", body, format="json").status_code == 201

    again = api.post("/api/flows/", {**body, "parallelism": 3}, format="json")

    assert again.status_code == 409
    assert "exists already" in again.json()["detail"]
    assert DataFlow.objects.get(name="orders").parallelism == 2  # not updated by the refused POST


def test_the_list_is_paginated_and_filtered(api, make_flow, owner):
    for i in range(3):
        make_flow(f"flow-{i}")
    running = make_flow("stream-a")
    DataFlow.objects.filter(pk=running.pk).update(status=FlowStatus.RUNNING)

    page = api.get("/api/flows/", {"page_size": 2}).json()
    assert page["count"] == 4
    assert [f["name"] for f in page["results"]] == ["flow-0", "flow-1"]
    assert page["next"].endswith("page=2&page_size=2") and page["previous"] is None

    assert [f["name"] for f in api.get("/api/flows/", {"status": "running"}).json()["results"]] == [
        "stream-a"
    ]
    assert [f["name"] for f in api.get("/api/flows/", {"name": "flow-1"}).json()["results"]] == ["flow-1"]
    assert api.get("/api/flows/", {"name": "flow"}).json()["count"] == 0  # exact
    assert api.get("/api/flows/", {"name__icontains": "FLOW"}).json()["count"] == 3
    assert api.get("/api/flows/", {"search": "stream"}).json()["count"] == 1
    assert api.get("/api/flows/", {"source_type": "files"}).json()["count"] == 4
    assert api.get("/api/flows/", {"source_type": "redis_streams"}).json()["count"] == 0


def test_an_unknown_status_filter_is_refused(api):
    response = api.get("/api/flows/", {"status": "sleeping"})

    assert response.status_code == 400
    assert "status" in response.json()


def test_put_replaces_the_whole_spec(api, flow, dirs):
    body = {
        "source": {"type": "files", "path": flow.source_config["path"]},
        "transform": {"sql": "SELECT id FROM source"},
        "sink": {"type": "csv", "path": str(dirs.out / "as-csv")},
    }

    response = api.put(f"/api/flows/{flow.name}/", body, format="json")

    assert response.status_code == 200, response.json()
    flow.refresh_from_db()
    assert flow.sink_type == "csv"
    assert flow.transform_sql == "SELECT id FROM source"
    assert flow.parallelism == 4  # left out: the default again (it was set to 4 by the factory too)
    assert flow.batch_size == 10_000  # the factory's 1000 is gone: PUT replaces
    assert response.json()["sink"]["path"] == str(dirs.out / "as-csv")


def test_put_with_another_name_is_refused(api, flow, body):
    response = api.put(f"/api/flows/{flow.name}/", {**body, "name": "renamed"}, format="json")

    assert response.status_code == 400
    assert "cannot be renamed" in response.json()["name"][0]
    assert DataFlow.objects.filter(name=flow.name).exists()


def test_patch_merges_keys_into_the_stored_sections(api, flow):
    response = api.patch(
        f"/api/flows/{flow.name}/",
        {"parallelism": 8, "format": {"schema": "id BIGINT, sensor STRING, temperature DOUBLE"}},
        format="json",
    )

    assert response.status_code == 200, response.json()
    got = response.json()
    assert got["parallelism"] == 8
    assert got["batch_size"] == 1000  # kept
    assert got["format"]["type"] == "csv"  # kept: only schema was given
    assert got["source"]["path"] == flow.source_config["path"]


def test_patch_with_another_type_replaces_the_section(api, flow, dirs):
    response = api.patch(
        f"/api/flows/{flow.name}/", {"sink": {"type": "json", "path": str(dirs.out / "j")}}, format="json"
    )

    assert response.status_code == 200, response.json()
    flow.refresh_from_db()
    assert (flow.sink_type, flow.sink_config["path"]) == ("json", str(dirs.out / "j"))


def test_patch_with_a_bad_value_changes_nothing(api, flow):
    response = api.patch(f"/api/flows/{flow.name}/", {"parallelism": 0}, format="json")

    assert response.status_code == 400
    assert response.json()["flow.parallelism"] == ["must be between 1 and 256"]
    assert response.json()["parallelism"] == ["must be between 1 and 256"]
    flow.refresh_from_db()
    assert flow.parallelism == 4


def test_delete_of_a_running_flow_stops_its_run_and_removes_it(api, flow):
    run = flow_start(flow=flow)

    response = api.delete(f"/api/flows/{flow.name}/")

    assert response.status_code == 204
    assert not DataFlow.objects.filter(pk=flow.pk).exists()
    assert not FlowRun.objects.filter(pk=run.pk).exists()
    assert api.get(f"/api/flows/{flow.name}/").status_code == 404


def test_a_flows_json_shows_its_latest_run(api, flow):
    run = flow_start(flow=flow)

    got = api.get(f"/api/flows/{flow.name}/").json()

    assert got["status"] == "running"
    assert got["last_run"]["id"] == run.pk
    assert got["last_run"]["status"] == RunStatus.READING
    assert got["last_run"]["finished_at"] is None
    assert got["last_run"]["records_read"] == 0


#: A raw url is for staff only (users name connections): staff make these flows.
SECRET_URL = "redis://:s3cret-pw@127.0.0.1:6379/5"


@pytest.fixture()
def secret_flow(staff_api, body):
    body = {**body, "sink": {"type": "redis_stream", "url": SECRET_URL, "key": "orders:out"}}
    response = staff_api.post("/api/flows/", body, format="json")
    assert response.status_code == 201, response.json()
    return response.json()


def test_secrets_are_masked_and_a_masked_secret_sent_back_keeps_the_stored_one(staff_api, secret_flow):
    assert secret_flow["sink"]["url"] == "redis://:****@127.0.0.1:6379/5"
    assert "s3cret" not in str(staff_api.get("/api/flows/orders/").json())

    put = staff_api.put("/api/flows/orders/", {**secret_flow, "batch_size": 500}, format="json")

    assert put.status_code == 200, put.json()
    flow = DataFlow.objects.get(name="orders")
    assert flow.sink_config["url"] == SECRET_URL
    assert flow.batch_size == 500


def test_a_patched_section_keeps_its_stored_secret(staff_api, secret_flow):
    response = staff_api.patch("/api/flows/orders/", {"sink": {"key": "orders:other"}}, format="json")

    assert response.status_code == 200, response.json()
    flow = DataFlow.objects.get(name="orders")
    assert flow.sink_config == {"url": SECRET_URL, "key": "orders:other"}


@pytest.mark.slow
def test_a_new_secret_replaces_the_stored_one(staff_api, secret_flow):
    new_url = "redis://:n3w-pw@127.0.0.1:6379/5"

    response = staff_api.patch("/api/flows/orders/", {"sink": {"url": new_url}}, format="json")

    assert response.status_code == 200, response.json()
    assert DataFlow.objects.get(name="orders").sink_config["url"] == new_url


def test_a_webhook_is_masked_and_kept_when_sent_back_masked(api, body):
    hook = "https://bot:pw@hooks.example.com/flows?token=abc"
    created = api.post("/api/flows/", {**body, "notify": {"webhook": hook}}, format="json").json()

    assert created["notify"]["webhook"] == "https://***@hooks.example.com/flows?***"
    put = api.put("/api/flows/orders/", {**created, "batch_size": 500}, format="json")

    assert put.status_code == 200, put.json()
    assert DataFlow.objects.get(name="orders").notify["webhook"] == hook


def test_the_list_shows_each_flows_latest_run(api, make_flow):
    ran, idle = make_flow("ran"), make_flow("idle")
    flow_start(flow=ran)
    FlowRun.objects.filter(flow=ran).update(status=RunStatus.STOPPED)
    latest = flow_start(flow=ran)

    flows = {f["name"]: f for f in api.get("/api/flows/").json()["results"]}

    assert flows["ran"]["last_run"]["id"] == latest.pk
    assert flows["idle"]["last_run"] is None
    assert idle.name in flows


def test_the_test_client_sends_json_unless_told_otherwise(api, body):
    # What a test written against the API does without format="json".
    assert api.post("/api/flows/", body).status_code == 201
    assert api.post("/api/flows/orders/restore/").status_code == 409  # no checkpoint; the empty body parses
