"""Named connections through the API: alice and bob, two ordinary users with the flow
permissions, cannot reach each other's streams; staff manage connections."""

from __future__ import annotations

import socket

import pytest

from dataflow.models import Connection
from dataflow.redis_client import redis_url
from dataflow.services.connections import flow_connections_resolve
from source_support import addresses
from tests.dataflow.api.conftest import client_of
from tests.factories import ALL_FLOW_PERMS, ConnectionFactory, GroupFactory, UserFactory

pytestmark = pytest.mark.django_db


CONNECTION_PERMS = ("add_connection", "change_connection", "delete_connection", "view_connection")


def connection_staff():
    """A staff user who manages connections (the model permissions the admin asks for)."""
    return UserFactory(is_staff=True, perms=(*ALL_FLOW_PERMS, *CONNECTION_PERMS))


@pytest.fixture()
def loopback_allowed(settings):
    """The tests' Redis is on loopback: the deployment allows it on purpose here."""
    settings.DATAFLOW_ALLOWED_INTERNAL_ADDRESSES = ["127.0.0.1"]


def stream_flow(name: str, source: dict, sink: dict | None = None, **sink_fields) -> dict:
    return {
        "name": name,
        "source": {"type": "redis_streams", **source},
        "format": {"type": "fields", "schema": "id BIGINT, amount DOUBLE"},
        "transform": {"sql": "SELECT id, amount FROM source"},
        "sink": sink or {"type": "redis_stream", **sink_fields},
    }


def refused(response, field: str) -> str:
    assert response.status_code == 400, response.content
    assert field in response.json(), response.json()
    return response.json()[field][0]


@pytest.fixture()
def alices_flow(alice, loopback_allowed):
    """alice's flow "mine", made through the API over her connection alice-redis; returns
    the connection and her client."""
    mine = ConnectionFactory(name="alice-redis", key_patterns=["alice:*"], users=[alice])
    body = stream_flow(
        "mine", {"streams": "alice:in", "connection": mine.name}, key="alice:out", connection=mine.name
    )
    api = client_of(alice)
    assert api.post("/api/flows/", body, format="json").status_code == 201
    return mine, api


@pytest.mark.parametrize("streams", ["*", "bob:*", "bob:orders"])
def test_alice_cannot_read_streams_of_the_services_redis_without_a_connection(alice, streams):
    response = client_of(alice).post(
        "/api/flows/", stream_flow("steal", {"streams": streams}, key="alice:out"), format="json"
    )

    reason = refused(response, "source.connection")
    assert "is required" in reason


def test_alice_cannot_give_a_raw_url_even_to_the_services_redis(alice):
    body = stream_flow("steal", {"streams": "bob:*", "url": redis_url()}, key="alice:out")

    reason = refused(client_of(alice).post("/api/flows/", body, format="json"), "source.url")
    assert "only staff may give an address" in reason


def test_alice_cannot_write_to_bobs_stream_without_a_connection(alice, loopback_allowed):
    mine = ConnectionFactory(name="alice-redis", key_patterns=["alice:*"], users=[alice])
    body = stream_flow(
        "clobber", {"streams": "alice:in", "connection": mine.name}, key="bob:orders", maxlen=1
    )

    reason = refused(client_of(alice).post("/api/flows/", body, format="json"), "sink.connection")
    assert "is required" in reason


def test_alice_cannot_use_a_connection_granted_to_bob(alice, bob, loopback_allowed):
    bobs = ConnectionFactory(name="bob-redis", key_patterns=["bob:*"], users=[bob])
    body = stream_flow(
        "steal", {"streams": "bob:*", "connection": bobs.name}, key="bob:out", connection=bobs.name
    )

    reason = refused(client_of(alice).post("/api/flows/", body, format="json"), "source.connection")
    assert reason == "no connection named 'bob-redis' is granted to the flow's owner (see /api/connections/)"


