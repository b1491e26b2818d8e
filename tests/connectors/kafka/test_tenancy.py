"""The kafka source for users who are not staff, through the API: only named connections
granted to them, topics inside the connection's patterns; and the type listed where users
and staff pick one (the API's catalog, the admin's add form)."""

from __future__ import annotations

import pytest

from dataflow.models import Connection
from tests.dataflow.api.conftest import client_of
from tests.factories import ConnectionFactory

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def loopback_allowed(settings):
    settings.DATAFLOW_ALLOWED_INTERNAL_ADDRESSES = ["127.0.0.1"]


def kafka_connection(name: str, user, patterns: list[str]) -> Connection:
    return ConnectionFactory(
        name=name, type="kafka", url="kafka://127.0.0.1:9092", key_patterns=patterns, users=[user]
    )


def kafka_flow(name: str, source: dict) -> dict:
    return {
        "name": name,
        "source": {"type": "kafka", **source},
        "format": {"type": "json", "schema": "id BIGINT"},
        "transform": {"sql": "SELECT id FROM source"},
        "sink": {"type": "redis_stream", "key": "alice:out"},
    }


def refusal(response, field: str) -> str:
    assert response.status_code == 400, response.content
    assert field in response.json(), response.json()
    return response.json()[field][0]


def test_alice_cannot_name_bobs_kafka_connection(alice, bob):
    kafka_connection("bob-kafka", bob, ["bob.*"])
    body = kafka_flow("steal", {"connection": "bob-kafka", "topics": ["bob.orders"]})
    reason = refusal(client_of(alice).post("/api/flows/", body, format="json"), "source.connection")
    assert "no connection named 'bob-kafka' is granted" in reason


def test_a_topic_outside_the_connections_patterns_is_refused(alice):
    kafka_connection("alice-kafka", alice, ["alice.*"])
    body = kafka_flow("steal", {"connection": "alice-kafka", "topics": ["alice.orders", "bob.orders"]})
    reason = refusal(client_of(alice).post("/api/flows/", body, format="json"), "source.topics")
    assert "'bob.orders' may reach keys outside what connection 'alice-kafka' allows" in reason


def test_alice_cannot_type_brokers_herself(alice):
    body = kafka_flow("typed", {"bootstrap_servers": "kafka://127.0.0.1:9092", "topics": ["orders"]})
    reason = refusal(client_of(alice).post("/api/flows/", body, format="json"), "source.bootstrap_servers")
    assert "only staff may give an address" in reason


def test_a_connection_url_must_name_kafka_brokers():
    with pytest.raises(Exception, match="kafka://"):
        ConnectionFactory(name="bad", type="kafka", url="http://127.0.0.1:9092", key_patterns=[], users=[])


@pytest.mark.slow
def test_kafka_is_in_the_catalog_and_the_admin_form(admin_client):
    catalog = admin_client.get("/api/connectors/").json()
    kafka = {c["type"]: c for c in catalog["sources"]}["kafka"]
    assert kafka["schema"]["properties"]["bootstrap_servers"]["writeOnly"] is True
    assert {"topics", "topic_pattern", "start_offsets", "stop_offsets"} <= set(kafka["schema"]["properties"])
    page = admin_client.get("/admin/dataflow/dataflow/add/").content.decode()
    assert "source__kafka__bootstrap_servers" in page and "source__kafka__topic_pattern" in page
