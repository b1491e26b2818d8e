"""Preview and test connection through the API, for two ordinary tenants: alice previews
and tests only what she may read (her flows, her granted connections, her paths)."""

from __future__ import annotations

import pytest

from dataflow.redis_client import redis_url
from tests.dataflow.api.conftest import client_of
from tests.factories import ConnectionFactory, DataFlowFactory, UserFactory
from tests.helpers import write_csv

pytestmark = [pytest.mark.django_db, pytest.mark.slow]


@pytest.fixture()
def bobs_flow(dirs, bob):
    path = dirs.data / "bob.csv"
    write_csv(path, range(5))
    return DataFlowFactory(name="bobs", owner=bob, source_path=str(path))


def test_alice_previews_her_own_flow_but_not_bobs(dirs, alice, bob, bobs_flow):
    path = dirs.data / "alice.csv"
    write_csv(path, range(4))
    DataFlowFactory(name="alices", owner=alice, source_path=str(path), sql="SELECT id * 10 AS x FROM source")
    api = client_of(alice)

    mine = api.post("/api/flows/alices/preview/", {"limit": 3}, format="json")
    bobs = api.post("/api/flows/bobs/preview/", {}, format="json")

    assert mine.status_code == 200, mine.content
    assert [r["id"] for r in mine.json()["records"]] == [0, 1, 2]
    assert mine.json()["output"]["rows"] == [{"x": 0}, {"x": 10}, {"x": 20}]
    assert bobs.status_code == 404
    assert bobs.json() == {"detail": "no flow named 'bobs'"}


def test_alice_cannot_preview_a_spec_that_reads_bobs_output_or_an_ungranted_connection(
    dirs, alice, bob, bobs_flow
):
    api = client_of(alice)
    spec = {
        "name": "peek",
        "source": {"type": "files", "path": bobs_flow.sink_config["path"] + "/*"},
        "transform": {"sql": "SELECT * FROM source"},
        "sink": {"type": "parquet", "path": str(dirs.out / "peek")},
    }
    connection = ConnectionFactory(key_patterns=["t-bob-*"], users=[bob])
    stream_spec = {
        "name": "peek2",
        "source": {"type": "redis_streams", "connection": connection.name, "streams": "t-bob-*"},
        "format": {"type": "fields", "schema": "id BIGINT"},
        "transform": {"sql": "SELECT * FROM source"},
        "sink": {"type": "parquet", "path": str(dirs.out / "peek2")},
    }

    paths = api.post("/api/flows/preview/", spec, format="json")
    streams = api.post("/api/flows/preview/", stream_spec, format="json")

    assert paths.status_code == 400 and "source.path" in paths.json()
    assert streams.status_code == 400
    assert streams.json()["source.connection"] == [
        f"no connection named {connection.name!r} is granted to the flow's owner (see /api/connections/)"
    ]


def test_alice_tests_her_granted_connection_but_not_bobs(alice, bob, rds, prefix, settings):
    settings.DATAFLOW_ALLOWED_INTERNAL_ADDRESSES = ["127.0.0.1"]
    rds.xadd(f"{prefix}a", {"n": 1})
    hers = ConnectionFactory(key_patterns=[f"{prefix}*"], users=[alice])
    his = ConnectionFactory(key_patterns=["t-bob-*"], users=[bob])
    api = client_of(alice)

    mine = api.post(f"/api/connections/{hers.name}/test/", {}, format="json")
    not_mine = api.post(f"/api/connections/{his.name}/test/", {}, format="json")
    through_connector = api.post(
        "/api/connectors/redis_streams/test/", {"connection": his.name, "streams": "t-bob-*"}, format="json"
    )

    assert mine.status_code == 200, mine.content
    assert mine.json()["ok"] and mine.json()["found"][1:] == [
        f"1 streams match {prefix}*",
        f"{prefix}a: 1 entries",
    ]
    assert not_mine.status_code == 404
    assert through_connector.status_code == 400 and "source.connection" in through_connector.json()


def test_staff_who_may_only_view_connections_cannot_test_one_through_the_api(rds, prefix, settings):
    # The admin's button refuses them (tests/dataflow/admin/test_test_connection.py): the API
    # holds them to the same rule, as the service decides it (connection_test_refusal).
    settings.DATAFLOW_ALLOWED_INTERNAL_ADDRESSES = ["127.0.0.1"]
    connection = ConnectionFactory(key_patterns=[f"{prefix}*"])
    viewer = UserFactory(username="viewer", is_staff=True, perms=("view_connection", "view_dataflow"))
    editor = UserFactory(username="editor", is_staff=True, perms=("view_connection", "change_connection"))

    refused = client_of(viewer).post(f"/api/connections/{connection.name}/test/", {}, format="json")
    tested = client_of(editor).post(f"/api/connections/{connection.name}/test/", {}, format="json")

    assert refused.status_code == 403
    assert refused.json() == {
        "detail": f"you may view connection {connection.name!r} but not change it, so you may not test it"
    }
    assert tested.status_code == 200 and tested.json()["ok"], tested.content


def test_alice_may_not_give_an_address_to_a_connector_test(alice):
    response = client_of(alice).post(
        "/api/connectors/redis_streams/test/", {"url": redis_url(), "streams": "x:*"}, format="json"
    )

    assert response.status_code == 400
    assert "only staff may give an address" in response.json()["source.url"][0]


def test_a_connector_test_of_files_says_what_matched(dirs, alice):
    write_csv(dirs.data / "a.csv", range(3))

    response = client_of(alice).post(
        "/api/connectors/files/test/", {"path": str(dirs.data / "*.csv")}, format="json"
    )

    assert response.status_code == 200, response.content
    assert response.json()["found"][0].startswith("1 files matched")


def test_an_unknown_connector_type_is_a_404_and_a_bad_limit_a_400(dirs, alice):
    api = client_of(alice)
    write_csv(dirs.data / "a.csv", range(3))
    spec = {
        "name": "p",
        "source": {"type": "files", "path": str(dirs.data / "a.csv")},
        "transform": {"sql": "SELECT * FROM source"},
        "sink": {"type": "parquet", "path": str(dirs.out / "p")},
        "limit": 10**6,
    }

    assert api.post("/api/connectors/nope/test/", {}, format="json").status_code == 404
    refused = api.post("/api/flows/preview/", spec, format="json")
    assert refused.status_code == 400 and "limit" in refused.json()
