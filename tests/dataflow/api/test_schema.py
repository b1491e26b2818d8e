"""The OpenAPI schema: valid, with no generator warning, and what the API answers matches it
(schemathesis over every operation, as staff with a token)."""

from __future__ import annotations

import pytest
import schemathesis
from django.core.management import call_command
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error, response_schema_conformance

from dataflow.services.flows import flow_start
from tests.factories import ConnectionFactory, DeadLetterFactory, TokenFactory, UserFactory

pytestmark = pytest.mark.django_db

CHECKS = [not_a_server_error, response_schema_conformance]


@pytest.mark.slow
def test_the_schema_validates_without_warnings(tmp_path):
    # What CI runs; a view without a serializer or an untyped parameter fails it.
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(tmp_path / "schema.yml"))

    assert "/api/flows/{name}/start/" in (tmp_path / "schema.yml").read_text()


@pytest.fixture()
def staff_token(db) -> str:
    return TokenFactory(user=UserFactory(is_staff=True)).key


@pytest.fixture()
def api_schema(db, dirs):
    """The schema, loaded from the app itself, whose requests go to the app (WSGI). As
    Django's test client does, requests keep the test's database connection: closing it
    at the end of each request would end the test's transaction."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        yield schemathesis.openapi.from_wsgi("/api/schema/?format=json", get_wsgi_application())
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)


schema = schemathesis.pytest.from_fixture("api_schema")


@pytest.mark.slow
@schema.parametrize()
@settings(
    max_examples=10,
    deadline=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
)
def test_every_operation_answers_within_its_schema(case, staff_token):
    # There is no flow: actions on the generated names are 404s, so no run starts.
    case.call_and_validate(headers={"Authorization": f"Token {staff_token}"}, checks=CHECKS)


@pytest.mark.slow
def test_the_answers_about_real_objects_match_the_schema(api_schema, make_flow, staff_token):
    flow = make_flow("orders")
    run = flow_start(flow=flow)
    letter = DeadLetterFactory(run=run)
    ConnectionFactory(name=flow.name, url="redis://:pw@10.1.1.1:6379/0", key_patterns=["orders:*"])
    parameters = {"name": flow.name, "id": None}
    ids = {"/api/runs/{id}/": run.pk, "/api/dead-letters/{id}/": letter.pk}
    checked = []
    for operation in api_schema.get_all_operations():
        operation = operation.ok()
        if operation.method.upper() != "GET":
            continue
        path_parameters = {
            name: ids.get(operation.path, value)
            for name, value in parameters.items()
            if "{" + name + "}" in operation.path
        }
        case = operation.Case(path_parameters=path_parameters)
        response = case.call_and_validate(headers={"Authorization": f"Token {staff_token}"}, checks=CHECKS)
        assert response.status_code == 200, (operation.path, response.text[:300])
        checked.append(operation.path)

    assert len(checked) == 14  # every GET operation
