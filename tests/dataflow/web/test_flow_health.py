"""The dashboard marks a stale flow, on the list and on its page."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from dataflow.models import DataFlow
from dataflow.services.health import flows_health_check
from tests.factories import DataFlowFactory, UserFactory

pytestmark = pytest.mark.django_db


def test_a_stale_flow_is_marked_on_the_list_and_its_page(client, dirs):
    owner = UserFactory(username="ada")
    client.force_login(owner)
    late = DataFlowFactory(name="ada-late", owner=owner, freshness="15 minutes")
    DataFlowFactory(name="ada-on-time", owner=owner, freshness="15 minutes")
    DataFlow.objects.filter(pk=late.pk).update(created_at=timezone.now() - timedelta(hours=1))
    flows_health_check()

    listed = client.get("/").content.decode()
    page = client.get("/flows/ada-late/").content.decode()
    rows = {flow["name"]: flow for flow in client.get("/live.json").json()["flows"]}

    assert listed.count('class="badge badge-stale"') == 1
    assert 'class="badge badge-stale"' in page
    assert "stale: the sink has not moved for 15 minutes" in page
    assert (rows["ada-late"]["stale"], rows["ada-on-time"]["stale"]) == (True, False)