@pytest.mark.parametrize("streams", ["*", "bob:*", "al*", "bob:orders", "[ab]*:orders"])
def test_alice_with_a_connection_for_alice_keys_cannot_reach_bobs_through_a_glob(
    alice, loopback_allowed, streams
):
    mine = ConnectionFactory(name="alice-redis", key_patterns=["alice:*"], users=[alice])
    body = stream_flow(
        "steal", {"streams": streams, "connection": mine.name}, key="alice:out", connection=mine.name
    )

    reason = refused(client_of(alice).post("/api/flows/", body, format="json"), "source.streams")
    assert "outside what connection 'alice-redis' allows (alice:*)" in reason


def test_alice_sink_key_outside_her_connections_patterns_is_refused(alice, loopback_allowed):
    mine = ConnectionFactory(name="alice-redis", key_patterns=["alice:*"], users=[alice])
    body = stream_flow(
        "clobber",
        {"streams": "alice:in", "connection": mine.name},
        key="bob:orders",
        maxlen=1,
        connection=mine.name,
    )

    refused(client_of(alice).post("/api/flows/", body, format="json"), "sink.key")


def test_alice_uses_a_connection_granted_to_her_group_inside_its_patterns(alice, loopback_allowed):
    team = GroupFactory(name="team-a")
    alice.groups.add(team)
    ConnectionFactory(name="team-redis", key_patterns=["alice:*"], groups=[team])
    body = stream_flow(
        "mine",
        {"streams": "alice:orders:*", "connection": "team-redis"},
        key="alice:out",
        connection="team-redis",
    )

    response = client_of(alice).post("/api/flows/", body, format="json")

    assert response.status_code == 201, response.content
    assert response.json()["source"]["connection"] == "team-redis"
    assert "url" not in response.json()["source"]


def test_a_revoked_grant_stops_the_start_naming_the_connection(alice, alices_flow):
    mine, api = alices_flow
    mine.users.remove(alice)

    reason = refused(api.post("/api/flows/mine/start/"), "source.connection")
    assert "no connection named 'alice-redis'" in reason


def test_a_deleted_connection_stops_the_start(alices_flow):
    _, api = alices_flow
    client_of(connection_staff()).delete("/api/connections/alice-redis/")

    refused(api.post("/api/flows/mine/start/"), "source.connection")


def test_alice_connection_to_an_internal_address_is_refused_without_connecting(alice):
    ConnectionFactory(name="inside", url="redis://10.0.0.1:6379/0", key_patterns=[], users=[alice])
    body = stream_flow("probe", {"streams": "x", "connection": "inside"}, key="y", connection="inside")

    reason = refused(client_of(alice).post("/api/flows/", body, format="json"), "source.connection")
    assert "10.0.0.1 is a private address" in reason


def test_the_services_redis_on_loopback_is_refused_to_alice_unless_allowed(alice):
    ConnectionFactory(name="alice-redis", key_patterns=["alice:*"], users=[alice])
    body = stream_flow(
        "mine", {"streams": "alice:in", "connection": "alice-redis"}, key="alice:o", connection="alice-redis"
    )

    reason = refused(client_of(alice).post("/api/flows/", body, format="json"), "source.connection")
    assert "127.0.0.1 is a loopback address" in reason


def test_staff_may_still_give_a_raw_url(db):
    staff = client_of(connection_staff())
    body = stream_flow("ops", {"streams": "ops:*", "url": redis_url()}, key="elsewhere:out")

    assert staff.post("/api/flows/", body, format="json").status_code == 201


# The connections endpoint.


def test_users_see_only_connections_granted_to_them_without_secrets(alice, bob):
    ConnectionFactory(name="alice-redis", key_patterns=["alice:*"], users=[alice], password="s3cret")
    ConnectionFactory(
        name="bob-redis", url="redis://:pw@10.9.9.9:6379/0", key_patterns=["bob:*"], users=[bob]
    )

    api = client_of(alice)

    listed = api.get("/api/connections/").json()["results"]

    assert [c["name"] for c in listed] == ["alice-redis"]
    assert listed[0]["has_password"] is True
    assert "s3cret" not in str(listed) and "password" not in listed[0]
    assert listed[0]["users"] == []  # who else holds it is staff's business
    assert api.get("/api/connections/bob-redis/").status_code == 404


