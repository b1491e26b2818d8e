"""NATS JetStream flows end to end: a producer publishes orders on a stream's subjects
while the flow runs, and the sink, as pyarrow reads it, must hold every id once, through
a SIGKILLed reader, a subject added to the stream, the server restarted, a stop rule and
a message that is not JSON.

Real NATS (the machine's on 4222, or a private nats-server with file storage), Redis,
PostgreSQL and Spark.
"""

from __future__ import annotations

import uuid
from collections import Counter

import pytest
from django.db.models import Sum

from connectors.nats.jetstream import consumer_name, stream_seen
from dataflow.models import Assignment, DeadLetter, FlowRun, RunStatus, Split
from dataflow.services.flows import flow_apply, flow_restart, flow_start, flow_stop
from tests.connectors.nats.conftest import nats_url
from tests.e2e.nats_helpers import NatsProducer, PrivateNatsServer, nats_spec
from tests.e2e.streams_helpers import (
    arrived,
    kill_a_reading_worker,
    sink_ids,
    what_differs,
)
from tests.helpers import Beat, live, wait_for_run, wait_until

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture()
def producer():
    producer = NatsProducer(nats_url(), f"E{uuid.uuid4().hex[:10].upper()}")
    producer.create()
    yield producer
    producer.stop()
    producer.close()


# With a fleet of worker processes.


def test_a_sigkilled_reader_worker_loses_and_duplicates_no_message(fleet, quick, producer):
    producer.write(40)
    sink = quick.out / "sink"
    flow, _ = flow_apply(spec=nats_spec("kill-nats", nats_url(), producer.stream, sink))
    run, sent = kill_a_reading_worker(fleet, flow, producer, sink)
    flow_stop(flow=flow)
    assert sink_ids(sink) == Counter(sent), what_differs(sink, sent, run)
    assert Assignment.objects.filter(split__run=run, outcome="expired").exists(), "the victim held splits"


# With the in-process worker.


def test_a_subject_added_to_the_stream_while_running_is_read_once(worker, quick, producer):
    producer.write(40)
    sink = quick.out / "sink"
    spec = nats_spec("grow-nats", nats_url(), producer.stream, sink, source={"discovery_interval_ms": 500})
    flow, _ = flow_apply(spec=spec)
    with Beat():
        run = flow_start(flow=flow)
        producer.start(rate=100)
        wait_until(
            lambda: sink_ids(sink), 60, lambda: f"nothing arrived: {what_differs(sink, producer.sent, run)}"
        )
        late_subject = producer.subject("late")
        producer.add_subject(late_subject)
        late = producer.write(150, subject=late_subject)
        sent = producer.stop()
        wait_until(lambda: arrived(sink, sent), 60, lambda: what_differs(sink, sent, run))
        flow_stop(flow=flow)

    assert sink_ids(sink) == Counter(sent), what_differs(sink, sent, run)
    late_split = Split.objects.get(run=run, split_id=f"{producer.stream} {late_subject}")
    assert late_split.records_read == len(late)


def test_the_server_restarted_mid_flow_loses_and_duplicates_nothing(worker, quick, tmp_path):
    server = PrivateNatsServer(tmp_path / "jetstream")
    server.start()
    producer = NatsProducer(server.url, f"R{uuid.uuid4().hex[:10].upper()}")
    try:
        producer.create()
        producer.write(200)
        sink = quick.out / "sink"
        flow, _ = flow_apply(spec=nats_spec("restart-nats", server.url, producer.stream, sink))
        with Beat():
            run = flow_start(flow=flow)
            wait_until(lambda: live(run) >= 100, 60, lambda: what_differs(sink, producer.sent, run))
            server.stop()
            server.start()  # the same store: the stream and the consumers are back
            producer.write(300)
            sent = list(producer.sent)
            wait_until(lambda: arrived(sink, sent), 120, lambda: what_differs(sink, sent, run))
            flow_stop(flow=flow)
        assert sink_ids(sink) == Counter(sent), what_differs(sink, sent, run)
    finally:
        producer.close()
        server.stop()


def test_a_stop_at_latest_ends_idle_splits_at_once_and_the_run_succeeds(worker, quick, producer):
    producer.write(120, subject=producer.subject(0))  # subjects 1-3 stay empty: idle splits
    sink = quick.out / "sink"
    spec = nats_spec("stop-nats", nats_url(), producer.stream, sink)
    spec["stop"] = {"at": "latest"}
    flow, _ = flow_apply(spec=spec)
    with Beat():
        run = flow_start(flow=flow)
        producer.start(rate=100)  # messages past the stop are not read
        run = wait_for_run(run, timeout=120)
        producer.stop()

    assert run.status == RunStatus.SUCCEEDED, run.message
    assert sink_ids(sink) == Counter(range(120)), what_differs(sink, range(120), run)
    splits = Split.objects.filter(run=run)
    assert sorted(s.records_read for s in splits) == [0, 0, 0, 120]
    assert all(s.status == "finished" for s in splits)
    # A finished split's consumer is deleted once its end is committed.
    for subject in range(4):
        with pytest.raises(Exception, match="not found"):
            producer.run(
                producer.js.consumer_info(
                    producer.stream, consumer_name(flow.name, producer.subject(subject))
                )
            )


