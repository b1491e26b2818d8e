"""The admin edits flows through the same validation as TOML files and starts them through
the same service."""

from __future__ import annotations

import json

import pytest

from dataflow.models import DataFlow, FlowRun


def _form(dirs, **overrides):
    data = {
        "name": "admin-flow",
        "description": "",
        "source_type": "files",
        "source_config": json.dumps({"path": str(dirs.data / "*.csv")}),
        "format_type": "csv",
        "format_options": json.dumps({"schema": "id BIGINT, sensor STRING, temperature DOUBLE"}),
        "transform_sql": "SELECT * FROM source",
        "sink_type": "parquet",
        "sink_config": json.dumps({"path": str(dirs.out / "sink")}),
        "parallelism": 2,
        "batch_size": 100,
        "poll_interval_ms": 100,
        "max_errors": 1000,
        "backpressure_records": 1_000_000,
        "transform_options": "{}",
        "stop_rule": "{}",
        "runs-TOTAL_FORMS": 0,
        "runs-INITIAL_FORMS": 0,
    }
    data.update(overrides)
    return data


@pytest.mark.django_db
def test_admin_creates_a_valid_flow(admin_client, dirs):
    response = admin_client.post("/admin/dataflow/dataflow/add/", _form(dirs))

    assert response.status_code == 302, response.content.decode()[:2000]
    assert DataFlow.objects.get(name="admin-flow").parallelism == 2


@pytest.mark.django_db
def test_admin_shows_the_config_error_on_its_field(admin_client, dirs):
    response = admin_client.post(
        "/admin/dataflow/dataflow/add/", _form(dirs, source_config=json.dumps({"path": "/etc/*"}))
    )

    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert "source.path" in errors["source_config"][0]
    assert not DataFlow.objects.exists()


@pytest.mark.django_db
def test_admin_action_starts_the_flow(admin_client, dirs):
    (dirs.data / "a.csv").write_text("id,sensor,temperature\n1,a,1.0\n")
    admin_client.post("/admin/dataflow/dataflow/add/", _form(dirs))
    flow = DataFlow.objects.get(name="admin-flow")

    admin_client.post("/admin/dataflow/dataflow/", {"action": "start_flows", "_selected_action": [flow.pk]})

    assert FlowRun.objects.get(flow=flow).status == "reading"
    assert DataFlow.objects.get(pk=flow.pk).status == "running"