def test_staff_see_every_connection_with_the_url_masked(bob):
    ConnectionFactory(
        name="bob-redis", url="redis://:pw@10.9.9.9:6379/0", key_patterns=["bob:*"], users=[bob]
    )

    shown = client_of(connection_staff()).get("/api/connections/bob-redis/").json()

    assert shown["url"] == "redis://:****@10.9.9.9:6379/0"
    assert shown["users"] == ["bob"]


@pytest.mark.parametrize("method", ["post", "put", "delete"])
def test_only_staff_may_write_connections(alice, method):
    ConnectionFactory(name="alice-redis", key_patterns=["alice:*"], users=[alice])
    url = "/api/connections/" if method == "post" else "/api/connections/alice-redis/"
    body = {"name": "mine", "type": "redis", "url": "redis://10.1.1.1:6379/0", "users": ["alice"]}

    response = getattr(client_of(alice), method)(url, body, format="json")

    assert response.status_code == 403
    assert Connection.objects.filter(name="alice-redis").exists()
    assert not Connection.objects.filter(name="mine").exists()


@pytest.mark.parametrize("method", ["post", "put", "delete"])
def test_view_only_staff_cannot_write_connections(alice, method):
    ConnectionFactory(name="alice-redis", key_patterns=["alice:*"], users=[alice])
    viewer = client_of(UserFactory(is_staff=True, perms=("view_dataflow", "view_connection")))
    url = "/api/connections/" if method == "post" else "/api/connections/alice-redis/"
    body = {"name": "alice-redis", "type": "redis", "url": "redis://10.1.1.1:6379/0", "users": ["alice"]}

    response = getattr(viewer, method)(url, body, format="json")

    assert response.status_code == 403
    assert Connection.objects.get(name="alice-redis").url != "redis://10.1.1.1:6379/0"


def test_staff_create_a_connection_and_a_masked_url_sent_back_keeps_the_stored_one(alice):
    staff = client_of(connection_staff())
    body = {
        "name": "orders-redis",
        "type": "redis",
        "url": "redis://:hunter2@10.1.1.1:6379/0",
        "key_patterns": ["orders:*"],
        "users": ["alice"],
    }

    created = staff.post("/api/connections/", body, format="json")
    assert created.status_code == 201, created.content
    assert "hunter2" not in created.content.decode()
    again = staff.put("/api/connections/orders-redis/", {**body, "url": created.json()["url"]}, format="json")

    assert again.status_code == 200, again.content
    assert Connection.objects.get(name="orders-redis").url == "redis://:hunter2@10.1.1.1:6379/0"


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"type": "ftp"}, "type"),
        ({"url": "http://10.1.1.1/"}, "url"),
        ({"name": "Not A Slug"}, "name"),
        ({"users": ["nobody"]}, "users"),
        ({"key_patterns": ["a\\*"]}, "key_patterns"),
    ],
)
def test_a_bad_connection_is_refused_naming_the_field(change, field):
    body = {"name": "c", "type": "redis", "url": "redis://10.1.1.1:6379/0", **change}

    refused(client_of(connection_staff()).post("/api/connections/", body, format="json"), field)


@pytest.fixture()
def spark_queue(settings):
    """The deployment's Spark tasks on a queue of their own, as in production."""
    settings.CELERY_TASK_ROUTES = {"dataflow.tasks.run_transform": {"queue": "spark"}}


@pytest.mark.parametrize(
    "patterns",
    [
        [],
        ["*"],
        ["adf:*"],
        ["adf*"],
        ["ad*"],
        ["celery*"],
        ["_kombu*"],
        ["_kombu.binding.x"],
        ["unacked*"],
        # Celery's queues: a stream sink on one turned the queue into a stream, killing the fleet.
        ["dataflow"],
        ["dataflow*"],
        ["data*"],
        ["d*"],
        ["dataflow.runflow.*"],
        ["spark"],
        ["s?ark"],
        ["team-a:*", "[d]ataflow"],
    ],
)
def test_a_connection_to_the_deployments_redis_cannot_reach_its_own_keys(patterns, spark_queue):
    body = {"name": "own", "type": "redis", "url": redis_url(), "key_patterns": patterns}

    reason = refused(
        client_of(connection_staff()).post("/api/connections/", body, format="json"), "key_patterns"
    )
    assert "deployment's own" in reason