def test_a_message_that_is_not_json_is_dead_lettered_with_its_stream_sequence(worker, quick, producer):
    producer.write(10)
    bad_seq = producer.publish_body(producer.subject(1), b"this is not json")
    producer.write(10)
    sink = quick.out / "sink"
    spec = nats_spec("bad-nats", nats_url(), producer.stream, sink, skip_errors=True)
    spec["stop"] = {"at": "latest"}
    flow, _ = flow_apply(spec=spec)
    with Beat():
        run = wait_for_run(flow_start(flow=flow), timeout=120)

    assert run.status == RunStatus.SUCCEEDED, run.message
    assert sink_ids(sink) == Counter(producer.sent)
    letter = DeadLetter.objects.get(run=run)
    assert (letter.split_id, letter.position, letter.offset) == (
        f"{producer.stream} {producer.subject(1)}",
        bad_seq,
        str(bad_seq),
    )
    assert letter.raw == "this is not json"


def test_a_message_that_is_not_json_fails_its_split_naming_its_sequence(worker, quick, producer):
    bad_seq = producer.publish_body(producer.subject(2), b"{broken")
    spec = nats_spec("fail-nats", nats_url(), producer.stream, quick.out / "sink")
    spec["stop"] = {"at": "latest"}
    flow, _ = flow_apply(spec=spec)
    with Beat():
        run = wait_for_run(flow_start(flow=flow), timeout=120)

    assert run.status == RunStatus.FAILED
    assert f"stream {producer.stream} subject filter {producer.subject(2)} sequence {bad_seq}" in run.message
    assert FlowRun.objects.filter(pk=run.pk).exists()


def _created(producer) -> str:
    return producer.run(stream_seen(producer.nc, producer.stream, 5)).created


def _read(run) -> int:
    return Split.objects.filter(run=run).aggregate(n=Sum("records_read"))["n"] or 0


def test_restarting_failed_splits_on_a_stream_created_again_fails_them_naming_both_streams(
    worker, quick, producer
):
    # Issue 25, 3.1: the readers went on at the old stream's sequences on the new stream.
    producer.write(40)
    first = _created(producer)
    flow, _ = flow_apply(spec=nats_spec("reset-fail-nats", nats_url(), producer.stream, quick.out / "sink"))
    with Beat():
        run = flow_start(flow=flow)
        wait_until(lambda: _read(run) == 40, 60, lambda: f"read {_read(run)} of 40")
        producer.run(producer.js.delete_stream(producer.stream))
        run = wait_for_run(run, timeout=60)
        assert run.status == RunStatus.FAILED and "is gone" in run.message, run.message
        producer.create()
        producer.write(80)  # sequences 1 to 80: past every old checkpoint (10 a subject) too
        second = _created(producer)

        flow_restart(flow=flow, only_failed=True)
        run = wait_for_run(run, timeout=60)

    assert run.status == RunStatus.FAILED, run.message
    errors = list(Split.objects.filter(run=run, status="failed").values_list("error", flat=True))
    assert errors, "the restarted splits failed again"
    for error in errors:
        assert f"was created at {second}" in error and f"is of the stream created at {first}" in error, error
        assert "messages 1 to 80 are not read" in error, error
    assert _read(run) == 40, "nothing of the new stream was taken for the old one's"


def test_a_declared_restart_reads_a_stream_created_again_from_its_first_sequence(worker, quick, producer):
    producer.write(40)
    sink = quick.out / "sink"
    spec = nats_spec("reset-restart-nats", nats_url(), producer.stream, sink, source={"on_reset": "restart"})
    flow, _ = flow_apply(spec=spec)
    with Beat():
        run = flow_start(flow=flow)
        wait_until(lambda: _read(run) == 40, 60, lambda: f"read {_read(run)} of 40")
        producer.run(producer.js.delete_stream(producer.stream))
        producer.create()
        new = producer.write(80)
        wait_until(lambda: _read(run) == 120, 90, lambda: f"read {_read(run)} of 120")
        wait_until(lambda: arrived(sink, producer.sent), 60, lambda: what_differs(sink, producer.sent, run))
        run.refresh_from_db()
        flow_stop(flow=flow)

    assert sink_ids(sink) == Counter(producer.sent), what_differs(sink, producer.sent, run)
    assert run.status == RunStatus.READING
    generations = Split.objects.filter(run=run, split_id__endswith="(generation 2)")
    assert sorted(s.records_read for s in generations) == [20, 20, 20, 20] and len(new) == 80
    old = Split.objects.get(run=run, split_id=f"{producer.stream} {producer.subject(0)}")
    assert "source.on_reset is 'restart'" in old.error and "read again from sequence 1" in old.error
    assert "source.on_reset is 'restart'" in run.message, "said on the run too"
