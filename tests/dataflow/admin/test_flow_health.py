"""[flow] freshness and disable_after_failures in the admin: fields of the generated form,
refusals on their field, stale shown on the list and the flow page."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from dataflow.models import DataFlow
from dataflow.services.health import flows_health_check
from tests.factories import DataFlowFactory

pytestmark = pytest.mark.django_db


def test_the_form_takes_the_health_fields(add_flow):
    response = add_flow(freshness="15 minutes", disable_after_failures="0")

    assert response.status_code == 302, response.context["adminform"].form.errors
    flow = DataFlow.objects.get(name="admin-flow")
    assert (flow.freshness, flow.freshness_seconds) == ("15 minutes", 900)


def test_a_bad_freshness_is_shown_on_its_field(add_flow):
    response = add_flow(freshness="soonish")

    errors = response.context["adminform"].form.errors
    assert "flow.freshness" in errors["freshness"][0]


def test_a_stale_flow_says_so_on_the_list_and_its_page(admin_client, dirs):
    flow = DataFlowFactory(name="late", freshness="15 minutes")
    DataFlow.objects.filter(pk=flow.pk).update(created_at=timezone.now() - timedelta(hours=1))
    flows_health_check()

    listed = admin_client.get("/admin/dataflow/dataflow/").content.decode()
    page = admin_client.get(f"/admin/dataflow/dataflow/{flow.pk}/change/").content.decode()

    assert "stale: the sink has not moved for 15 minutes" in listed
    assert "stale: the sink has not moved for 15 minutes" in page
