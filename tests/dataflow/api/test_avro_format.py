"""The avro format through the REST API: listed with its JSON Schema, accepted for files,
and its options refused by name."""

from __future__ import annotations

import pytest

from dataflow.models import DataFlow

pytestmark = pytest.mark.django_db


def test_the_catalog_lists_avro_with_its_options(api):
    catalog = api.get("/api/connectors/").json()

    avro = next(f for f in catalog["formats"] if f["type"] == "avro")
    assert set(avro["schema"]["properties"]) == {
        "type",
        "schema",
        "writer_schema",
        "registry_url",
        "field",
        "on_schema_change",
    }
    assert "container files" in avro["description"]


def test_a_files_flow_in_avro_is_created(api, body, dirs):
    response = api.post("/api/flows/", {**body, "format": {"type": "avro"}}, format="json")

    assert response.status_code == 201, response.json()
    assert DataFlow.objects.get(name="orders").format_type == "avro"


def test_a_writer_schema_outside_the_roots_is_refused_by_name(api, body, tmp_path):
    (tmp_path / "reading.avsc").write_text('{"type": "record", "name": "R", "fields": []}')
    fmt = {"type": "avro", "writer_schema": str(tmp_path / "reading.avsc")}

    response = api.post("/api/flows/", {**body, "format": fmt}, format="json")

    assert response.status_code == 400
    assert list(response.json()) == ["format.writer_schema"]
    assert "outside the allowed roots" in response.json()["format.writer_schema"][0]


def test_on_schema_change_for_avro_messages_is_refused_naming_why(staff_api, body):
    writer = '{"type": "record", "name": "R", "fields": [{"name": "id", "type": "long"}]}'
    stream = {
        **body,
        "source": {"type": "redis_streams", "streams": "t-avro:*"},
        "format": {"type": "avro", "writer_schema": writer, "on_schema_change": "rescue"},
    }

    response = staff_api.post("/api/flows/", stream, format="json")
    files = staff_api.post(
        "/api/flows/", {**body, "format": {"type": "avro", "on_schema_change": "rescue"}}, format="json"
    )

    assert response.status_code == 400, response.json()
    assert list(response.json()) == ["format.on_schema_change"]
    assert (
        "every message of a stream is read with writer_schema"
        in response.json()["format.on_schema_change"][0]
    )
    assert files.status_code == 201, files.json()
