"""A run's schema changes (format.on_schema_change): stored one per column and kind by the
store, listed on the run in the API, the admin and the dashboard, to its owner only; a bad
policy is refused naming the field."""

from __future__ import annotations

import pytest

from dataflow.models import SchemaChangeRecord
from dataflow.store import DjangoRunStore
from source_support.api import SchemaChange
from tests.dataflow.api.conftest import client_of
from tests.factories import FlowRunFactory

pytestmark = pytest.mark.django_db


def _run_with_changes(owner):
    run = FlowRunFactory(flow__owner=owner, flow__name=f"{owner.username}-orders")
    store = DjangoRunStore(run)
    added = SchemaChange(
        "region", "added", "", "STRING", "rescue", 0, 5, where="/data/b.csv line 2 (byte 30)"
    )
    store._record_schema_changes([added, SchemaChange("region", "added", "", "STRING", "rescue", 90, 2)])
    store._record_schema_changes(
        [SchemaChange("region", "added", "", "STRING", "rescue", 0, 3, where="later")]
    )
    return run


def test_a_change_is_stored_once_per_column_and_kind_with_its_first_position_and_every_record(bob):
    run = _run_with_changes(bob)

    [change] = SchemaChangeRecord.objects.filter(run=run)
    assert (change.column_name, change.kind, change.policy, change.records) == (
        "region",
        "added",
        "rescue",
        10,
    )
    assert change.first_position == "/data/b.csv line 2 (byte 30)"


def test_the_api_lists_a_runs_changes_to_its_owner_and_no_one_else(alice, bob):
    run = _run_with_changes(bob)

    alices = client_of(alice)
    mine = client_of(bob).get(f"/api/runs/{run.pk}/")
    theirs = alices.get(f"/api/runs/{run.pk}/")

    assert mine.status_code == 200
    assert mine.json()["schema_changes"] == [
        {
            "column": "region",
            "kind": "added",
            "old_type": "",
            "new_type": "STRING",
            "policy": "rescue",
            "first_position": "/data/b.csv line 2 (byte 30)",
            "records": 10,
        }
    ]
    assert theirs.status_code == 404
    assert alices.get(f"/api/flows/{run.flow.name}/runs/").status_code == 404


def test_the_dashboard_shows_the_latest_runs_changes_to_its_owner_only(client, alice, bob):
    run = _run_with_changes(bob)

    client.force_login(bob)
    page = client.get(f"/flows/{run.flow.name}/").content.decode()
    assert "Schema changes" in page and "/data/b.csv line 2 (byte 30)" in page
    client.force_login(alice)
    assert client.get(f"/flows/{run.flow.name}/").status_code == 404


def test_the_admin_run_page_lists_the_changes(admin_client, bob):
    run = _run_with_changes(bob)

    page = admin_client.get(f"/admin/dataflow/flowrun/{run.pk}/change/").content.decode()

    assert "adf-schema-changes" in page and "/data/b.csv line 2 (byte 30)" in page and "rescue" in page


@pytest.mark.parametrize("policy", ["merge", "", 3])
def test_a_bad_policy_is_refused_naming_the_field(api, body, policy):
    body["format"]["on_schema_change"] = policy

    response = api.post("/api/flows/", body, format="json")

    assert response.status_code == 400
    assert list(response.json()) == ["format.on_schema_change"]
