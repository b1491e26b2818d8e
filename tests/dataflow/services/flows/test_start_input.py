"""A run whose input does not fit (a schema that cannot be inferred, a header without a
schema column) is recorded as a failed run with the reason, and ``flowctl validate`` says
so before a run is tried. Real PostgreSQL; no worker is needed (the run never reads)."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import CommandError, call_command

from dataflow.models import FlowRun, FlowStatus, RunStatus
from dataflow.selectors.dashboard import flow_overview
from dataflow.selectors.flows import flow_runs
from dataflow.services.flows import flow_apply, flow_start
from source_support.errors import ConfigError
from tests.factories import DataFlowFactory
from tests.helpers import spec

pytestmark = pytest.mark.django_db


def json_flow(dirs, name="cars", **format_options):
    return DataFlowFactory(name=name, format={"type": "json", **format_options})


def test_an_inference_that_fails_is_a_failed_run_with_the_file_and_reason(dirs, admin_user):
    (dirs.data / "cars.json").write_text('{"Name": "chevelle", "Year": "1970-01-01"}\nthis is not JSON\n')
    flow = json_flow(dirs)

    with pytest.raises(ConfigError) as caught:
        flow_start(flow=flow)

    run = FlowRun.objects.get(flow=flow)
    assert run.status == RunStatus.FAILED and run.finished_at is not None
    assert run.message == f"the run could not start: {caught.value}"
    assert "format.schema: could not be inferred" in run.message
    assert "cars.json: line 2 is not valid JSON" in run.message
    flow.refresh_from_db()
    assert flow.status == FlowStatus.FAILED
    assert flow_runs(flow=flow)[0]["message"] == run.message
    row = next(r for r in flow_overview(user=admin_user) if r["name"] == "cars")
    assert row["run"]["id"] == run.pk and row["run"]["status"] == "failed"  # not "never run"


def test_a_failed_start_does_not_stop_the_next_run_once_the_file_is_fixed(dirs):
    path = dirs.data / "cars.json"
    path.write_text("[ {\n")
    flow = json_flow(dirs)
    with pytest.raises(ConfigError):
        flow_start(flow=flow)

    path.write_text('[{"Name": "chevelle", "Year": "1970-01-01"}]')
    run = flow_start(flow=flow)

    assert run.status == RunStatus.READING
    assert "`Name` STRING" in run.schema_ddl
    assert list(FlowRun.objects.filter(flow=flow).values_list("status", flat=True)) == ["reading", "failed"]


def test_flowctl_validate_reports_an_inference_that_fails(dirs):
    (dirs.data / "cars.json").write_text("no JSON here\n")
    json_flow(dirs)
    out = io.StringIO()

    with pytest.raises(CommandError, match="format.schema: could not be inferred"):
        call_command("flowctl", "validate", "cars", "--json", stdout=out)

    result = json.loads(out.getvalue())
    assert result["valid"] is False and result["field"] == "format.schema"
    assert "cars.json: line 1 is not valid JSON" in result["error"]
    assert not FlowRun.objects.exists()  # validating starts nothing


def test_flowctl_validate_reports_a_header_without_a_schema_column(dirs):
    (dirs.data / "a.csv").write_text("id,sensor\n1,a\n")
    DataFlowFactory(name="meters")

    with pytest.raises(
        CommandError, match="format.schema: does not fit .*a.csv: its header lacks the column temperature"
    ):
        call_command("flowctl", "validate", "meters", stdout=io.StringIO())


def test_headers_with_spaces_and_parentheses_work_in_schemas_and_sql(dirs):
    (dirs.data / "penguins.csv").write_text("Species,Culmen Length (mm)\nAdelie,39.1\nGentoo,NA\n")
    doc = spec("raw-penguins", str(dirs.data), str(dirs.out / "sink"))
    doc["format"] = {
        "type": "csv",
        "schema": "Species STRING, `Culmen Length (mm)` DOUBLE",
        "null_values": ["", "NA"],
    }
    doc["transform"] = {"sql": "SELECT Species, `Culmen Length (mm)` * 2 AS twice FROM source"}
    flow, _ = flow_apply(spec=doc)

    run = flow_start(flow=flow)

    assert run.schema_ddl == "`Species` STRING, `Culmen Length (mm)` DOUBLE"
