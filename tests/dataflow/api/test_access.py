"""Who may see and change what: logins, ownership, model permissions, CSRF, throttling."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from dataflow.models import DataFlow, FlowRun, RunStatus
from tests.dataflow.api.conftest import client_of
from tests.factories import PASSWORD, DeadLetterFactory, FlowRunFactory, UserFactory

pytestmark = pytest.mark.django_db

#: Every endpoint of one flow named orders, its run 1 and dead letter 1: (method, path).
FLOW_ENDPOINTS = [
    ("get", "/api/flows/"),
    ("post", "/api/flows/"),
    ("post", "/api/flows/validate/"),
    ("get", "/api/flows/orders/"),
    ("put", "/api/flows/orders/"),
    ("patch", "/api/flows/orders/"),
    ("delete", "/api/flows/orders/"),
    ("post", "/api/flows/orders/start/"),
    ("post", "/api/flows/orders/stop/"),
    ("post", "/api/flows/orders/pause/"),
    ("post", "/api/flows/orders/resume/"),
    ("post", "/api/flows/orders/restart/"),
    ("post", "/api/flows/orders/restore/"),
    ("get", "/api/flows/orders/status/"),
    ("get", "/api/flows/orders/metrics/"),
    ("get", "/api/flows/orders/runs/"),
    ("get", "/api/flows/orders/dead-letters/"),
    ("post", "/api/flows/orders/dead-letters/discard/"),
    ("post", "/api/flows/orders/dead-letters/replay/"),
    ("get", "/api/flows/orders/offsets/"),
    ("patch", "/api/flows/orders/offsets/"),
    ("post", "/api/flows/orders/offsets/reset/"),
    ("get", "/api/flows/orders/checkpoints/"),
    ("get", "/api/runs/1/"),
    ("get", "/api/dead-letters/1/"),
    ("delete", "/api/dead-letters/1/"),
    ("get", "/api/connectors/"),
]
#: The endpoints of someone's flow that another user must not find.
OTHERS_FLOW = [(m, p) for m, p in FLOW_ENDPOINTS if "orders" in p]


@pytest.mark.parametrize(("method", "path"), FLOW_ENDPOINTS)
def test_anonymous_requests_are_401_with_a_token_challenge(anonymous, method, path):
    response = getattr(anonymous, method)(path, {}, format="json")

    assert response.status_code == 401
    assert response["WWW-Authenticate"] == "Token"
    assert response.json() == {"detail": "Authentication credentials were not provided."}


def test_a_wrong_token_is_401(anonymous):
    anonymous.credentials(HTTP_AUTHORIZATION="Token not-a-key")

    response = anonymous.get("/api/flows/")

    assert response.status_code == 401
    assert response.json()["detail"] == "Invalid token."


@pytest.mark.slow
def test_the_schema_and_the_docs_need_no_login(anonymous):
    schema = anonymous.get("/api/schema/")
    docs = anonymous.get("/api/docs/")

    assert schema.status_code == 200
    assert b"/api/flows/{name}/start/" in schema.content
    assert docs.status_code == 200
    # The UI's files are the sidecar's, served by this deployment (no CDN).
    assert b"/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js" in docs.content
    assert b"cdn" not in docs.content.lower()


NOT_FOUND_DETAILS = {
    "no flow named 'orders'",
    "No FlowRun matches the given query.",
    "No DeadLetter matches the given query.",
}


@pytest.fixture()
def orders(make_flow):
    flow = make_flow("orders")
    run = FlowRunFactory(flow=flow, pk=1)
    DeadLetterFactory(run=run, pk=1)
    return flow


@pytest.mark.parametrize(("method", "path"), OTHERS_FLOW)
def test_another_users_flow_is_not_found(other_api, orders, method, path):
    response = getattr(other_api, method)(path, {}, format="json")

    assert response.status_code == 404
    # What a name or id that does not exist gets: nothing says the flow is there.
    assert response.json()["detail"] in NOT_FOUND_DETAILS
    assert DataFlow.objects.filter(name="orders").exists()


def test_another_user_lists_none_of_the_flows_of_others(other_api, orders):
    assert other_api.get("/api/flows/").json()["count"] == 0


@pytest.mark.parametrize(
    "path", ["/api/flows/orders/", "/api/flows/orders/runs/", "/api/runs/1/", "/api/dead-letters/1/"]
)
def test_staff_see_every_flow_its_runs_and_dead_letters(staff_api, orders, path):
    assert staff_api.get(path).status_code == 200


def test_staff_list_every_flow(staff_api, orders, make_flow):
    make_flow("mine", owner=UserFactory())

    assert staff_api.get("/api/flows/").json()["count"] == 2


def test_the_owner_sees_the_flow_its_runs_and_dead_letters(api, orders):
    assert api.get("/api/flows/orders/").json()["name"] == "orders"
    assert [r["id"] for r in api.get("/api/flows/orders/runs/").json()["results"]] == [1]
    assert api.get("/api/runs/1/").json()["flow"] == "orders"
    assert api.get("/api/dead-letters/1/").json()["run"] == 1


def test_creating_needs_the_add_permission(body):
    client = client_of(UserFactory(perms=["change_dataflow", "delete_dataflow"]))

    response = client.post("/api/flows/", body, format="json")

    assert response.status_code == 403
    assert response.json()["detail"] == "You do not have permission to perform this action."
    assert not DataFlow.objects.exists()


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("put", "/api/flows/orders/"),
        ("patch", "/api/flows/orders/"),
        ("post", "/api/flows/orders/start/"),
        ("post", "/api/flows/orders/stop/"),
        ("post", "/api/flows/orders/restart/"),
        ("patch", "/api/flows/orders/offsets/"),
        ("post", "/api/flows/orders/dead-letters/discard/"),
        ("delete", "/api/dead-letters/1/"),
    ],
)
def test_changing_or_acting_needs_the_change_permission(make_flow, method, path):
    user = UserFactory(perms=["add_dataflow", "delete_dataflow"])
    flow = make_flow("orders", owner=user)
    DeadLetterFactory(run=FlowRunFactory(flow=flow, pk=1), pk=1)

    response = getattr(client_of(user), method)(path, {"parallelism": 1}, format="json")

    assert response.status_code == 403
    assert not FlowRun.objects.filter(status=RunStatus.READING).exists()


def test_deleting_needs_the_delete_permission(make_flow):
    user = UserFactory(perms=["add_dataflow", "change_dataflow"])
    make_flow("orders", owner=user)

    response = client_of(user).delete("/api/flows/orders/")

    assert response.status_code == 403
    assert DataFlow.objects.filter(name="orders").exists()


def test_reading_needs_no_model_permission(make_flow):
    user = UserFactory(perms=[])
    make_flow("orders", owner=user)

    assert client_of(user).get("/api/flows/orders/status/").status_code == 200


def test_a_flow_created_through_the_api_is_owned_by_its_creator(body):
    user = UserFactory()

    client_of(user).post("/api/flows/", body, format="json")

    assert DataFlow.objects.get(name="orders").owner == user


def test_a_session_login_must_send_the_csrf_token(owner, body):
    client = APIClient(enforce_csrf_checks=True)
    client.force_login(owner)

    assert client.get("/api/flows/").status_code == 200  # reads need no CSRF token
    response = client.post("/api/flows/", body, format="json")

    assert response.status_code == 403
    assert "CSRF" in response.json()["detail"]
    assert not DataFlow.objects.exists()


@pytest.mark.slow
def test_writes_beyond_the_rate_are_throttled_and_reads_are_not(api, flow, settings):
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": {"api-write": "3/min"}}

    statuses = [
        api.patch(f"/api/flows/{flow.name}/", {"parallelism": 2}, format="json").status_code for _ in range(4)
    ]

    assert statuses == [200, 200, 200, 429]
    assert api.get(f"/api/flows/{flow.name}/").status_code == 200


def test_a_token_from_the_command_opens_the_api(owner, flow):
    call_command("drf_create_token", owner.username)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.get(user=owner).key}")

    assert client.get("/api/flows/").json()["count"] == 1


def test_a_token_for_a_username_and_password(anonymous, owner):
    response = anonymous.post(
        "/api/auth/token/", {"username": owner.username, "password": PASSWORD}, format="json"
    )
    wrong = anonymous.post(
        "/api/auth/token/", {"username": owner.username, "password": "nope"}, format="json"
    )

    assert response.status_code == 200
    assert response.json()["token"] == Token.objects.get(user=owner).key
    assert wrong.status_code == 400
