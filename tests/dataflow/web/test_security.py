"""Pages of the web process: a strict Content-Security-Policy on each, and none of them
needs what it forbids (an inline script, an inline style, an event handler attribute);
a login without ?next= lands on the dashboard."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from dataflow.models import SplitStatus
from tests.factories import PASSWORD, DataFlowFactory, FlowRunFactory, SplitFactory, UserFactory

pytestmark = pytest.mark.django_db

#: What a strict policy blocks, as it would appear in a page.
INLINE = {
    "inline script": re.compile(r"<script(?![^>]*\bsrc=)(?![^>]*type=\"application/json\")[^>]*>", re.I),
    "inline style": re.compile(r"<style\b|\sstyle=", re.I),
    "event handler": re.compile(r"\son[a-z]+=\"", re.I),
}


@pytest.fixture()
def flow(dirs):
    owner = UserFactory(username="ada", is_staff=True, is_superuser=True)
    flow = DataFlowFactory(name="ada-orders", owner=owner)
    run = FlowRunFactory(flow=flow, running=True)
    SplitFactory(run=run, status=SplitStatus.ASSIGNED, position=50)
    return flow


@pytest.mark.parametrize(
    "path",
    [
        "/",
        "/flows/ada-orders/",
        "/login/",
        "/admin/",
        "/admin/dataflow/dataflow/",
        "/admin/dataflow/dataflow/{pk}/change/",
        "/admin/dataflow/flowrun/",
        "/api/docs/",
    ],
)
@pytest.mark.slow
def test_every_page_has_a_strict_policy_and_needs_nothing_it_forbids(client, flow, path):
    if path != "/login/":
        client.force_login(flow.owner)

    page = client.get(path.format(pk=flow.pk))

    assert page.status_code == 200
    policy = page["Content-Security-Policy"]
    assert "script-src 'self'" in policy and "style-src 'self'" in policy and "unsafe-inline" not in policy
    html = page.content.decode()
    for what, pattern in INLINE.items():
        found = pattern.search(html)
        assert found is None, f"{path}: {what} {html[found.start() : found.start() + 120]!r}"


def test_the_api_docs_start_up_script_is_a_file_of_its_own(client):
    docs = client.get("/api/docs/")
    script = re.findall(r'<script src="([^"]+)"', docs.content.decode())[-1]

    assert client.get(script).status_code == 200


def test_a_login_without_next_lands_on_the_dashboard():
    UserFactory(username="ada")
    client = Client()

    response = client.post("/login/", {"username": "ada", "password": PASSWORD})

    assert response.status_code == 302
    assert response["Location"] == "/"
