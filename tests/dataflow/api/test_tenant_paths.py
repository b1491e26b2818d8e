"""Every byte a flow reads or writes belongs to its owner: a flow may not write into the
directories another user's flow reads or writes, nor read another user's flow's output.
The rule lives in ``flow_spec_validate``, so the API, the admin, TOML and a start hold it."""

from __future__ import annotations

import pytest

from dataflow.models import DataFlow
from dataflow.services.flows import flow_apply, flow_start
from source_support.errors import ConfigError
from tests.dataflow.api.conftest import client_of
from tests.factories import ConnectionFactory, DataFlowFactory, UserFactory
from tests.helpers import spec, write_csv

pytestmark = pytest.mark.django_db


@pytest.fixture()
def alice(db):
    return UserFactory(username="alice")


@pytest.fixture()
def bob(db):
    return UserFactory(username="bob")


@pytest.fixture()
def bobs_flow(dirs, bob):
    """Bob's flow: data/bob/*.csv -> out/bob-flow, with a result already written."""
    (dirs.data / "bob").mkdir()
    write_csv(dirs.data / "bob" / "b.csv", range(5))
    (dirs.out / "bob-flow").mkdir()
    (dirs.out / "bob-flow" / "part-0.csv").write_text("id\n1\n")
    return DataFlowFactory(name="bob-flow", owner=bob, source_path=str(dirs.data / "bob" / "*.csv"))


@pytest.fixture()
def alices_input(dirs):
    (dirs.data / "alice").mkdir()
    write_csv(dirs.data / "alice" / "a.csv", range(5))
    return str(dirs.data / "alice" / "*.csv")


def body(name: str, source_path: str, sink_path: str) -> dict:
    doc = spec(name, source_path, sink_path)
    return {**doc.pop("flow"), **doc}


def refused(response, field: str) -> str:
    assert response.status_code == 400, response.content
    errors = response.json()
    assert field in errors, errors
    return " ".join(errors[field])


@pytest.mark.parametrize("sink", ["bob-flow", "bob-flow/sub", "link-to-bobs"])
def test_alice_cannot_write_her_sink_into_bobs_sink_directory(dirs, alice, bobs_flow, alices_input, sink):
    (dirs.out / "link-to-bobs").symlink_to(dirs.out / "bob-flow")

    response = client_of(alice).post(
        "/api/flows/", body("alice-steal", alices_input, str(dirs.out / sink)), format="json"
    )

    assert "path not allowed" in refused(response, "sink.path")
    assert not DataFlow.objects.filter(name="alice-steal").exists()


def test_alice_cannot_read_bobs_output_as_her_source(dirs, alice, bobs_flow):
    response = client_of(alice).post(
        "/api/flows/",
        body("alice-read", str(dirs.out / "bob-flow" / "*.csv"), str(dirs.out / "alice-read")),
        format="json",
    )

    assert "path not allowed" in refused(response, "source.path")


def test_alice_cannot_write_into_bobs_source_directory(dirs, alice, bobs_flow, alices_input):
    response = client_of(alice).post(
        "/api/flows/validate/", body("alice-x", alices_input, str(dirs.data / "bob")), format="json"
    )

    assert "path not allowed" in refused(response, "sink.path")


def test_alice_cannot_patch_her_flow_onto_bobs_sink(dirs, alice, bobs_flow, alices_input):
    DataFlowFactory(name="alice-flow", owner=alice, source_path=alices_input)

    response = client_of(alice).patch(
        "/api/flows/alice-flow/", {"sink": {"path": str(dirs.out / "bob-flow")}}, format="json"
    )

    refused(response, "sink.path")
    assert DataFlow.objects.get(name="alice-flow").sink_config["path"] == str(dirs.out / "alice-flow")


def test_the_operator_cannot_apply_alices_flow_onto_bobs_sink(dirs, alice, bobs_flow, alices_input):
    """``applyflows`` as the operator holds an existing flow to its owner's rules."""
    DataFlowFactory(name="alice-flow", owner=alice, source_path=alices_input)

    with pytest.raises(ConfigError) as caught:
        flow_apply(spec=spec("alice-flow", alices_input, str(dirs.out / "bob-flow")))

    assert caught.value.field == "sink.path"


