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

from dataflow.models import RunStatus, SplitStatus
from dataflow.services import lineage
from dataflow.services.dead_letters import dead_letters_replay
from dataflow.services.flows import flow_restart, flow_resume, flow_start
from dataflow.services.lineage import lineage_flush
from dataflow.services.lineage_events import datasets_of
from dataflow.services.runs.finish import run_finish
from tests.factories import (
    ConnectionFactory,
    DataFlowFactory,
    DeadLetterFactory,
    FlowRunFactory,
    SplitFactory,
    UserFactory,
)
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


@pytest.mark.slow  # a whole run through the worker (10 s in the fast lane)
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


def _starts_per_run_id(events: list[dict]) -> dict[str, int]:
    starts: dict[str, int] = {}
    for event in events:
        if event["eventType"] == "START":
            starts[event["run"]["runId"]] = starts.get(event["run"]["runId"], 0) + 1
    return starts


@pytest.mark.django_db(transaction=True)
def test_a_stopped_run_resumed_is_a_new_lineage_run_with_its_own_start(
    dirs, receiver, django_capture_on_commit_callbacks
):
    # runflow resumes a stopped run through flow_resume, as the API and startflow do.
    flow = DataFlowFactory(name="lineage-resumed", stream=True, sink_type="parquet")
    with django_capture_on_commit_callbacks(execute=True):
        run = flow_start(flow=flow)
    with django_capture_on_commit_callbacks(execute=True):
        run_finish(run=run, status=RunStatus.STOPPED)

    with django_capture_on_commit_callbacks(execute=True):
        resumed = flow_resume(flow=flow)
    with django_capture_on_commit_callbacks(execute=True):
        run_finish(run=resumed, status=RunStatus.STOPPED)
    lineage_flush()

    events = _valid(receiver.events)
    assert [e["eventType"] for e in events] == ["START", "ABORT", "START", "ABORT"]
    ids = [e["run"]["runId"] for e in events]
    assert ids[0] == ids[1] == str(run.uid)
    assert ids[2] == ids[3] != ids[0]
    assert resumed.pk == run.pk
    assert _starts_per_run_id(events) == {ids[0]: 1, ids[2]: 1}


@pytest.mark.django_db(transaction=True)
def test_a_replay_of_dead_letters_sends_start_before_its_end(
    dirs, receiver, django_capture_on_commit_callbacks
):
    write_csv(dirs.data / "a.csv", range(3))
    flow = DataFlowFactory(
        name="lineage-replay", skip_errors=True, source_path=str(dirs.data / "*.csv"), schema=SCHEMA
    )
    first = FlowRunFactory(flow=flow)
    for i in (7, 8):
        DeadLetterFactory(run=first, raw=f"{i},s{i},1.5")

    with django_capture_on_commit_callbacks(execute=True):
        replay = dead_letters_replay(flow=flow, run_id=first.pk)
    with django_capture_on_commit_callbacks(execute=True):
        run_finish(run=replay, status=RunStatus.FAILED, message="the replay failed")
    lineage_flush()

    events = _valid(receiver.events)
    assert [e["eventType"] for e in events] == ["START", "FAIL"]
    assert {e["run"]["runId"] for e in events} == {str(replay.uid)}


@pytest.mark.django_db(transaction=True)
def test_a_failed_run_whose_failed_splits_restart_is_a_new_lineage_run(
    dirs, receiver, django_capture_on_commit_callbacks
):
    path = dirs.data / "a.csv"
    write_csv(path, range(3))
    flow = DataFlowFactory(name="lineage-again", source_path=str(dirs.data / "*.csv"), schema=SCHEMA)
    with django_capture_on_commit_callbacks(execute=True):
        run = flow_start(flow=flow)
    SplitFactory(run=run, path=str(path.resolve()), end=path.stat().st_size, status=SplitStatus.FAILED)
    with django_capture_on_commit_callbacks(execute=True):
        run_finish(run=run, status=RunStatus.FAILED, message="split failed")

    with django_capture_on_commit_callbacks(execute=True):
        again = flow_restart(flow=flow, only_failed=True)
    with django_capture_on_commit_callbacks(execute=True):
        run_finish(run=again, status=RunStatus.STOPPED)
    lineage_flush()

    events = _valid(receiver.events)
    assert [e["eventType"] for e in events] == ["START", "FAIL", "START", "ABORT"]
    ids = [e["run"]["runId"] for e in events]
    assert ids[0] == ids[1] != ids[2] == ids[3]
    assert _starts_per_run_id(events) == {ids[0]: 1, ids[2]: 1}


@pytest.mark.django_db(transaction=True)
def test_a_lineage_file_in_a_directory_not_made_yet_gets_the_first_event(
    dirs, settings, django_capture_on_commit_callbacks
):
    # As the README's `DATAFLOW_OPENLINEAGE_FILE=out/lineage.jsonl` on a fresh checkout: the
    # START comes before the sink makes out/.
    path = dirs.out / "not-yet" / "lineage.jsonl"
    settings.DATAFLOW_OPENLINEAGE_URL, settings.DATAFLOW_OPENLINEAGE_FILE = "", str(path)
    flow = DataFlowFactory(name="lineage-new-dir", source_path=str(dirs.data))
    run = FlowRunFactory(flow=flow, running=True)
    with django_capture_on_commit_callbacks(execute=True):
        run_finish(run=run, status=RunStatus.SUCCEEDED, rows_written=0)
    lineage_flush()

    assert [json.loads(line)["eventType"] for line in _valid_lines(path.read_text().splitlines())] == [
        "COMPLETE"
    ]
