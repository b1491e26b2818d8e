"""Actions through the real services (no worker: a run is created and stays reading), and
what a flow's status, runs, metrics, offsets and checkpoints show."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from dataflow.models import Checkpoint, FlowRun, MetricSample, RunStatus, Split, SplitStatus

pytestmark = pytest.mark.django_db


def act(api, flow, action, **params):
    query = "&".join(f"{k}={v}" for k, v in params.items())
    return api.post(f"/api/flows/{flow.name}/{action}/" + (f"?{query}" if query else ""))


def test_start_creates_a_running_run(api, flow):
    response = act(api, flow, "start")

    assert response.status_code == 202
    run = FlowRun.objects.get(flow=flow)
    assert response.json() == {
        "flow": flow.name,
        "run": run.pk,
        "status": "running",
        "run_status": "reading",
        "run_url": f"http://testserver/api/runs/{run.pk}/",
    }


def test_start_of_a_running_flow_is_a_conflict(api, flow):
    act(api, flow, "start")

    response = act(api, flow, "start")

    assert response.status_code == 409
    assert response.json() == {"detail": f"flow {flow.name!r} is already running"}
    assert FlowRun.objects.filter(flow=flow).count() == 1


def test_start_of_a_flow_whose_config_is_no_longer_valid_names_the_field(api, flow, dirs, settings):
    settings.DATAFLOW_ALLOWED_ROOTS = [dirs.out.resolve()]  # the source's root is no longer allowed

    response = act(api, flow, "start")

    assert response.status_code == 400
    assert list(response.json()) == ["source.path"]
    assert not FlowRun.objects.filter(flow=flow).exists()


def test_stop_stops_the_run_and_a_second_stop_is_a_conflict(api, flow):
    run_id = act(api, flow, "start").json()["run"]

    stopped = act(api, flow, "stop")
    again = act(api, flow, "stop")

    assert stopped.status_code == 200
    assert stopped.json()["status"] == "stopped"
    assert stopped.json()["run"] == run_id
    assert FlowRun.objects.get(pk=run_id).status == RunStatus.STOPPED
    assert again.status_code == 409
    assert "no active run to stop" in again.json()["detail"]


@pytest.mark.slow
def test_pause_and_resume(api, flow):
    run_id = act(api, flow, "start").json()["run"]

    paused = act(api, flow, "pause")
    paused_again = act(api, flow, "pause")
    resumed = act(api, flow, "resume")

    assert (paused.status_code, paused.json()["status"], paused.json()["run"]) == (200, "paused", run_id)
    assert FlowRun.objects.get(pk=run_id).paused_at is None
    assert paused_again.status_code == 409
    assert "paused already" in paused_again.json()["detail"]
    assert (resumed.status_code, resumed.json()["status"]) == (202, "running")
    assert api.get(f"/api/runs/{run_id}/").json()["paused"] is False


def test_resume_of_a_flow_never_run_is_a_conflict(api, flow):
    response = act(api, flow, "resume")

    assert response.status_code == 409
    assert "has no stopped run to resume" in response.json()["detail"]


@pytest.mark.slow
def test_restart_stops_the_run_and_starts_another(api, flow):
    first = act(api, flow, "start").json()["run"]

    response = act(api, flow, "restart")

    assert response.status_code == 202
    assert response.json()["run"] != first
    assert response.json()["status"] == "running"
    assert FlowRun.objects.get(pk=first).status == RunStatus.STOPPED


@pytest.mark.slow
def test_restart_only_failed_restarts_the_failed_splits(api, flow, csv_path):
    run_id = act(api, flow, "start").json()["run"]
    act(api, flow, "stop")
    size = csv_path.stat().st_size
    payload = {"path": str(csv_path), "start": 0, "end": size, "position": 0, "compressed": False}
    Split.objects.create(
        run_id=run_id, split_id=f"{csv_path}@0", payload=payload, status=SplitStatus.FAILED, error="boom"
    )

    response = act(api, flow, "restart", only_failed="true")

    assert response.status_code == 202, response.json()
    assert response.json()["run"] == run_id  # the same run goes on
    assert Split.objects.get(run_id=run_id).status == SplitStatus.ASSIGNED


def test_restart_only_failed_without_a_failed_split_is_a_conflict(api, flow):
    response = act(api, flow, "restart", only_failed="true")

    assert response.status_code == 409
    assert "no failed split" in response.json()["detail"]


def test_restart_with_a_bad_only_failed_is_a_400(api, flow):
    response = act(api, flow, "restart", only_failed="perhaps")

    assert response.status_code == 400
    assert "only_failed" in response.json()


@pytest.mark.slow
def test_status_shows_the_state_the_run_and_its_splits(api, flow):
    run_id = act(api, flow, "start").json()["run"]
    Split.objects.create(
        run_id=run_id,
        split_id="orders.csv@0",
        payload={},
        position=40,
        records_read=3,
        status=SplitStatus.FAILED,
        error="line 4: bad record",
    )

    status = api.get(f"/api/flows/{flow.name}/status/").json()

    assert status["flow"] == flow.name
    assert status["status"] == "running"
    assert status["run"]["id"] == run_id
    assert status["run"]["status"] == "reading"
    assert status["run"]["records_read"] == 3
    assert status["splits_listed"] == 1
    split = status["splits"][0]
    assert split["split_id"] == "orders.csv@0"
    assert split["state"] == "failed"
    assert split["position"] == 40
    assert isinstance(split["offset"], str)
    assert split["reader"] is None
    assert split["lag"] is None
    assert status["last_error"] == "line 4: bad record"


def test_status_of_a_flow_never_run(api, flow):
    status = api.get(f"/api/flows/{flow.name}/status/").json()

    assert status == {
        "flow": flow.name,
        "status": "idle",
        "stale": False,
        "stale_since": None,
        "schedule_paused": "",
        "run": None,
        "splits": [],
        "splits_listed": 0,
        "splits_by_state": {},
        "splits_page": 1,
        "splits_pages": 0,
        "last_error": None,
    }


@pytest.mark.slow
def test_runs_are_listed_newest_first_with_their_counters(api, flow):
    first = act(api, flow, "start").json()["run"]
    act(api, flow, "stop")
    second = act(api, flow, "start").json()["run"]
    Split.objects.create(run_id=second, split_id="s", payload={}, records_read=7)

    page = api.get(f"/api/flows/{flow.name}/runs/").json()

    assert page["count"] == 2
    assert [r["id"] for r in page["results"]] == [second, first]
    live = page["results"][0]
    assert (live["status"], live["records_read"], live["finished_at"]) == ("reading", 7, None)
    assert live["duration_seconds"] >= 0
    stopped = api.get(f"/api/runs/{first}/").json()
    assert stopped["status"] == "stopped"
    assert stopped["message"] == "stopped by request"
    assert stopped["error"] is None
    assert stopped["trigger"] == "manual"
    assert stopped["spark_app_id"] == ""
    assert stopped["finished_at"] is not None


@pytest.mark.slow
def test_metrics_are_the_latest_runs_series_by_default(api, flow):
    old = act(api, flow, "start").json()["run"]
    act(api, flow, "stop")
    latest = act(api, flow, "start").json()["run"]
    now = timezone.now()
    for i in range(3):
        MetricSample.objects.create(
            run_id=latest, at=now - timedelta(seconds=30 - 10 * i), records_read=100 * i
        )
    MetricSample.objects.create(run_id=latest, split_id="s1", at=now, records_read=5)
    MetricSample.objects.create(run_id=old, at=now, records_read=999)

    default = api.get(f"/api/flows/{flow.name}/metrics/").json()
    since = api.get(
        f"/api/flows/{flow.name}/metrics/", {"since": (now - timedelta(seconds=15)).isoformat()}
    ).json()
    split = api.get(f"/api/flows/{flow.name}/metrics/", {"split": "s1"}).json()
    of_old = api.get(f"/api/flows/{flow.name}/metrics/", {"run": old}).json()

    assert default["run"] == latest
    assert [s["records_read"] for s in default["series"]] == [0, 100, 200]
    assert [s["records_read"] for s in since["series"]] == [200]
    assert [s["records_read"] for s in split["series"]] == [5]
    assert [s["records_read"] for s in of_old["series"]] == [999]


@pytest.mark.slow
def test_metrics_of_another_flows_run_is_404_and_a_bad_since_400(api, flow, make_flow):
    other = make_flow("other")
    run_id = act(api, other, "start").json()["run"]

    assert api.get(f"/api/flows/{flow.name}/metrics/", {"run": run_id}).status_code == 404
    assert api.get(f"/api/flows/{flow.name}/metrics/", {"since": "yesterday"}).status_code == 400
    assert api.get(f"/api/flows/{flow.name}/metrics/").json() == {
        "flow": flow.name,
        "run": None,
        "split": "",
        "series": [],
    }


@pytest.mark.slow
def test_offsets_can_be_changed_only_while_stopped(api, flow):
    run_id = act(api, flow, "start").json()["run"]
    Split.objects.create(run_id=run_id, split_id="orders.csv@0", payload={}, position=40, records_read=3)

    listed = api.get(f"/api/flows/{flow.name}/offsets/").json()
    reset_running = api.post(f"/api/flows/{flow.name}/offsets/reset/")
    set_running = api.patch(
        f"/api/flows/{flow.name}/offsets/", {"offsets": {"orders.csv@0": "0"}}, format="json"
    )

    assert listed["run"] == run_id
    assert [(o["split"], o["position"]) for o in listed["offsets"]] == [("orders.csv@0", 40)]
    assert reset_running.status_code == 409
    assert "stop it before changing its offsets" in reset_running.json()["detail"]
    assert set_running.status_code == 409


@pytest.mark.slow
def test_offsets_of_an_unknown_split_are_a_field_error_and_a_reset_forgets_them(api, flow):
    run_id = act(api, flow, "start").json()["run"]
    Split.objects.create(run_id=run_id, split_id="orders.csv@0", payload={}, position=40)
    act(api, flow, "stop")

    unknown = api.patch(f"/api/flows/{flow.name}/offsets/", {"offsets": {"nope": "0"}}, format="json")
    reset = api.post(f"/api/flows/{flow.name}/offsets/reset/")

    assert unknown.status_code == 400
    assert list(unknown.json()) == ["offsets.nope"]
    assert reset.status_code == 200
    assert reset.json()["offsets"] == []
    assert not Split.objects.filter(run_id=run_id).exists()


@pytest.mark.slow
def test_checkpoints_are_listed_newest_first_and_restored(api, flow):
    run_id = act(api, flow, "start").json()["run"]
    act(api, flow, "stop")
    older = Checkpoint.objects.create(run_id=run_id, splits={}, records_read=5)
    newer = Checkpoint.objects.create(run_id=run_id, splits={}, records_read=9)

    listed = api.get(f"/api/flows/{flow.name}/checkpoints/").json()
    restored = api.post(f"/api/flows/{flow.name}/restore/", {"checkpoint": older.pk}, format="json")
    again = api.post(f"/api/flows/{flow.name}/restore/", {}, format="json")

    assert [c["id"] for c in listed["results"]] == [newer.pk, older.pk]
    assert listed["results"][0]["records_read"] == 9
    assert restored.status_code == 202
    assert restored.json()["run"] not in (None, run_id)
    assert again.status_code == 409  # a run is active now


def test_restore_without_a_checkpoint_is_a_conflict(api, flow):
    response = api.post(f"/api/flows/{flow.name}/restore/", {}, format="json")

    assert response.status_code == 409
    assert "checkpoint" in response.json()["detail"]


def test_the_connector_catalog_lists_types_with_their_schemas(api):
    catalog = api.get("/api/connectors/").json()

    sources = {c["type"]: c for c in catalog["sources"]}
    assert "files" in sources
    assert sources["files"]["schema"]["properties"]["path"]["type"] == "string"
    assert "csv" in {c["type"] for c in catalog["formats"]}
    sinks = {c["type"]: c for c in catalog["sinks"]}
    assert sinks["parquet"]["appends"] is True
    assert sinks["redis_stream"]["schema"]["properties"]["url"]["writeOnly"] is True
