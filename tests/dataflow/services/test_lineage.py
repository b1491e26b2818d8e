"""OpenLineage events of runs, sent to a real HTTP receiver on a free port (and to a file),
each validated against the OpenLineage JSON Schema kept in ``openlineage_schema/``."""

from __future__ import annotations

import json
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import jsonschema
import pytest

from dataflow.models import RunStatus
from dataflow.services import lineage
from dataflow.services.flows import flow_start
from dataflow.services.lineage import datasets_of, lineage_flush
from dataflow.services.runs.finish import run_finish
from tests.factories import ConnectionFactory, DataFlowFactory, FlowRunFactory, UserFactory
from tests.helpers import SCHEMA, logs_of, run_flow, spec, wait_until, write_csv

SCHEMA_FILE = Path(__file__).parent / "openlineage_schema" / "OpenLineage.json"
VALIDATOR = jsonschema.Draft202012Validator(
    json.loads(SCHEMA_FILE.read_text()), format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
)


@pytest.fixture()
def receiver(settings):
    """A lineage receiver on loopback: keeps each event POSTed to /api/v1/lineage."""
    events: list[dict] = []
    paths: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            paths.append(self.path)
            events.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(201)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    settings.DATAFLOW_OPENLINEAGE_URL = f"http://127.0.0.1:{server.server_port}"
    settings.DATAFLOW_OPENLINEAGE_FILE = ""
    yield type("Receiver", (), {"events": events, "paths": paths})
    server.shutdown()
    server.server_close()
    thread.join()


def _valid(events: list[dict]) -> list[dict]:
    for event in events:
        errors = [e.message for e in VALIDATOR.iter_errors(event)]
        assert not errors, (errors, event)
        uuid.UUID(event["run"]["runId"])
        assert event["producer"].startswith("https://")
    return events


def _of(events: list[dict], kind: str) -> dict:
    return next(e for e in events if e["eventType"] == kind)


def test_a_succeeding_bounded_run_sends_start_and_complete(worker, dirs, receiver):
    write_csv(dirs.data / "a.csv", range(20))
    doc = spec("lineage-ok", str(dirs.data / "*.csv"), str(dirs.out / "sink"))
    doc["transform"]["sql"] = "SELECT id, sensor FROM source WHERE id < 10"

    run = run_flow(doc, timeout=600)  # a first Spark session on a shared 2-core machine
    # COMPLETE is queued by the worker once the run's end commits: wait for it to arrive.
    wait_until(lambda: len(receiver.events) >= 2, 30, lambda: f"events: {receiver.events}")
    lineage_flush()

    assert run.status == RunStatus.SUCCEEDED
    events = _valid(receiver.events)
    assert [e["eventType"] for e in events] == ["START", "COMPLETE"]
    assert set(receiver.paths) == {"/api/v1/lineage"}
    complete = _of(events, "COMPLETE")
    assert complete["run"]["runId"] == str(run.uid) == _of(events, "START")["run"]["runId"]
    assert complete["job"]["namespace"] == "activedataflow/_operator"
    assert complete["job"]["name"] == "lineage-ok"
    assert complete["job"]["facets"]["sql"]["query"] == "SELECT id, sensor FROM source WHERE id < 10"
    [source] = complete["inputs"]
    assert (source["namespace"], source["name"]) == ("file", str((dirs.data).resolve()))
    assert [f["name"] for f in source["facets"]["schema"]["fields"]] == ["id", "sensor", "temperature"]
    [sink] = complete["outputs"]
    assert (sink["namespace"], sink["name"]) == ("file", str((dirs.out / "sink").resolve()))
    assert [f["name"] for f in sink["facets"]["schema"]["fields"]] == ["id", "sensor"]


@pytest.mark.django_db(transaction=True)
def test_a_failing_run_sends_fail_with_its_message(dirs, receiver, django_capture_on_commit_callbacks):
    owner = UserFactory(username="alice")
    flow = DataFlowFactory(name="lineage-bad", owner=owner, source_path=str(dirs.data))
    run = FlowRunFactory(flow=flow, running=True)

    with django_capture_on_commit_callbacks(execute=True):
        run_finish(run=run, status=RunStatus.FAILED, message="split failed: line 3: bad record")
    lineage_flush()

    [event] = _valid(receiver.events)
    assert event["eventType"] == "FAIL"
    assert event["job"]["namespace"] == "activedataflow/alice"
    assert event["run"]["facets"]["errorMessage"]["message"] == "split failed: line 3: bad record"
    assert event["outputs"][0]["facets"] == {}  # nothing was written: no output schema


