"""The kinesis source in the product: listed by GET /api/connectors/ and offered by the
admin's add form (its registration does both), saved from the API with its secret masked,
and held to a user's named aws connection (alice vs bob). Nothing here reads a stream."""

from __future__ import annotations

import pytest

from dataflow.models import DataFlow
from tests.dataflow.admin.conftest import ADD_URL, add_flow  # noqa: F401 (a fixture)
from tests.dataflow.api.conftest import client_of
from tests.factories import ALL_FLOW_PERMS, ConnectionFactory, UserFactory

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("dirs")]

ENDPOINT = "http://127.0.0.1:4566"


def kinesis_flow(name: str, source: dict) -> dict:
    return {
        "name": name,
        "source": {"type": "kinesis", "stream_name": "alice-orders", **source},
        "format": {"type": "json", "schema": "id BIGINT, amount DOUBLE"},
        "transform": {"sql": "SELECT id, amount FROM source"},
        "sink": {"type": "json", "path": "out/kinesis"},
    }


def refused(response, field: str) -> str:
    assert response.status_code == 400, response.content
    assert field in response.json(), response.json()
    return response.json()[field][0]


def aws_connection(name: str, user, patterns: list[str]):
    return ConnectionFactory(
        name=name, type="aws", url=f"http://KEYID:s3cret@{ENDPOINT[7:]}", key_patterns=patterns, users=[user]
    )


def test_the_catalog_lists_the_kinesis_source_with_its_schema():
    staff = UserFactory(is_staff=True, perms=ALL_FLOW_PERMS)
    catalog = client_of(staff).get("/api/connectors/").json()

    source = next(s for s in catalog["sources"] if s["type"] == "kinesis")
    assert {"connection", "endpoint_url", "region", "stream_name", "start", "start_timestamp"} <= set(
        source["schema"]["properties"]
    )
    assert source["schema"]["properties"]["start"]["enum"] == ["TRIM_HORIZON", "LATEST", "AT_TIMESTAMP"]


@pytest.mark.slow
def test_the_admin_offers_the_kinesis_source_and_saves_a_flow_with_its_secret_masked(admin_client, add_flow):  # noqa: F811
    page = admin_client.get(ADD_URL).content.decode()
    assert "adf-type-kinesis" in page
    assert '<label for="id_source__kinesis__stream_name">stream_name:</label>' in page

    response = add_flow(
        source_type="kinesis",
        source__kinesis__endpoint_url=ENDPOINT,
        source__kinesis__stream_name="orders",
        source__kinesis__access_key_id="KEYID",
        source__kinesis__secret_access_key="s3cret",
        format_type="jsonl",
    )

    assert response.status_code == 302, response.context["adminform"].form.errors
    flow = DataFlow.objects.get(name="admin-flow")
    assert flow.source_type == "kinesis" and flow.source_config["stream_name"] == "orders"
    assert "s3cret" not in admin_client.get(f"/admin/dataflow/dataflow/{flow.pk}/change/").content.decode()


def test_staff_save_a_kinesis_flow_from_the_api_and_see_the_secret_masked():
    staff = UserFactory(is_staff=True, perms=ALL_FLOW_PERMS)
    api = client_of(staff)
    body = kinesis_flow(
        "orders-kinesis", {"endpoint_url": ENDPOINT, "access_key_id": "KEYID", "secret_access_key": "s3cret"}
    )

    created = api.post("/api/flows/", body, format="json")

    assert created.status_code == 201, created.content
    shown = api.get("/api/flows/orders-kinesis/").json()
    assert shown["source"]["stream_name"] == "alice-orders"
    assert "s3cret" not in str(shown)


def test_alice_cannot_type_an_endpoint(alice):
    body = kinesis_flow("mine", {"endpoint_url": ENDPOINT})

    reason = refused(client_of(alice).post("/api/flows/", body, format="json"), "source.endpoint_url")
    assert "only staff may give an address" in reason


def test_alice_cannot_use_a_connection_granted_to_bob(alice, bob, settings):
    settings.DATAFLOW_ALLOWED_INTERNAL_ADDRESSES = ["127.0.0.1"]
    bobs = aws_connection("bob-aws", bob, ["bob-*"])

    reason = refused(
        client_of(alice).post(
            "/api/flows/",
            kinesis_flow("steal", {"connection": bobs.name, "stream_name": "bob-orders"}),
            format="json",
        ),
        "source.connection",
    )
    assert "no connection named 'bob-aws' is granted" in reason


def test_a_stream_outside_alices_connection_patterns_is_refused_naming_source_stream_name(alice, settings):
    settings.DATAFLOW_ALLOWED_INTERNAL_ADDRESSES = ["127.0.0.1"]
    mine = aws_connection("alice-aws", alice, ["alice-*"])
    api = client_of(alice)

    reason = refused(
        api.post(
            "/api/flows/",
            kinesis_flow("steal", {"connection": mine.name, "stream_name": "bob-orders"}),
            format="json",
        ),
        "source.stream_name",
    )
    assert "outside what connection 'alice-aws' allows" in reason
    created = api.post("/api/flows/", kinesis_flow("mine", {"connection": mine.name}), format="json")
    assert created.status_code == 201, created.content
