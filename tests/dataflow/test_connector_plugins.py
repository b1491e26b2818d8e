"""A connector shipped as a package of its own (tests/connector_package), installed with its
entry point, is offered wherever a flow is made: the API's catalog, the admin's form and
``applyflows``; a plugin that fails to load is reported by ``manage.py check``."""

from __future__ import annotations

import pytest
from django.core.management import call_command

from dataflow.checks import check_connector_plugins
from dataflow.models import DataFlow
from source_support.plugins import load_connectors

ADD_URL = "/admin/dataflow/dataflow/add/"
TOML = """
[flow]
name = "tiny"
[source]
type = "tiny_numbers"
count = 5
[format]
type = "tiny_json"
schema = "value BIGINT"
[transform]
sql = "SELECT value FROM source"
[sink]
type = "json"
path = "{out}/tiny"
"""


@pytest.fixture()
def tiny(connector_package):
    connector_package()
    assert load_connectors() == []


@pytest.mark.django_db
def test_the_api_catalog_lists_the_packages_source_and_format(tiny, admin_client):
    catalog = admin_client.get("/api/connectors/").json()

    sources = {entry["type"]: entry for entry in catalog["sources"]}
    formats = {entry["type"]: entry for entry in catalog["formats"]}
    assert sources["tiny_numbers"]["schema"]["properties"]["count"] == {
        "type": "integer",
        "description": "How many numbers, from 0.",
        "minimum": 1,
        "maximum": 1000,
        "example": 10,
    }
    assert sources["tiny_numbers"]["schema"]["required"] == ["type", "count"]
    assert "tiny_json" in formats


@pytest.mark.django_db
@pytest.mark.slow
def test_the_admin_form_offers_the_packages_source_with_its_options(tiny, admin_client):
    response = admin_client.get(ADD_URL)

    form = response.context["adminform"].form
    assert ("tiny_numbers", "tiny_numbers") in form.fields["source_type"].choices
    assert "source__tiny_numbers__count" in form.fields
    assert "Used when the source type is tiny_numbers." in response.content.decode()


@pytest.mark.django_db
def test_applyflows_creates_a_flow_of_the_packages_types(tiny, dirs, tmp_path, capsys):
    path = tmp_path / "tiny.toml"
    path.write_text(TOML.format(out=dirs.out))

    call_command("applyflows", str(path))

    assert capsys.readouterr().out.splitlines() == ["created flow tiny"]
    flow = DataFlow.objects.get(name="tiny")
    assert (flow.source_type, flow.source_config, flow.format_type) == (
        "tiny_numbers",
        {"count": 5},
        "tiny_json",
    )


def test_a_plugin_that_failed_is_a_system_check_warning_naming_its_entry_point(connector_package, capsys):
    connector_package({"tiny_broken": "tiny_connector:broken"})
    load_connectors()

    warnings = check_connector_plugins()
    call_command("check")

    assert [(w.id, w.msg) for w in warnings] == [
        (
            "dataflow.W101",
            "connector plugin tiny_broken = tiny_connector:broken failed to load: "
            "RuntimeError: the tiny connector's server library is missing",
        )
    ]
    assert "tiny_broken = tiny_connector:broken" in capsys.readouterr().err


def test_no_source_connector_at_all_is_a_system_check_warning(monkeypatch):
    # An image that left pyproject.toml out, and did not install the project, finds none.
    monkeypatch.setattr("dataflow.checks.SOURCES", {})

    assert [w.id for w in check_connector_plugins()] == ["dataflow.W102"]
