"""Who may write where: a user who is not staff reaches an s3:// sink only through an aws
connection granted to them, inside its key patterns; a local path needs none. Nothing here
contacts a store (the checks run when the flow is saved and when a run resolves it)."""

from __future__ import annotations

import pytest

from dataflow.services.connections import flow_connections_resolve
from dataflow.services.specs import _check_overlap
from source_support.errors import ConfigError
from tests.dataflow.api.conftest import client_of
from tests.dataflow.api.test_connections import refused
from tests.factories import ConnectionFactory, UserFactory
from tests.helpers import write_csv

pytestmark = pytest.mark.django_db


def _user_with_lake(name: str):
    """A user and an aws connection granted to them alone, limited to their bucket."""
    user = UserFactory(username=name)
    ConnectionFactory(
        name=f"{name}-s3",
        type="aws",
        url="http://127.0.0.1:9000",
        username=f"{name}-key",
        password=f"{name}-secret",
        key_patterns=[f"{name}-lake/*"],
        users=[user],
    )
    return user


@pytest.fixture()
def alice(settings):
    settings.DATAFLOW_ALLOWED_INTERNAL_ADDRESSES = ["127.0.0.1"]  # the endpoints here are loopback
    return _user_with_lake("alice")


@pytest.fixture()
def bob(alice):
    return _user_with_lake("bob")


@pytest.fixture()
def body(dirs) -> dict:
    """A flow over a small CSV under the allowed data root, into a local directory."""
    write_csv(dirs.data / "orders.csv", range(10))
    return {
        "name": "orders",
        "source": {"type": "files", "path": str(dirs.data / "orders.csv")},
        "format": {"type": "csv", "schema": "id BIGINT, sensor STRING, temperature DOUBLE"},
        "transform": {"sql": "SELECT id, sensor FROM source"},
        "sink": {"type": "parquet", "path": str(dirs.out / "orders")},
    }


def _post(api, body: dict, **sink) -> object:
    return api.post("/api/flows/", {**body, "sink": {"type": "parquet", **sink}}, format="json")


def test_alice_writes_her_bucket_through_her_connection(alice, body):
    response = _post(client_of(alice), body, path="s3://alice-lake/daily", connection="alice-s3")

    assert response.status_code == 201, response.content
    stored = response.json()["sink"]
    assert stored["path"] == "s3://alice-lake/daily" and stored["connection"] == "alice-s3"
    targets = flow_connections_resolve(
        source_type="files",
        source_config=body["source"],
        sink_type="parquet",
        sink_config=stored,
        owner=alice,
    )
    assert targets["alice-s3"].url == "http://alice-key:alice-secret@127.0.0.1:9000"
    assert targets["alice-s3"].key_patterns == ("alice-lake/*",)


def test_alice_cannot_use_bobs_connection(alice, bob, body):
    response = _post(client_of(alice), body, path="s3://bob-lake/daily", connection="bob-s3")

    assert "no connection named 'bob-s3'" in refused(response, "sink.connection")


def test_alice_cannot_reach_bobs_bucket_through_her_connection(alice, bob, body):
    response = _post(client_of(alice), body, path="s3://bob-lake/daily", connection="alice-s3")

    reason = refused(response, "sink.path")
    assert "outside what connection 'alice-s3' allows" in reason


def test_alice_cannot_type_an_endpoint_or_go_without_a_connection(alice, body):
    api = client_of(alice)
    typed = _post(api, body, path="s3://alice-lake/daily", endpoint_url="http://127.0.0.1:9000")
    assert "only staff may give an address" in refused(typed, "sink.endpoint_url")

    bare = _post(api, body, path="s3://alice-lake/daily")
    assert "is required" in refused(bare, "sink.connection")


def test_alice_still_writes_a_local_directory_without_a_connection(alice, body):
    response = _post(client_of(alice), body, path=body["sink"]["path"])

    assert response.status_code == 201, response.content
    assert "region" not in response.json()["sink"]
    flow_connections_resolve(
        source_type="files",
        source_config=body["source"],
        sink_type="parquet",
        sink_config=body["sink"],
        owner=alice,
    )


@pytest.mark.parametrize(
    ("sink", "overlaps"),
    [
        ("s3://events/2026", True),  # the sink holds the source's objects
        ("s3://events/2026/11/out", True),  # the source would read the sink's objects
        ("s3://events/20", False),
        ("s3://other/2026/11", False),
    ],
)
def test_an_s3_sink_must_not_overlap_an_object_source(sink, overlaps):
    source = {"bucket": "events", "prefix": "2026/11/"}
    if overlaps:
        with pytest.raises(ConfigError, match="must not overlap its source") as caught:
            _check_overlap(source, {"path": sink})
        assert caught.value.field == "sink.path"
    else:
        _check_overlap(source, {"path": sink})
