"""``manage.py flowctl``: steering, status, runs, validate and export, as a shell user sees them.

The steering services themselves run end to end in tests/dataflow/services/flows/test_actions.py;
here the command is checked on the rows they leave, without a worker.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tomllib

import pytest
from django.core.management import CommandError, call_command

from dataflow.models import DataFlow, FlowRun, RunStatus, SinkPathClaim, Split, SplitStatus
from dataflow.services.flows import flow_apply, flow_stop
from dataflow.services.specs import flow_spec_of
from tests.e2e.fleet import ROOT, fleet_env
from tests.factories import ConnectionFactory, DataFlowFactory, DeadLetterFactory, FlowRunFactory, UserFactory
from tests.helpers import SCHEMA, spec, write_csv

pytestmark = pytest.mark.django_db


def _flowctl(*args: str) -> str:
    out = io.StringIO()
    call_command("flowctl", *args, stdout=out)
    return out.getvalue()


def _json(*args: str):
    return json.loads(_flowctl(*args, "--json"))


@pytest.fixture()
def flow(dirs) -> DataFlow:
    write_csv(dirs.data / "a.csv", range(10))
    return DataFlowFactory(name="meters")


def test_start_pause_status_resume_and_stop_steer_the_flow(flow):
    run_id = _json("start", "meters")["run"]

    assert _json("pause", "meters") == {"flow": "meters", "run": run_id, "status": "paused"}
    status = _json("status", "meters")
    assert (status["status"], status["run"]["id"], status["run"]["paused"]) == ("paused", run_id, True)
    assert f"run: {run_id} reading, paused (trigger manual" in _flowctl("status", "meters")
    with pytest.raises(CommandError, match="paused already"):
        _flowctl("pause", "meters")

    assert _json("resume", "meters")["status"] == "reading"
    assert _json("status", "meters")["status"] == "running"
    assert _json("stop", "meters") == {"flow": "meters", "run": run_id, "status": "stopped"}
    assert _json("status", "meters")["run"]["status"] == "stopped"


def test_runs_lists_the_flows_runs_newest_first(flow):
    first = _json("start", "meters")["run"]
    flow_stop(flow=flow)
    second = _json("restart", "meters")["run"]

    runs = _json("runs", "meters")

    assert [(r["id"], r["status"], r["trigger"]) for r in runs] == [
        (second, "reading", "manual"),
        (first, "stopped", "manual"),
    ]
    assert {"records_read", "rows_written", "errors_count", "started_at", "duration_s"} <= set(runs[0])
    header, *rows = _flowctl("runs", "meters").splitlines()
    assert header.split() == [
        "id",
        "status",
        "trigger",
        "records_read",
        "rows_written",
        "errors_count",
        "started_at",
        "duration_s",
    ]
    assert [row.split()[:3] for row in rows] == [
        [str(second), "reading", "manual"],
        [str(first), "stopped", "manual"],
    ]


def test_dead_letters_lists_bad_records_and_dropped_rows_oldest_first(flow):
    run = FlowRunFactory(flow=flow)
    bad = DeadLetterFactory(run=run)
    dropped = DeadLetterFactory(
        run=run, expectation="has a customer", raw='{"order_id":4}', offset="", line=None
    )
    DeadLetterFactory(run=FlowRunFactory(flow=DataFlowFactory(name="other")))  # another flow's

    letters = _json("dead-letters", "meters")

    assert [(d["id"], d["run"], d["expectation"]) for d in letters] == [
        (bad.pk, run.pk, ""),
        (dropped.pk, run.pk, "has a customer"),
    ]
    assert [d["id"] for d in _json("dead-letters", "meters", "--limit", "1")] == [bad.pk]
    header, *rows = _flowctl("dead-letters", "meters").splitlines()
    assert header.split() == ["id", "run", "expectation", "offset", "line", "error", "raw"]
    assert rows[1].split()[:5] == [str(dropped.pk), str(run.pk), "has", "a", "customer"]


def test_restart_of_a_running_flow_starts_a_new_run(flow):
    first = _json("start", "meters")["run"]

    second = _json("restart", "meters")

    assert second["run"] != first and second["status"] == "reading"
    assert FlowRun.objects.get(pk=first).status == RunStatus.STOPPED


def test_restart_only_failed_reads_the_failed_splits_of_the_latest_run_again(flow, dirs):
    run_id = _json("start", "meters")["run"]
    run = FlowRun.objects.get(pk=run_id)
    path = str(dirs.data / "a.csv")
    payload = {"path": path, "start": 0, "end": os.path.getsize(path), "position": 0, "compressed": False}
    failed = Split.objects.create(
        run=run, split_id=f"{path}@0", payload=payload, position=40, status=SplitStatus.FAILED, error="bad"
    )
    FlowRun.objects.filter(pk=run_id).update(status=RunStatus.FAILED, message="split failed: line 3: bad")

    restarted = _json("restart", "meters", "--only-failed")

    assert restarted == {"flow": "meters", "run": run_id, "status": "reading", "only_failed": True}
    failed.refresh_from_db()
    assert (failed.status, failed.error, failed.position) == (SplitStatus.ASSIGNED, "", 40)
    with pytest.raises(CommandError, match="no failed split to restart"):
        _flowctl("restart", "meters", "--only-failed")


def test_a_flow_that_does_not_exist_is_named(db):
    with pytest.raises(CommandError, match="no flow named 'nope'"):
        _flowctl("status", "nope")


# validate and export


def _tricky_spec(dirs) -> dict:
    """A spec whose values need TOML's escapes: quotes, backslashes, tabs, line breaks,
    non-ASCII text, a list, floats-free ints, booleans and optional tables."""
    doc = spec("round-trip", str(dirs.data), str(dirs.out / "sink"), skip_errors=True, max_errors=7)
    doc["flow"]["description"] = 'Temperatures "raw" \\ per sensor — °C\n\tsecond line'
    doc["format"] = {"type": "csv", "schema": SCHEMA, "delimiter": ";", "quote": "'"}
    doc["transform"] = {
        "sql": 'SELECT id,\n       upper(sensor) AS sensor\nFROM source\nWHERE sensor <> "a\\"b"',
        "trigger_ms": 2000,
    }
    doc["sink"]["partition_by"] = ["sensor"]
    doc["schedule"] = {"every": "15 minutes"}
    doc["notify"] = {"webhook": "https://hooks.example.com/flows?x=1&y=2", "on": ["failed"]}
    return doc


def test_export_prints_toml_that_applyflows_takes_back_as_the_same_spec(dirs, tmp_path):
    flow, _ = flow_apply(spec=_tricky_spec(dirs))
    exported = flow_spec_of(flow)

    text = _flowctl("export", "round-trip", "--reveal-secrets")  # the webhook's query is a secret
    assert _json("export", "round-trip", "--reveal-secrets")["toml"].rstrip() == text.rstrip()
    (tmp_path / "round-trip.toml").write_text(text)
    DataFlow.objects.all().delete()
    call_command("applyflows", str(tmp_path / "round-trip.toml"), stdout=io.StringIO())

    assert flow_spec_of(DataFlow.objects.get(name="round-trip")) == exported
    assert tomllib.loads(text)["flow"]["description"] == exported["flow"]["description"]


def test_export_writes_paths_under_the_base_dir_relative_so_it_applies_in_another_checkout(
    dirs, tmp_path_factory, settings
):
    elsewhere = tmp_path_factory.mktemp("shared-exports")  # an allowed root outside the base
    settings.DATAFLOW_ALLOWED_ROOTS = [*settings.DATAFLOW_ALLOWED_ROOTS, elsewhere]
    (dirs.data / "orders").mkdir()
    write_csv(dirs.data / "orders" / "a.csv", range(10))
    DataFlowFactory(
        name="orders", source_path=str(dirs.data / "orders" / "*.csv"), sink_path=str(dirs.out / "orders")
    )
    DataFlowFactory(name="shared", sink_path=str(elsewhere / "shared"))

    text = _flowctl("export", "orders")
    assert tomllib.loads(text)["source"]["path"] == "data/orders/*.csv"
    assert tomllib.loads(text)["sink"]["path"] == "out/orders"
    assert tomllib.loads(_flowctl("export", "shared"))["sink"]["path"] == str(elsewhere / "shared")

    # Another checkout: its own base directory, roots and database.
    other = tmp_path_factory.mktemp("other-checkout")
    for name in ("data", "out"):
        (other / name).mkdir()
    settings.DATAFLOW_BASE_DIR = other
    settings.DATAFLOW_ALLOWED_ROOTS = [other / "data", other / "out"]
    DataFlow.objects.all().delete()
    (other / "orders.toml").write_text(text)
    call_command("applyflows", str(other / "orders.toml"), stdout=io.StringIO())

    moved = DataFlow.objects.get(name="orders")
    assert moved.source_config["path"] == str(other / "data" / "orders" / "*.csv")
    assert moved.sink_config["path"] == str(other / "out" / "orders")


def test_an_export_with_masked_secrets_applied_back_keeps_the_stored_secret(dirs, tmp_path, prefix):
    url = "redis://:s3cret@127.0.0.1:6379/6"
    flow = DataFlowFactory(
        name="orders",
        stream=True,
        streams=f"{prefix}orders:*",
        stream_url=url,
        schema="id BIGINT",
        sql="SELECT id FROM source",
    )
    text = _flowctl("export", "orders")
    assert "s3cret" not in text and "redis://:****@127.0.0.1:6379/6" in text
    assert "s3cret" in _flowctl("export", "orders", "--reveal-secrets")
    (tmp_path / "orders.toml").write_text(text)

    call_command("applyflows", str(tmp_path / "orders.toml"), stdout=io.StringIO())

    flow.refresh_from_db()
    assert flow.source_config["url"] == url


def test_an_export_of_a_users_flow_names_its_connection_and_applies_back(dirs, tmp_path, settings):
    settings.DATAFLOW_ALLOWED_INTERNAL_ADDRESSES = ["127.0.0.1"]
    alice = UserFactory(username="alice")
    ConnectionFactory(name="orders-redis", password="s3cret", key_patterns=["alice:*"], users=[alice])
    doc = {
        "flow": {"name": "alices"},
        "source": {"type": "redis_streams", "streams": "alice:orders:*", "connection": "orders-redis"},
        "format": {"type": "fields", "schema": "id BIGINT"},
        "transform": {"sql": "SELECT id FROM source"},
        "sink": {"type": "redis_stream", "key": "alice:out", "connection": "orders-redis"},
    }
    flow, _ = flow_apply(spec=doc, owner=alice)
    text = _flowctl("export", "alices")
    assert 'connection = "orders-redis"' in text
    assert "s3cret" not in _flowctl("export", "alices", "--reveal-secrets")  # never resolved into a flow
    (tmp_path / "alices.toml").write_text(text)

    call_command("applyflows", str(tmp_path / "alices.toml"), stdout=io.StringIO())

    flow.refresh_from_db()
    assert (flow.owner, flow.source_config["connection"], flow.sink_config["connection"]) == (
        alice,
        "orders-redis",
        "orders-redis",
    )


def test_validate_says_ok_for_a_valid_file_and_a_stored_flow(dirs, tmp_path, flow):
    path = tmp_path / "meters.toml"
    path.write_text(_flowctl("export", "meters"))

    assert _flowctl("validate", str(path)).strip() == f"OK: {path} (flow meters)"
    assert _json("validate", "meters") == {"valid": True, "source": "meters", "flow": "meters"}


def test_validate_names_the_field_of_an_invalid_file(tmp_path, flow):
    path = tmp_path / "bad.toml"
    path.write_text(_flowctl("export", "meters").replace("parallelism = 4", "parallelism = 0"))
    out = io.StringIO()

    with pytest.raises(CommandError, match=r"flow.parallelism: must be between 1 and 256"):
        call_command("flowctl", "validate", str(path), "--json", stdout=out)
    assert json.loads(out.getvalue()) == {
        "valid": False,
        "source": str(path),
        "field": "flow.parallelism",
        "error": "must be between 1 and 256",
    }
    with pytest.raises(CommandError, match=r"toml: not valid TOML"):
        path.write_text("[flow\n")
        _flowctl("validate", str(path))
    with pytest.raises(CommandError, match=r"file: .*nope.toml: No such file"):
        _flowctl("validate", str(tmp_path / "nope.toml"))


@pytest.mark.slow  # over 5 s on 2 cores: not in the fast lane
def test_validate_exits_non_zero_on_an_invalid_file_only(dirs, tmp_path, flow):
    good, bad = tmp_path / "good.toml", tmp_path / "bad.toml"
    good.write_text(_flowctl("export", "meters"))
    bad.write_text(good.read_text().replace('type = "parquet"', 'type = "excel"'))

    def validate(path):
        return subprocess.run(
            [sys.executable, "manage.py", "flowctl", "validate", str(path)],
            cwd=ROOT,
            env=fleet_env(),
            capture_output=True,
            text=True,
            timeout=120,
        )

    ok, refused = validate(good), validate(bad)

    assert (ok.returncode, ok.stdout.strip()) == (0, f"OK: {good} (flow meters)"), ok.stderr
    assert refused.returncode == 1
    assert "sink.type" in refused.stderr and "excel" in refused.stderr


def test_delete_keeps_the_output_as_the_owners_unless_told_to_delete_it(dirs):
    # Issue 25, 2.7: the user chooses, as through the API and the admin.
    owner = UserFactory(username="meg")
    kept = DataFlowFactory(name="kept", owner=owner)
    gone = DataFlowFactory(name="gone", owner=owner)
    for flow in (kept, gone):
        (dirs.out / flow.name).mkdir()
        (dirs.out / flow.name / "part-0.csv").write_text("id\n1\n")

    assert _json("delete", "kept") == {"flow": "kept", "deleted": True, "output_deleted": False}
    assert _json("delete", "gone", "--delete-output")["output_deleted"] is True

    assert (dirs.out / "kept" / "part-0.csv").exists()
    assert not (dirs.out / "gone").exists()
    assert list(SinkPathClaim.objects.values_list("path", "owner__username", "flow_name")) == [
        (str((dirs.out / "kept").resolve()), "meg", "kept")
    ]
    assert not DataFlow.objects.filter(name__in=["kept", "gone"]).exists()


def test_export_masks_a_webhooks_token_under_its_header_saying_secrets_are_masked(dirs):
    doc = spec("hooked", str(dirs.data), str(dirs.out / "sink"))
    doc["notify"] = {"webhook": "https://bob:pw@hooks.example.com/flows?token=s3cret", "on": ["failed"]}
    flow_apply(spec=doc)

    text = _flowctl("export", "hooked")

    assert "Secrets are masked" in text
    assert "s3cret" not in text and "pw@" not in text
    assert tomllib.loads(text)["notify"]["webhook"] == "https://***@hooks.example.com/flows?***"
