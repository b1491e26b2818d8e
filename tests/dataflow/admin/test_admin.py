"""The admin edits flows through the same validation as TOML files and starts them through
the same service."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from dataflow.models import DataFlow, FlowRun
from tests.factories import DataFlowFactory, FlowRunFactory, splits_bulk


@pytest.mark.django_db
def test_admin_creates_a_valid_flow(add_flow):
    response = add_flow()

    assert response.status_code == 302, response.content.decode()[:2000]
    assert DataFlow.objects.get(name="admin-flow").parallelism == 2


@pytest.mark.django_db
@pytest.mark.slow
def test_admin_shows_the_config_error_on_its_field(add_flow):
    response = add_flow(source__files__path="/etc/*")

    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert "source.path" in errors["source__files__path"][0]
    assert not DataFlow.objects.exists()


@pytest.mark.django_db
@pytest.mark.slow
def test_admin_action_starts_the_flow(admin_client, add_flow):
    add_flow()
    flow = DataFlow.objects.get(name="admin-flow")

    admin_client.post("/admin/dataflow/dataflow/", {"action": "start_flows", "_selected_action": [flow.pk]})

    assert FlowRun.objects.get(flow=flow).status == "reading"
    assert DataFlow.objects.get(pk=flow.pk).status == "running"


@pytest.mark.django_db
@pytest.mark.slow
def test_a_flows_admin_page_makes_as_many_queries_for_3000_splits_as_for_10(
    admin_client, django_assert_max_num_queries
):
    # Issue 25, 2.2: the admin's flow and run pages show counts, and its split list a page.
    run = FlowRunFactory(flow=DataFlowFactory(name="wide"), running=True)
    pages = [
        f"/admin/dataflow/dataflow/{run.flow_id}/change/",
        f"/admin/dataflow/flowrun/{run.pk}/change/",
        f"/admin/dataflow/split/?run__id__exact={run.pk}",
    ]
    splits_bulk(run, 10)
    counts = {}
    for page in pages:
        with CaptureQueriesContext(connection) as few:
            assert admin_client.get(page).status_code == 200
        counts[page] = len(few.captured_queries)
    splits_bulk(run, 2_990, start=10)

    for page in pages:
        with django_assert_max_num_queries(counts[page]):
            response = admin_client.get(page)
        assert response.status_code == 200
