"""A flow exports as TOML and imports from TOML (pasted or uploaded) through the same
validation as ``manage.py applyflows``."""

from __future__ import annotations

import tomllib

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from dataflow.models import DataFlow
from dataflow.services.flows import flow_apply
from dataflow.services.specs import flow_spec_of, flow_spec_validate
from dataflow.services.toml_export import flow_toml, spec_toml
from tests.factories import DataFlowFactory

IMPORT_URL = "/admin/dataflow/dataflow/import/"


def _toml(dirs, name: str = "imported", source_path: str | None = None) -> str:
    (dirs.data / "in.csv").write_text("id,sensor,temperature\n1,a,1.0\n")
    return f"""
[flow]
name = "{name}"
parallelism = 3

[source]
type = "files"
path = "{source_path or dirs.data / "in.csv"}"

[format]
type = "csv"
schema = "id BIGINT, sensor STRING, temperature DOUBLE"

[transform]
sql = "SELECT * FROM source"

[sink]
type = "parquet"
path = "{dirs.out / name}"
"""


@pytest.mark.django_db
@pytest.mark.slow
def test_pasted_toml_creates_the_flow(admin_client, admin_user, dirs):
    response = admin_client.post(IMPORT_URL, {"toml": _toml(dirs)}, follow=True)

    flow = DataFlow.objects.get(name="imported")
    assert response.redirect_chain[-1][0] == f"/admin/dataflow/dataflow/{flow.pk}/change/"
    assert "Flow imported created from TOML." in [str(m) for m in response.context["messages"]]
    assert flow.parallelism == 3
    assert flow.owner == admin_user


@pytest.mark.django_db
def test_an_uploaded_toml_file_creates_the_flow(admin_client, dirs):
    upload = SimpleUploadedFile("imported.toml", _toml(dirs).encode(), content_type="application/toml")

    response = admin_client.post(IMPORT_URL, {"file": upload})

    assert response.status_code == 302
    assert DataFlow.objects.filter(name="imported").exists()


@pytest.mark.django_db
def test_an_import_is_refused_with_the_validators_message(admin_client, dirs):
    response = admin_client.post(IMPORT_URL, {"toml": _toml(dirs, source_path="/etc/passwd")})

    assert response.status_code == 200
    assert "source.path" in response.content.decode()
    assert "outside the allowed roots" in response.context["form"].non_field_errors()[0]
    assert not DataFlow.objects.exists()


@pytest.mark.django_db
def test_text_that_is_not_toml_is_refused(admin_client):
    response = admin_client.post(IMPORT_URL, {"toml": "[flow\nname = "})

    assert response.status_code == 200
    assert "not valid TOML" in response.context["form"].non_field_errors()[0]


@pytest.mark.django_db
def test_the_import_page_asks_for_toml_or_a_file(admin_client):
    page = admin_client.get(IMPORT_URL)
    empty = admin_client.post(IMPORT_URL, {"toml": "  "})

    assert page.status_code == 200
    assert '<label for="id_toml">TOML:</label>' in page.content.decode()
    assert "Paste a flow&#x27;s TOML or choose a file." in empty.content.decode()


@pytest.mark.django_db
def test_the_list_links_to_the_import(admin_client):
    page = admin_client.get("/admin/dataflow/dataflow/").content.decode()

    assert f'href="{IMPORT_URL}"' in page


@pytest.mark.django_db
@pytest.mark.slow
def test_export_downloads_toml_that_imports_back(admin_client, csv_flow):
    expected = flow_spec_validate(flow_spec_of(csv_flow))
    page = admin_client.get(f"/admin/dataflow/dataflow/{csv_flow.pk}/change/").content.decode()
    assert f'href="/admin/dataflow/dataflow/{csv_flow.pk}/export/"' in page

    response = admin_client.get(f"/admin/dataflow/dataflow/{csv_flow.pk}/export/")

    assert response.status_code == 200
    assert response["Content-Type"].startswith("application/toml")
    assert response["Content-Disposition"] == 'attachment; filename="csv-flow.toml"'
    exported = response.content.decode()
    csv_flow.delete()
    imported = admin_client.post(IMPORT_URL, {"file": SimpleUploadedFile("csv-flow.toml", exported.encode())})
    assert imported.status_code == 302
    assert flow_spec_validate(flow_spec_of(DataFlow.objects.get(name="csv-flow"))) == expected


@pytest.mark.django_db
def test_an_exported_flow_round_trips_through_the_validator(dirs):
    (dirs.data / "q.csv").write_text("id,sensor,temperature\n1,a,1.0\n")
    flow, _ = flow_apply(
        spec={
            "flow": {"name": "round-trip", "description": 'quotes " and \\ and\ttabs', "skip_errors": True},
            "source": {"type": "files", "path": str(dirs.data / "q.csv"), "split_size_mb": 0.5},
            "format": {
                "type": "csv",
                "schema": "id BIGINT, sensor STRING, temperature DOUBLE",
                "delimiter": ",",
                "null_values": ["", "NA", 'say "none"'],
                "date_format": "MMM d yyyy",
                "timestamp_format": "yyyy-MM-dd'T'HH:mm:ss.SSSXXX",
                "encoding": "latin-1",
                "comment": "#",
            },
            "transform": {"sql": 'SELECT id,\n       sensor\nFROM source\nWHERE sensor <> \'"""\''},
            "sink": {"type": "parquet", "path": str(dirs.out / "rt"), "partition_by": ["sensor"]},
            "schedule": {"cron": "*/15 * * * *", "timezone": "Europe/Paris"},
            "notify": {"webhook": "https://example.com/hook", "on": ["failed"]},
        }
    )

    parsed = tomllib.loads(flow_toml(flow=flow))

    assert flow_spec_validate(parsed) == flow_spec_validate(flow_spec_of(flow))


@pytest.mark.django_db
def test_an_exported_secret_is_masked_and_kept_when_imported_back(admin_client, dirs):
    flow = DataFlowFactory(stream=True, stream_url="redis://:s3cret@127.0.0.1:6379/7")

    exported = admin_client.get(f"/admin/dataflow/dataflow/{flow.pk}/export/").content.decode()
    assert "s3cret" not in exported
    admin_client.post(IMPORT_URL, {"toml": exported.replace("parallelism = 4", "parallelism = 2")})

    flow.refresh_from_db()
    assert flow.source_config["url"] == "redis://:s3cret@127.0.0.1:6379/7"
    assert flow.parallelism == 2


def test_toml_values_are_written_as_tomllib_reads_them():
    spec = {
        "t": {
            "text": 'line\u0001 "q" \\ \u00e9',
            "lines": 'a\r\nb """ c\n',
            "int": -3,
            "float": 1e-07,
            "whole_float": 2.0,
            "flag": False,
            "list": ["a", 1],
            "table": {"k": "v", "odd key": 1},
            "empty": {},
            "missing": None,
        }
    }

    parsed = tomllib.loads(spec_toml(spec))

    assert parsed == {"t": {k: v for k, v in spec["t"].items() if v is not None}}
    assert isinstance(parsed["t"]["whole_float"], float)
