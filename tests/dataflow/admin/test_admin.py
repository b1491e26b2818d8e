"""The admin edits flows through the same validation as TOML files and starts them through
the same service."""

from __future__ import annotations

import pytest

from dataflow.models import DataFlow, FlowRun


@pytest.mark.django_db
def test_admin_creates_a_valid_flow(add_flow):
    response = add_flow()

    assert response.status_code == 302, response.content.decode()[:2000]
    assert DataFlow.objects.get(name="admin-flow").parallelism == 2


@pytest.mark.django_db
def test_admin_shows_the_config_error_on_its_field(add_flow):
    response = add_flow(source__files__path="/etc/*")

    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert "source.path" in errors["source__files__path"][0]
    assert not DataFlow.objects.exists()


@pytest.mark.django_db
def test_admin_action_starts_the_flow(admin_client, add_flow):
    add_flow()
    flow = DataFlow.objects.get(name="admin-flow")

    admin_client.post("/admin/dataflow/dataflow/", {"action": "start_flows", "_selected_action": [flow.pk]})

    assert FlowRun.objects.get(flow=flow).status == "reading"
    assert DataFlow.objects.get(pk=flow.pk).status == "running"
