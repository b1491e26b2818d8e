"""Secrets in the admin: a webhook's token (its query, its user part) is masked on the flow's
page and in its TOML export as the API masks it, also for staff who may only view."""

from __future__ import annotations

import tomllib

import pytest
from django.test import Client

from dataflow.models import DataFlow
from dataflow.services.specs import flow_spec_of
from dataflow.services.toml_export import flow_toml
from dataflow.services.toml_import import flow_import
from tests.dataflow.admin.conftest import browser_post
from tests.dataflow.admin.test_permissions import _client_of, _permissions
from tests.factories import DataFlowFactory

pytestmark = pytest.mark.django_db

WEBHOOK = "https://bob:pw@hooks.example.com/flows?token=s3cret"
MASKED = "https://***@hooks.example.com/flows?***"


@pytest.fixture()
def hooked(dirs) -> DataFlow:
    return DataFlowFactory(name="hooked", notify={"webhook": WEBHOOK, "on": ["failed"]})


@pytest.fixture()
def viewer() -> Client:
    return _client_of("viewer", _permissions("view_"), is_staff=True)


def test_view_only_staff_see_the_webhook_masked_on_the_flow_page(hooked, viewer):
    page = viewer.get(f"/admin/dataflow/dataflow/{hooked.pk}/change/")

    assert page.status_code == 200
    assert "s3cret" not in page.content.decode() and "pw@" not in page.content.decode()
    assert "flows?***" in page.content.decode()


def test_view_only_staff_get_the_webhook_masked_in_the_toml_export(hooked, viewer):
    exported = viewer.get(f"/admin/dataflow/dataflow/{hooked.pk}/export/")

    assert exported.status_code == 200
    assert tomllib.loads(exported.content.decode())["notify"]["webhook"] == MASKED


def test_an_exported_flow_imports_back_over_itself_keeping_its_webhook(hooked):
    flow_import(spec=tomllib.loads(flow_toml(flow=hooked)))

    assert flow_spec_of(DataFlow.objects.get(name="hooked"))["notify"]["webhook"] == WEBHOOK


def test_the_admin_form_shows_the_webhook_masked_and_keeps_it_when_sent_back(hooked, admin_client):
    url = f"/admin/dataflow/dataflow/{hooked.pk}/change/"
    page = admin_client.get(url)
    assert page.context["adminform"].form["notify_webhook"].value() == MASKED

    saved = admin_client.post(url, browser_post(page, description="changed"))

    assert saved.status_code == 302, saved.context["adminform"].form.errors
    hooked.refresh_from_db()
    assert (hooked.description, hooked.notify["webhook"]) == ("changed", WEBHOOK)
