"""Streams that are not the ones their splits read, end to end (issue 13, B8 and B9).

B8: the source's redis-server (the test's own, without persistence) restarts empty while
the flow is paused with entries unread; new entries come; the flow resumes. What arrived
in the sink is compared with what was written: the unread entries are lost, and the run
says so (its split fails naming the range, or a dead letter with skip_errors) and says
that the source was reset.

B9: a stream deleted and created again under its key, quickly (while its reader holds
it) and later (after its split ended and a discovery ran): its new entries are read as
the split's next generation, the run carries a note, and no lag is ever negative.
"""

from __future__ import annotations

import time

import pytest

from connectors.redis_streams.split import decode_position, encode_id
from dataflow.models import DeadLetter, FlowRun, MetricSample, Split, SplitStatus
from dataflow.services.flows import flow_apply, flow_pause, flow_resume, flow_start, flow_stop
from tests.e2e.streams_helpers import Producer, arrived, sink_ids, stream_spec, what_differs
from tests.helpers import Beat, wait_until
from tests.redis_server import PrivateRedis, server_binary

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture()
def quick(settings, dirs):
    settings.DATAFLOW_CHECKPOINT_SECONDS = 1
    settings.DATAFLOW_METRICS_SECONDS = 1
    return dirs


@pytest.fixture()
def forgetful_redis(tmp_path):
    """A Redis 7 server of the test's own that comes back empty when it restarts."""
    server = PrivateRedis(tmp_path / "redis", binary=server_binary("7"), persist=False)
    server.start()
    yield server
    server.kill()


def message_of(run: FlowRun) -> str:
    return FlowRun.objects.get(pk=run.pk).message


@pytest.mark.parametrize("skip_errors", [True, False])
def test_a_source_redis_restarted_empty_while_paused_reports_the_lost_entries(
    worker, quick, forgetful_redis, skip_errors
):
    server = forgetful_redis
    producer = Producer(server.client(), "", streams=1)
    read = producer.write(100)
    sink = quick.out / "sink"
    doc = stream_spec("reset", "", sink, parallelism=1, source={"url": server.url}, skip_errors=skip_errors)
    flow, _ = flow_apply(spec=doc)
    with Beat():
        run = flow_start(flow=flow)
        wait_until(lambda: arrived(sink, read), 90, lambda: what_differs(sink, read, run))
        flow_pause(flow=flow)
        time.sleep(1)  # a read in flight (50 ms at most) ends, and the reader holds
        unread = producer.write(50)  # written while paused: never read
        checkpoint = decode_position(Split.objects.get(run=run, split_id="orders:0").position)
        assert checkpoint == producer.entry_ids(0)[99] and producer.ids_after(0, checkpoint) == unread
        server.stop()
        server.start()
        producer.rds = server.client()
        after = producer.write(30)
        first_after = producer.entry_ids(0)[0]
        flow_resume(flow=flow)
        lost_range = f"entries after {checkpoint} and before {first_after}"
        if skip_errors:
            wait_until(lambda: arrived(sink, read + after), 90, lambda: what_differs(sink, read + after, run))
            wait_until(lambda: "source was reset" in message_of(run), 30, lambda: message_of(run))
            assert lost_range in message_of(run)
            flow_stop(flow=flow)
        else:
            wait_until(lambda: FlowRun.objects.get(pk=run.pk).status == "failed", 90, lambda: message_of(run))

    run.refresh_from_db()
    assert not set(unread) & set(sink_ids(sink))
    if skip_errors:
        assert sink_ids(sink) == {i: 1 for i in read + after}, what_differs(sink, read + after, run)
        [letter] = DeadLetter.objects.filter(run=run)
        assert letter.split_id == "orders:0" and lost_range in letter.error
        assert letter.offset == checkpoint
        new = Split.objects.get(run=run, split_id="orders:0 (generation 2)")
        assert new.records_read == len(after)
    else:
        assert sink_ids(sink) == {i: 1 for i in read}, what_differs(sink, read, run)
        assert run.message.startswith("split failed: stream orders:0: the source was reset"), run.message
        assert lost_range in run.message and "set skip_errors" in run.message
    assert encode_id(checkpoint) < encode_id(first_after)
    producer.rds.close()


def test_a_stream_deleted_and_created_again_quickly_is_read_again_with_a_note(worker, quick, rds, prefix):
    producer = Producer(rds, prefix, streams=1)
    before = producer.write(100)
    sink = quick.out / "sink"
    flow, _ = flow_apply(spec=stream_spec(f"again-{prefix[:-1]}", prefix, sink, parallelism=1))
    with Beat():
        run = flow_start(flow=flow)
        wait_until(lambda: arrived(sink, before), 90, lambda: what_differs(sink, before, run))
        wait_until(lambda: MetricSample.objects.filter(run=run, lag=0).exists(), 30, lambda: "no lag sampled")
        rds.delete(producer.key(0))
        after = producer.write(40)  # at once: the reader holds the split still
        sent = before + after
        wait_until(lambda: arrived(sink, sent), 90, lambda: what_differs(sink, sent, run))
        wait_until(lambda: "created again" in message_of(run), 30, lambda: message_of(run))
        time.sleep(2)  # a few more metric samples of the new generation
        flow_stop(flow=flow)

    assert sink_ids(sink) == {i: 1 for i in sent}, what_differs(sink, sent, run)
    old = Split.objects.get(run=run, split_id=producer.key(0))
    new = Split.objects.get(run=run, split_id=f"{producer.key(0)} (generation 2)")
    assert old.status == SplitStatus.FINISHED and "none was seen after it" in old.error
    assert new.records_read == len(after)
    assert not DeadLetter.objects.filter(run=run).exists()
    lags = list(MetricSample.objects.filter(run=run, lag__isnull=False).values_list("lag", flat=True))
    assert lags and min(lags) >= 0


def test_a_stream_deleted_and_created_again_after_discovery_ran_is_read_again(worker, quick, rds, prefix):
    producer = Producer(rds, prefix, streams=1)
    before = producer.write(100)
    sink = quick.out / "sink"
    doc = stream_spec(
        f"later-{prefix[:-1]}", prefix, sink, parallelism=1, source={"discovery_interval_ms": 300}
    )
    flow, _ = flow_apply(spec=doc)
    with Beat():
        run = flow_start(flow=flow)
        wait_until(lambda: arrived(sink, before), 90, lambda: what_differs(sink, before, run))
        checkpoint = Split.objects.get(run=run, split_id=producer.key(0)).position
        rds.delete(producer.key(0))
        wait_until(
            lambda: Split.objects.get(run=run, split_id=producer.key(0)).status == SplitStatus.FINISHED,
            60,
            lambda: "the split of the deleted stream did not end",
        )
        assert "was deleted while it was read" in message_of(run)
        assert decode_position(checkpoint) in message_of(run)
        time.sleep(1.5)  # discoveries run and find no stream
        assert FlowRun.objects.get(pk=run.pk).status == "reading"
        after = producer.write(40)
        sent = before + after
        wait_until(lambda: arrived(sink, sent), 90, lambda: what_differs(sink, sent, run))
        flow_stop(flow=flow)

    assert sink_ids(sink) == {i: 1 for i in sent}, what_differs(sink, sent, run)
    new = Split.objects.get(run=run, split_id=f"{producer.key(0)} (generation 2)")
    assert new.records_read == len(after)
