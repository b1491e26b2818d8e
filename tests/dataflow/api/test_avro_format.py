"""The avro format through the REST API: listed with its JSON Schema, accepted for files,
and its options refused by name."""

from __future__ import annotations

import pytest

from dataflow.models import DataFlow

pytestmark = pytest.mark.django_db


def test_the_catalog_lists_avro_with_its_options(api):
    catalog = api.get("/api/connectors/").json()

    avro = next(f for f in catalog["formats"] if f["type"] == "avro")
    assert set(avro["schema"]["properties"]) == {"type", "schema", "writer_schema", "registry_url", "field"}
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