@pytest.mark.parametrize("patterns", [["team-a:*"], ["dataflowx:*", "sparkles:*"], ["alice:orders:1"]])
def test_a_connection_to_the_deployments_redis_may_reach_keys_of_its_own(patterns, spark_queue):
    body = {"name": "own", "type": "redis", "url": redis_url(), "key_patterns": patterns}

    response = client_of(connection_staff()).post("/api/connections/", body, format="json")

    assert response.status_code == 201, response.content


def test_the_reserved_queue_names_follow_the_settings(settings):
    settings.CELERY_TASK_DEFAULT_QUEUE = "blue.dataflow"
    settings.CELERY_TASK_ROUTES = {"dataflow.tasks.run_transform": {"queue": "blue.spark"}}
    staff = client_of(connection_staff())

    for pattern in ("blue.dataflow", "blue.spark", "blue.dataflow.runflow.orders", "blue*"):
        body = {"name": "own", "type": "redis", "url": redis_url(), "key_patterns": [pattern]}
        assert "deployment's own" in refused(
            staff.post("/api/connections/", body, format="json"), "key_patterns"
        )
    body = {"name": "own", "type": "redis", "url": redis_url(), "key_patterns": ["spark"]}
    assert staff.post("/api/connections/", body, format="json").status_code == 201


def test_the_connector_catalog_offers_connection_as_an_option(alice):
    catalog = client_of(alice).get("/api/connectors/").json()

    source = next(s for s in catalog["sources"] if s["type"] == "redis_streams")
    sink = next(s for s in catalog["sinks"] if s["type"] == "redis_stream")
    assert "connection" in source["schema"]["properties"]
    assert "connection" in sink["schema"]["properties"]


@pytest.mark.slow
def test_the_openapi_schema_lists_the_connections_endpoint(alice):
    schema = client_of(alice).get("/api/schema/", {"format": "json"}).json()

    assert "/api/connections/" in schema["paths"]
    assert "/api/connections/{name}/" in schema["paths"]


def test_staff_editing_alices_flow_are_held_to_alices_rules(alices_flow):
    staff = client_of(connection_staff())

    response = staff.patch(
        "/api/flows/mine/",
        {"source": {"connection": None, "url": redis_url(), "streams": "*"}},
        format="json",
    )

    refused(response, "source.url")


class SwitchingResolver:
    """A DNS server whose answer the test changes (DNS rebinding); the tests may not
    query a real one."""

    def __init__(self, address: str):
        self.address = address

    def __call__(self, host, port, family=0, type=0, proto=0, flags=0):
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (self.address, port))]


def test_a_connection_whose_name_rebinds_to_loopback_stops_the_start(alice, monkeypatch):
    resolver = SwitchingResolver("93.184.216.34")
    monkeypatch.setattr(addresses, "getaddrinfo", resolver)
    ConnectionFactory(name="ext", url="redis://redis.example:6379/0", key_patterns=["alice:*"], users=[alice])
    body = stream_flow(
        "mine", {"streams": "alice:in", "connection": "ext"}, key="alice:out", connection="ext"
    )
    api = client_of(alice)
    assert api.post("/api/flows/", body, format="json").status_code == 201
    resolver.address = "127.0.0.1"

    reason = refused(api.post("/api/flows/mine/start/"), "source.connection")
    assert "redis.example (127.0.0.1) is a loopback address" in reason


def test_a_users_connection_connects_to_the_address_that_was_checked(alice, monkeypatch):
    monkeypatch.setattr(addresses, "getaddrinfo", SwitchingResolver("93.184.216.34"))
    ConnectionFactory(
        name="ext", url="redis://redis.example:6380/2", password="pw", key_patterns=["alice:*"], users=[alice]
    )

    targets = flow_connections_resolve(
        source_type="redis_streams",
        source_config={"connection": "ext", "streams": "alice:in"},
        sink_type="parquet",
        sink_config={"path": "out"},
        owner=alice,
    )

    assert targets["ext"].url == "redis://:pw@93.184.216.34:6380/2"
    assert targets["ext"].key_patterns == ("alice:*",)


