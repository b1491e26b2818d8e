"""Start, stop, pause, resume and restart are buttons on the flow's page: a POST that calls
the service, whose refusal is shown as a message."""

from __future__ import annotations

import pytest

from dataflow.models import DataFlow, FlowRun, Split, SplitStatus
from dataflow.services.flows import flow_start
from tests.factories import SplitFactory


def _steer(client, flow: DataFlow, action: str):
    return client.post(f"/admin/dataflow/dataflow/{flow.pk}/steer/{action}/", follow=True)


def _status(flow: DataFlow) -> str:
    return DataFlow.objects.get(pk=flow.pk).status


def _messages(response) -> list[str]:
    return [str(m) for m in response.context["messages"]]


@pytest.mark.django_db
@pytest.mark.slow
def test_start_pause_resume_and_stop_buttons_change_the_flows_state(admin_client, csv_flow):
    response = _steer(admin_client, csv_flow, "start")
    assert response.status_code == 200
    assert _status(csv_flow) == "running"
    run = FlowRun.objects.get(flow=csv_flow)
    assert f"csv-flow: run {run.pk} started" in _messages(response)

    _steer(admin_client, csv_flow, "pause")
    assert _status(csv_flow) == "paused"
    assert FlowRun.objects.get(pk=run.pk).paused_at is not None

    _steer(admin_client, csv_flow, "resume")
    assert _status(csv_flow) == "running"

    response = _steer(admin_client, csv_flow, "stop")
    assert _status(csv_flow) == "stopped"
    assert FlowRun.objects.get(pk=run.pk).status == "stopped"
    assert f"csv-flow: run {run.pk} stopped" in _messages(response)


@pytest.mark.django_db
@pytest.mark.slow
def test_a_refused_action_is_an_error_message_not_an_error_page(admin_client, csv_flow):
    response = _steer(admin_client, csv_flow, "pause")

    assert response.status_code == 200
    assert response.redirect_chain[-1][0] == f"/admin/dataflow/dataflow/{csv_flow.pk}/change/"
    assert any("has no active run to pause" in m for m in _messages(response))
    assert _status(csv_flow) == "idle"


@pytest.mark.django_db
@pytest.mark.slow
def test_restart_stops_the_run_and_starts_a_new_one(admin_client, csv_flow):
    first = flow_start(flow=csv_flow)

    _steer(admin_client, csv_flow, "restart")

    runs = list(FlowRun.objects.filter(flow=csv_flow).order_by("id"))
    assert [r.status for r in runs] == ["stopped", "reading"]
    assert runs[0].pk == first.pk


@pytest.mark.django_db
@pytest.mark.slow
def test_restart_failed_reads_only_the_failed_splits_again(admin_client, csv_flow):
    run = flow_start(flow=csv_flow)
    SplitFactory(run=run, split_id="a@0", status=SplitStatus.FINISHED)
    SplitFactory(run=run, split_id="b@0", status=SplitStatus.FAILED, error="boom")

    page = admin_client.get(f"/admin/dataflow/dataflow/{csv_flow.pk}/change/").content.decode()
    assert 'id="steer-restart_failed"' in page

    response = _steer(admin_client, csv_flow, "restart_failed")

    assert any("restarted 1 failed split(s)" in m for m in _messages(response))
    assert dict(Split.objects.filter(run=run).values_list("split_id", "status")) == {
        "a@0": "finished",
        "b@0": "assigned",
    }


@pytest.mark.django_db
@pytest.mark.slow
def test_the_page_shows_the_buttons_that_fit_the_state(admin_client, csv_flow):
    url = f"/admin/dataflow/dataflow/{csv_flow.pk}/change/"
    idle = admin_client.get(url).content.decode()
    flow_start(flow=csv_flow)
    running = admin_client.get(url).content.decode()

    assert 'id="steer-start"' in idle and 'id="steer-stop"' not in idle
    assert (
        'id="steer-pause"' in running and 'id="steer-stop"' in running and 'id="steer-start"' not in running
    )
    assert 'name="csrfmiddlewaretoken"' in running


@pytest.mark.django_db
def test_a_button_takes_only_a_post(admin_client, csv_flow):
    response = admin_client.get(f"/admin/dataflow/dataflow/{csv_flow.pk}/steer/start/")

    assert response.status_code == 405
    assert _status(csv_flow) == "idle"


@pytest.mark.django_db
def test_a_button_needs_a_staff_user(client, csv_flow):
    response = client.post(f"/admin/dataflow/dataflow/{csv_flow.pk}/steer/start/")

    assert response.status_code == 302
    assert response["Location"].startswith("/admin/login/")
    assert _status(csv_flow) == "idle"


@pytest.mark.django_db
def test_the_stop_list_action_stays(admin_client, csv_flow):
    flow_start(flow=csv_flow)

    admin_client.post(
        "/admin/dataflow/dataflow/", {"action": "stop_flows", "_selected_action": [csv_flow.pk]}
    )

    assert _status(csv_flow) == "stopped"


@pytest.mark.django_db
def test_a_staff_user_who_may_only_view_flows_gets_no_buttons(client, csv_flow):
    from django.contrib.auth.models import Permission, User

    viewer = User.objects.create_user("viewer", password="x", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_dataflow"))
    client.force_login(viewer)

    page = client.get(f"/admin/dataflow/dataflow/{csv_flow.pk}/change/")
    refused = client.post(f"/admin/dataflow/dataflow/{csv_flow.pk}/steer/start/")

    assert page.status_code == 200
    assert 'id="steer-start"' not in page.content.decode()
    assert 'name="_save"' not in page.content.decode()
    # The flow's TOML, its path relative to DATAFLOW_BASE_DIR as flowctl export writes it.
    assert "path = &quot;data/csv-flow.csv&quot;" in page.content.decode()
    assert refused.status_code == 403
    assert _status(csv_flow) == "idle"
