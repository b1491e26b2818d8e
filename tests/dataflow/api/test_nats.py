"""The NATS JetStream source and the nats sink through the API: listed with their JSON
Schemas, saved with their secrets masked, and held to a user's named nats connection."""

from __future__ import annotations

import pytest

from tests.dataflow.api.conftest import client_of
from tests.factories import ALL_FLOW_PERMS, ConnectionFactory, UserFactory

pytestmark = pytest.mark.django_db

NATS_URL = "nats://127.0.0.1:4222"


def nats_flow(name: str, source: dict, sink: dict) -> dict:
    return {
        "name": name,
        "source": {"type": "nats_jetstream", "stream": "ORDERS", **source},
        "format": {"type": "json", "schema": "id BIGINT, amount DOUBLE"},
        "transform": {"sql": "SELECT id, amount FROM source"},
        "sink": {"type": "nats", **sink},
    }


def test_the_catalog_lists_the_nats_source_and_sink_with_their_schemas():
    staff = UserFactory(is_staff=True, perms=ALL_FLOW_PERMS)
    catalog = client_of(staff).get("/api/connectors/").json()

    source = next(s for s in catalog["sources"] if s["type"] == "nats_jetstream")
    sink = next(s for s in catalog["sinks"] if s["type"] == "nats")
    assert {"servers", "connection", "stream", "consumer", "subjects", "start", "metadata"} <= set(
        source["schema"]["properties"]
    )
    assert source["schema"]["properties"]["subjects"]["items"] == {"type": "string"}
    assert {"servers", "subject", "subject_column", "stream", "duplicate_window"} <= set(
        sink["schema"]["properties"]
    )
    assert any(f["type"] == "raw" for f in catalog["formats"])


def test_staff_save_a_nats_flow_and_see_its_password_masked():
    staff = UserFactory(is_staff=True, perms=ALL_FLOW_PERMS)
    api = client_of(staff)
    servers = "nats://app:s3cret@127.0.0.1:4222"
    body = nats_flow("orders-nats", {"servers": servers}, {"servers": servers, "subject": "orders.copy"})

    created = api.post("/api/flows/", body, format="json")

    assert created.status_code == 201, created.content
    shown = api.get("/api/flows/orders-nats/").json()
    assert shown["source"]["servers"] == "nats://app:****@127.0.0.1:4222"
    assert "s3cret" not in str(shown)


def test_a_user_who_gives_servers_instead_of_a_connection_is_refused_naming_source_servers():
    alice = UserFactory(username="alice")
    body = nats_flow("mine", {"servers": NATS_URL}, {"servers": NATS_URL, "subject": "alice.out"})

    response = client_of(alice).post("/api/flows/", body, format="json")

    assert response.status_code == 400
    assert "only staff may give an address" in response.json()["source.servers"][0]


def test_subject_filters_outside_the_users_connection_are_refused_naming_source_subjects(settings):
    settings.DATAFLOW_ALLOWED_INTERNAL_ADDRESSES = ["127.0.0.1"]
    alice = UserFactory(username="alice")
    mine = ConnectionFactory(
        name="alice-nats", type="nats", url=NATS_URL, key_patterns=["alice.*"], users=[alice]
    )
    body = nats_flow(
        "steal",
        {"connection": mine.name, "subjects": ["alice.in", "bob.>"]},
        {"connection": mine.name, "subject": "alice.out"},
    )

    response = client_of(alice).post("/api/flows/", body, format="json")

    assert response.status_code == 400
    assert (
        "'bob.>' may reach keys outside what connection 'alice-nats' allows"
        in response.json()["source.subjects"][0]
    )