def test_alice_cannot_point_a_schema_registry_at_an_internal_address(alice, loopback_allowed):
    # A format that fetches schemas reaches the network too: a registry URL is an address.
    mine = ConnectionFactory(name="alice-redis", key_patterns=["alice:*"], users=[alice])
    body = stream_flow(
        "metadata", {"streams": "alice:in", "connection": mine.name}, key="alice:out", connection=mine.name
    )
    body["format"] = {
        "type": "avro",
        "writer_schema": '{"type": "record", "name": "R", "fields": [{"name": "id", "type": "long"}]}',
        "registry_url": "http://169.254.169.254/latest/meta-data",
    }

    reason = refused(client_of(alice).post("/api/flows/", body, format="json"), "format.registry_url")

    assert "only staff may give an address" in reason
    staff = client_of(connection_staff())
    assert staff.post("/api/flows/", body, format="json").status_code == 201


class HostResolver:
    """A DNS server answering each host from a table (the tests may not query a real one)."""

    def __init__(self, answers: dict[str, str]):
        self.answers = answers

    def __call__(self, host, port, family=0, type=0, proto=0, flags=0):
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (self.answers.get(host, host), port))]


def nats_flow_of(connection: str) -> dict:
    return {
        "name": "mine",
        "source": {"type": "nats_jetstream", "connection": connection, "stream": "ORDERS"},
        "format": {"type": "json", "schema": "id BIGINT"},
        "sink": {"type": "parquet", "path": "out"},
    }


def test_every_server_of_a_list_is_checked_and_pinned(alice, monkeypatch):
    monkeypatch.setattr(
        addresses, "getaddrinfo", HostResolver({"a.example": "93.184.216.34", "b.example": "93.184.216.35"})
    )
    ConnectionFactory(
        name="nats-ext", type="nats", url="nats://a.example:4222,nats://b.example:4223", users=[alice]
    )

    targets = flow_connections_resolve(
        source_type="nats_jetstream",
        source_config={"connection": "nats-ext", "stream": "ORDERS"},
        sink_type="parquet",
        sink_config={"path": "out"},
        owner=alice,
    )

    assert targets["nats-ext"].url == "nats://93.184.216.34:4222,nats://93.184.216.35:4223"


def test_a_loopback_server_second_in_a_list_is_refused(alice, monkeypatch):
    monkeypatch.setattr(addresses, "getaddrinfo", HostResolver({"a.example": "93.184.216.34"}))
    ConnectionFactory(
        name="nats-ext", type="nats", url="nats://a.example:4222,nats://127.0.0.1:4222", users=[alice]
    )

    reason = refused(
        client_of(alice).post("/api/flows/", nats_flow_of("nats-ext"), format="json"), "source.connection"
    )
    assert "127.0.0.1 is a loopback address" in reason


def test_a_kafka_bootstrap_list_is_pinned_host_by_host_in_its_own_shape(alice, monkeypatch):
    monkeypatch.setattr(
        addresses, "getaddrinfo", HostResolver({"k1.example": "93.184.216.34", "k2.example": "93.184.216.35"})
    )
    ConnectionFactory(
        name="kafka-ext",
        type="kafka",
        url="kafka://k1.example:9092,k2.example:9093",
        key_patterns=["orders*"],
        users=[alice],
    )

    targets = flow_connections_resolve(
        source_type="kafka",
        source_config={"connection": "kafka-ext", "topics": ["orders"]},
        sink_type="parquet",
        sink_config={"path": "out"},
        owner=alice,
    )

    assert targets["kafka-ext"].url == "kafka://93.184.216.34:9092,93.184.216.35:9093"


def test_a_put_without_a_password_keeps_the_stored_one(loopback_allowed):
    staff = client_of(connection_staff())
    body = {"name": "team", "type": "redis", "url": "redis://10.1.1.1:6379/0", "key_patterns": ["team:*"]}
    assert staff.post("/api/connections/", {**body, "password": "s3cret"}, format="json").status_code == 201

    kept = staff.put("/api/connections/team/", {**body, "description": "renamed"}, format="json")

    assert kept.status_code == 200, kept.content
    assert kept.json()["has_password"] is True
    assert Connection.objects.get(name="team").password == "s3cret"
    cleared = staff.put("/api/connections/team/", {**body, "password": ""}, format="json")
    assert cleared.json()["has_password"] is False
