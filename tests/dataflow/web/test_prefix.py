"""Under a project's prefix (``path("flows/", include("dataflow.urls"))``, its admin at
``backoffice/``), every link, redirect, static reference, login URL and API URL the app
makes is under that prefix: none is written as a path from the root."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from rest_framework.test import APIClient

from tests.factories import PASSWORD, DataFlowFactory, UserFactory

pytestmark = [pytest.mark.django_db, pytest.mark.urls("tests.dataflow.web.prefixed_urls")]

APP = Path(__file__).resolve().parents[3] / "dataflow"
#: A path from the root in a template or a script: href="/...", src="/...", fetch("/...").
ROOTED = re.compile(r"""(?:href|src|action|url|fetch\()\s*=?\s*\(?["'](/[a-z])""", re.I)


def test_no_template_or_script_of_the_app_writes_a_path_from_the_root():
    files = [*(APP / "templates").rglob("*.html"), *(APP / "static" / "dataflow").rglob("*.js")]
    rooted = {
        str(path.relative_to(APP)): ROOTED.findall(path.read_text())
        for path in files
        if "vendor" not in path.parts and ROOTED.search(path.read_text())
    }

    assert rooted == {}


def test_the_dashboard_sends_an_anonymous_user_to_its_login_under_the_prefix(client):
    response = client.get("/flows/")

    assert (response.status_code, response["Location"]) == (302, "/flows/login/?next=/flows/")


def test_a_login_without_next_goes_to_the_dashboard_under_the_prefix(client, settings):
    settings.LOGIN_REDIRECT_URL = "/accounts/profile/"  # the project's own, for its own pages
    UserFactory(username="ada")

    response = client.post("/flows/login/", {"username": "ada", "password": PASSWORD})

    assert (response.status_code, response["Location"]) == (302, "/flows/")


def test_the_dashboards_links_are_under_the_prefix_and_the_projects_admin(client):
    staff = UserFactory(username="root")
    staff.is_staff = True
    staff.save()
    DataFlowFactory(name="meters", owner=staff)
    client.force_login(staff)

    page = client.get("/flows/").content.decode()
    flow_page = client.get("/flows/flows/meters/").content.decode()

    for link in (
        'href="/flows/flows/meters/"',
        'data-live-url="/flows/live.json"',
        'href="/backoffice/"',
        'href="/flows/favicon.ico"',
        'action="/flows/logout/"',
    ):
        assert link in page, link
    assert 'data-live-url="/flows/flows/meters/live.json"' in flow_page
    assert 'href="/backoffice/dataflow/dataflow/' in flow_page


def test_the_apis_urls_and_its_docs_are_under_the_prefix():
    owner = UserFactory(username="ada")
    DataFlowFactory(name="meters", owner=owner)
    api = APIClient()
    api.force_authenticate(owner)

    flow = api.get("/flows/api/flows/meters/").json()
    missing = api.get("/flows/api/nowhere/").json()
    docs = APIClient().get("/flows/api/docs/").content.decode()

    assert flow["url"] == "http://testserver/flows/api/flows/meters/"
    assert (
        missing["detail"]
        == "no endpoint at /flows/api/nowhere/; the endpoints are listed at /flows/api/docs/"
    )
    assert 'src="/flows/api/docs/?script="' in docs