def test_a_flow_made_before_the_rule_is_refused_at_start(dirs, alice, bobs_flow, alices_input):
    flow = DataFlowFactory(name="alice-flow", owner=alice, source_path=alices_input)
    DataFlow.objects.filter(pk=flow.pk).update(sink_config={"path": str(dirs.out / "bob-flow")})
    flow.refresh_from_db()

    with pytest.raises(ConfigError) as caught:
        flow_start(flow=flow)

    assert caught.value.field == "sink.path"
    assert (dirs.out / "bob-flow" / "part-0.csv").read_text() == "id\n1\n"


def test_alice_may_chain_her_own_flows(dirs, alice, alices_input):
    DataFlowFactory(name="alice-first", owner=alice, source_path=alices_input)

    response = client_of(alice).post(
        "/api/flows/",
        body("alice-second", str(dirs.out / "alice-first" / "*.parquet"), str(dirs.out / "alice-second")),
        format="json",
    )

    assert response.status_code == 201, response.content


def test_alices_source_glob_over_the_output_root_does_not_block_bobs_sink(dirs, alice, bob):
    """``out/*.csv`` reads files directly in out/, not bob's results in out/bob-flow: bob
    is not refused his sink because alice came first with a broad glob."""
    (dirs.out / "top.csv").write_text("id,sensor,temperature\n1,a,1.0\n")
    DataFlowFactory(
        name="alice-top",
        owner=alice,
        source_path=str(dirs.out / "*.csv"),
        sink_path=str(dirs.data / "alice-top"),
    )
    (dirs.data / "b.csv").write_text("id,sensor,temperature\n1,a,1.0\n")

    response = client_of(bob).post(
        "/api/flows/", body("bob-flow", str(dirs.data / "b.csv"), str(dirs.out / "bob-flow")), format="json"
    )

    assert response.status_code == 201, response.content


@pytest.mark.parametrize("pattern", ["**/*.csv", "*/*.csv", "bob-*/*"])
def test_alices_glob_that_reaches_bobs_output_is_refused(dirs, alice, bobs_flow, pattern):
    response = client_of(alice).post(
        "/api/flows/validate/",
        body("alice-read", str(dirs.out / pattern), str(dirs.data / "alice-read")),
        format="json",
    )

    assert "path not allowed" in refused(response, "source.path")


def test_alice_cannot_read_bobs_output_as_an_avro_writer_schema(dirs, alice, bobs_flow, settings):
    # A writer_schema given as a path is a file the flow reads: bob's output is not hers,
    # and the error on a file that is no schema quotes none of what the file holds.
    result = dirs.out / "bob-flow" / "result.json"
    result.write_text('{"type": "secret-value-of-bob"}')
    settings.DATAFLOW_ALLOWED_INTERNAL_ADDRESSES = ["127.0.0.1"]
    mine = ConnectionFactory(name="alice-redis", key_patterns=["alice:*"], users=[alice])
    doc = {
        "name": "peek",
        "source": {"type": "redis_streams", "streams": "alice:*", "connection": mine.name},
        "format": {"type": "avro", "writer_schema": str(result)},
        "transform": {"sql": "SELECT * FROM source"},
        "sink": {"type": "json", "path": str(dirs.out / "alice-peek")},
    }
    api = client_of(alice)

    reason = refused(api.post("/api/flows/", doc, format="json"), "format.writer_schema")
    assert "secret-value-of-bob" not in reason

    result.write_text('{"type": "record", "name": "R", "fields": [{"name": "id", "type": "long"}]}')
    reason = refused(api.post("/api/flows/", doc, format="json"), "format.writer_schema")
    assert "path not allowed" in reason


# Issue 25, 2.7: a deleted flow's output kept in place stays its owner's.


def _delete(api, name: str, query: str = ""):
    response = api.delete(f"/api/flows/{name}/{query}")
    assert response.status_code == 204, response.content
    assert not DataFlow.objects.filter(name=name).exists()


@pytest.mark.slow
def test_a_deleted_flows_output_stays_its_owners(dirs, alice, bob, bobs_flow, alices_input):
    alice_api, bob_api = client_of(alice), client_of(bob)
    _delete(bob_api, "bob-flow")

    assert (dirs.out / "bob-flow" / "part-0.csv").exists()  # kept, as bob asked nothing else
    read = alice_api.post(
        "/api/flows/",
        body("alice-read", str(dirs.out / "bob-flow" / "*.csv"), str(dirs.out / "alice-read")),
        format="json",
    )
    assert "path not allowed" in refused(read, "source.path")
    write = alice_api.post(
        "/api/flows/", body("alice-write", alices_input, str(dirs.out / "bob-flow")), format="json"
    )
    assert "path not allowed" in refused(write, "sink.path")
    # Bob still may: the output is his.
    again = bob_api.post(
        "/api/flows/",
        body("bob-again", str(dirs.out / "bob-flow" / "*.csv"), str(dirs.out / "bob-again")),
        format="json",
    )
    assert again.status_code == 201, again.content