@pytest.mark.django_db(transaction=True)
def test_a_stream_run_start_is_sent_with_its_stream_dataset(
    dirs, receiver, django_capture_on_commit_callbacks
):
    flow = DataFlowFactory(name="lineage-stream", stream=True, sink_type="parquet")

    with django_capture_on_commit_callbacks(execute=True):
        run = flow_start(flow=flow)
    lineage_flush()
    with django_capture_on_commit_callbacks(execute=True):
        run_finish(run=run, status=RunStatus.STOPPED)
    lineage_flush()

    events = _valid(receiver.events)
    assert [e["eventType"] for e in events] == ["START", "ABORT"]
    start = events[0]
    assert start["job"]["facets"]["jobType"]["processingType"] == "STREAMING"
    [source] = start["inputs"]
    assert source["namespace"].startswith("redis://") and source["name"] == "lineage-stream:*"
    assert [f["name"] for f in source["facets"]["schema"]["fields"]][:1] == ["id"]


@pytest.mark.django_db
def test_one_flows_output_is_the_next_flows_input(dirs):
    first_out = datasets_of("sink", "parquet", {"path": str(dirs.out / "stage")})
    next_in = datasets_of("source", "files", {"path": str(dirs.out / "stage" / "*.parquet")})
    redis_out = datasets_of("sink", "redis_stream", {"url": "redis://u:secret@cache:6380/0", "key": "orders"})
    redis_in = datasets_of("source", "redis_streams", {"url": "redis://cache:6380", "streams": "orders"})

    assert first_out == next_in
    assert redis_out == redis_in
    assert redis_out[0].namespace == "redis://cache:6380"


@pytest.mark.django_db
def test_dataset_names_follow_the_naming_spec_and_hold_no_secret():
    kafka = datasets_of("source", "kafka", {"bootstrap_servers": "broker:9093,b2:9093", "topics": ["orders"]})
    s3 = datasets_of("source", "s3", {"bucket": "events", "prefix": "2024/*.json"})
    nats = datasets_of("sink", "nats", {"servers": ["nats://user:pw@n1:4223"], "subject": "orders.out"})
    connection = ConnectionFactory(name="cache", url="redis://user:hunter2@cache.internal:6390/2")
    named = datasets_of("source", "redis_streams", {"connection": connection.name, "streams": "t-orders"})

    assert [(d.namespace, d.name) for d in kafka] == [("kafka://broker:9093", "orders")]
    assert [(d.namespace, d.name) for d in s3] == [("s3://events", "2024")]
    assert [(d.namespace, d.name) for d in nats] == [("nats://n1:4223", "orders.out")]
    assert [(d.namespace, d.name) for d in named] == [("redis://cache.internal:6390", "t-orders")]
    assert "hunter2" not in repr(named) and "pw" not in repr(nats)


@pytest.mark.django_db(transaction=True)
def test_events_go_to_a_file_and_a_lost_receiver_fails_nothing(
    dirs, settings, caplog, django_capture_on_commit_callbacks
):
    settings.DATAFLOW_OPENLINEAGE_URL = f"file://{dirs.out / 'lineage.jsonl'}"
    flow = DataFlowFactory(name="lineage-file", source_path=str(dirs.data))
    run = FlowRunFactory(flow=flow, running=True)
    with django_capture_on_commit_callbacks(execute=True):
        run_finish(run=run, status=RunStatus.SUCCEEDED, rows_written=0)
    lineage_flush()
    lines = (dirs.out / "lineage.jsonl").read_text().splitlines()
    assert [json.loads(line)["eventType"] for line in _valid_lines(lines)] == ["COMPLETE"]

    settings.DATAFLOW_OPENLINEAGE_URL = "http://127.0.0.1:9"  # nothing listens: refused
    settings.DATAFLOW_OPENLINEAGE_TIMEOUT_SECONDS = 1
    with logs_of(caplog, lineage.__name__):
        for _ in range(3):
            run = FlowRunFactory(flow=flow, running=True)
            with django_capture_on_commit_callbacks(execute=True):
                assert run_finish(run=run, status=RunStatus.SUCCEEDED, rows_written=0)
        lineage_flush()
    said = [r for r in caplog.records if r.name == lineage.__name__ and "not sent" in r.getMessage()]
    assert len(said) == 1  # logged once, not per event


def _valid_lines(lines: list[str]) -> list[str]:
    _valid([json.loads(line) for line in lines])
    return lines


def test_no_events_without_a_url_or_a_file(settings):
    settings.DATAFLOW_OPENLINEAGE_URL = settings.DATAFLOW_OPENLINEAGE_FILE = ""

    assert not lineage.lineage_enabled()


def test_the_schema_refuses_an_event_without_a_run():
    assert list(VALIDATOR.iter_errors({"job": {"namespace": "n", "name": "j"}, "eventTime": "x"}))
    assert SCHEMA  # the columns the tests' flows read
