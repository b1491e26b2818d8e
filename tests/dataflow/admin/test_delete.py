"""Deleting a flow in the admin stops it and leaves no beat schedule behind."""

from __future__ import annotations

import pytest
from django_celery_beat.models import PeriodicTask

from dataflow.models import DataFlow, FlowRun, SinkPathClaim
from dataflow.services.flows import flow_start
from tests.factories import DataFlowFactory
from tests.helpers import write_csv


def _running_flow(dirs, name: str) -> DataFlow:
    write_csv(dirs.data / f"{name}.csv", range(10))
    flow = DataFlowFactory(name=name, source_path=str(dirs.data / f"{name}.csv"))
    flow_start(flow=flow)
    assert PeriodicTask.objects.filter(name=f"dataflow-tick:{name}", enabled=True).exists()
    return flow


@pytest.mark.django_db
@pytest.mark.slow
def test_deleting_a_running_flow_in_the_admin_leaves_no_periodic_task(admin_client, dirs):
    flow = _running_flow(dirs, "doomed")

    response = admin_client.post(f"/admin/dataflow/dataflow/{flow.pk}/delete/", {"post": "yes"})

    assert response.status_code == 302
    assert not DataFlow.objects.filter(pk=flow.pk).exists()
    assert not FlowRun.objects.filter(flow_id=flow.pk).exists()
    assert not PeriodicTask.objects.filter(name="dataflow-tick:doomed").exists()


@pytest.mark.django_db
@pytest.mark.slow
def test_deleting_selected_flows_in_the_admin_leaves_no_periodic_task(admin_client, dirs):
    flows = [_running_flow(dirs, "first"), _running_flow(dirs, "second")]

    response = admin_client.post(
        "/admin/dataflow/dataflow/",
        {"action": "delete_selected", "_selected_action": [f.pk for f in flows], "post": "yes"},
    )

    assert response.status_code == 302
    assert not DataFlow.objects.exists()
    assert not PeriodicTask.objects.filter(name__startswith="dataflow-tick:").exists()


@pytest.mark.django_db
def test_the_admin_deletes_selected_flows_with_their_output(admin_client, dirs):
    # Issue 25, 2.7: the plain delete keeps a flow's output as its owner's; this action does not.
    flow = _running_flow(dirs, "with-output")
    (dirs.out / "with-output").mkdir()
    (dirs.out / "with-output" / "part-0.csv").write_text("id\n1\n")

    response = admin_client.post(
        "/admin/dataflow/dataflow/",
        {"action": "delete_flows_with_output", "_selected_action": [flow.pk]},
    )

    assert response.status_code == 302
    assert not DataFlow.objects.filter(pk=flow.pk).exists()
    assert not (dirs.out / "with-output").exists()
    assert not SinkPathClaim.objects.exists()