def test_a_flow_deleted_with_its_output_leaves_the_path_free(dirs, alice, bob, bobs_flow, alices_input):
    (dirs.out / ".bob-flow.previous-x-1").mkdir()  # what an attempt left beside the sink

    _delete(client_of(bob), "bob-flow", "?delete_output=true")

    assert not (dirs.out / "bob-flow").exists()
    assert not (dirs.out / ".bob-flow.previous-x-1").exists()
    assert (dirs.data / "bob" / "b.csv").exists()  # the source is not the output
    response = client_of(alice).post(
        "/api/flows/", body("alice-write", alices_input, str(dirs.out / "bob-flow")), format="json"
    )
    assert response.status_code == 201, response.content


def test_delete_output_is_refused_for_a_sink_that_is_no_directory(dirs, bob, bobs_flow):
    DataFlow.objects.filter(pk=bobs_flow.pk).update(sink_config={"path": "s3://bucket/out"})

    response = client_of(bob).delete("/api/flows/bob-flow/?delete_output=true")

    assert "only such an output can be deleted" in refused(response, "delete_output")
    assert DataFlow.objects.filter(name="bob-flow").exists()  # nothing deleted


def test_a_path_refused_says_only_that_it_is_not_allowed(dirs, alice, bobs_flow, alices_input):
    response = client_of(alice).post(
        "/api/flows/validate/", body("alice-flow", alices_input, str(dirs.out / "bob-flow")), format="json"
    )

    reason = refused(response, "sink.path")
    assert "path not allowed" in reason
    assert (
        "user" not in reason
        and "sink directory" not in reason
        and "bob" not in reason.replace(str(dirs.out / "bob-flow"), "")
    )


def test_bobs_file_as_an_avro_writer_schema_is_refused_before_it_is_parsed(dirs, alice, bobs_flow, settings):
    # Not JSON: a parser's "Extra data: line 2 column 1 (char 49)" would tell how the file begins.
    (dirs.out / "bob-flow" / "part-1.json").write_text('{"id": 1, "card": "4111-1111"}\n{"id": 2}\n')
    settings.DATAFLOW_ALLOWED_INTERNAL_ADDRESSES = ["127.0.0.1"]
    mine = ConnectionFactory(name="alice-redis", key_patterns=["alice:*"], users=[alice])
    doc = {
        "name": "peek",
        "source": {"type": "redis_streams", "streams": "alice:*", "connection": mine.name},
        "format": {"type": "avro", "writer_schema": str(dirs.out / "bob-flow" / "part-1.json")},
        "transform": {"sql": "SELECT * FROM source"},
        "sink": {"type": "json", "path": str(dirs.out / "alice-peek")},
    }

    api = client_of(alice)
    for url in ("/api/flows/", "/api/flows/validate/"):
        reason = refused(api.post(url, doc, format="json"), "format.writer_schema")
        assert "path not allowed" in reason
        assert "Extra data" not in reason and "line 2" not in reason


def test_a_file_that_is_not_json_as_a_writer_schema_does_not_quote_the_parser(dirs, alice):
    schema_file = dirs.data / "not-a-schema.json"
    schema_file.write_text('{"id": 1}\n{"id": 2}\n')
    settings_free = {"type": "avro", "writer_schema": str(schema_file)}
    with pytest.raises(ConfigError) as refused_error:
        flow_apply(
            spec={
                "flow": {"name": "schema-file"},
                "source": {"type": "files", "path": str(dirs.data / "*.avro")},
                "format": settings_free,
                "transform": {"sql": "SELECT * FROM source"},
                "sink": {"type": "parquet", "path": str(dirs.out / "schema-file")},
            },
            owner=alice,
        )

    assert refused_error.value.field == "format.writer_schema"
    assert "is not JSON" in str(refused_error.value) and "Extra data" not in str(refused_error.value)
