"""A split's checkpoint belongs to one stream: a stream deleted and created again under its
name, or lost with its server's storage, has sequences that start over, so a reader never
applies the old checkpoint to it (it used to, and skipped the new stream's first messages
without a word). Messages the stream discarded (``max_msgs``) before a split read them are
a loss named by its range. Against real nats-servers: the shared one, and one of the
test's own restarted on fresh storage (tests/nats_server.py)."""

from __future__ import annotations

import pytest

from connectors.nats.config import NatsSourceConfig
from connectors.nats.jetstream import stream_seen
from connectors.nats.source import NatsJetStreamSource
from connectors.nats.split import SubjectSplit, SubjectSplitSerializer
from source_support.errors import ConfigError, SplitFailed
from source_support.formats import validate_format
from source_support.registry import BuildContext
from source_support.testing.harness import SourceHarness
from tests.connectors.nats.conftest import nats_url
from tests.connectors.nats.test_enumerator import enumerator_of
from tests.connectors.nats.test_reader import Stream, fetch_until, reader_of
from tests.helpers import logs_of
from tests.nats_server import PrivateNatsServer
from tests.source_support.fakes import RecordingContext


def rows(batches) -> list[int]:
    return [r["id"] for b in batches for r in b.records.to_pylist()]


def created(stream: Stream) -> str:
    return stream.run(stream_seen(stream.nc, stream.name, 5)).created


@pytest.fixture()
def stream(stream_name):
    made = Stream(stream_name)
    yield made
    made.close()


def test_a_split_is_stored_with_its_streams_creation_time(env, stream):
    context = RecordingContext()
    enumerator_of(env, stream, context).start()

    payloads = [SubjectSplitSerializer().serialize(split) for _, split in context.assigned]
    assert [p["created"] for p in payloads] == [created(stream)] * 2
    # A payload stored before splits kept it reads as a split that does not know it yet.
    del payloads[0]["created"]
    assert SubjectSplitSerializer().deserialize(payloads[0]).created is None


def test_a_checkpoint_is_not_applied_to_a_stream_created_again_under_its_name(env, stream):
    stream.orders("a", range(10))
    first = created(stream)
    stream.run(stream.js.delete_stream(stream.name))
    stream.create()
    stream.orders("a", range(100, 140))  # sequences 1 to 40: past the old checkpoint too
    reader = reader_of(env, stream)
    reader.handle_splits_changes([SubjectSplit(stream.name, stream.subject("a"), 10, created=first)], [])

    with pytest.raises(SplitFailed) as failed:
        fetch_until(reader, bool)

    message = str(failed.value)
    assert f"created at {created(stream)}" in message and f"stream created at {first}" in message
    assert "(sequence 10)" in message and "messages 1 to 40 are not read" in message
    reader.close()


def test_a_stored_split_without_its_streams_creation_fails_on_a_sequence_below_its_checkpoint(env, stream):
    stream.orders("a", range(5))  # a stream whose last sequence (5) is below the checkpoint
    reader = reader_of(env, stream)
    reader.handle_splits_changes([SubjectSplit(stream.name, stream.subject("a"), 200_000)], [])

    with pytest.raises(SplitFailed, match=r"last sequence of stream \w+ is 5, below the checkpoint"):
        fetch_until(reader, bool)
    reader.close()


def test_a_server_restarted_on_fresh_storage_under_a_reading_split_fails_it(env, stream_name, tmp_path):
    server = PrivateNatsServer(tmp_path / "first")
    server.start()
    try:
        stream = Stream(stream_name, server.url)
        stream.orders("a", range(10))
        reader = reader_of(env, stream, servers=server.url)
        split = SubjectSplit(stream.name, stream.subject("a"), 0, created=created(stream))
        reader.handle_splits_changes([split], [])
        read = fetch_until(reader, lambda b: len(rows(b)) >= 10)
        reader.notify_checkpoint_complete({split.split_id: read[-1].end.position})

        server.stop()
        server.store = tmp_path / "second"  # the same address, nothing of the first storage
        server.start()
        stream.close()
        stream = Stream(stream_name, server.url)  # created again, by a client of the new server
        stream.orders("a", range(100, 125))

        with pytest.raises(SplitFailed, match=r"created at .* \(sequence 10\) is of the stream created at"):
            fetch_until(reader, lambda b: False, rounds=200)
        assert rows(read) == list(range(10))
        reader.close()
        stream.close()
    finally:
        server.kill()


@pytest.mark.slow
def test_messages_discarded_by_max_msgs_before_they_were_read_are_a_loss_at_their_range(env, stream):
    stream.run(stream.js.delete_stream(stream.name))
    stream.create(subjects=("a",), max_msgs=50)
    stream.orders("a", range(10))
    reader = reader_of(env, stream)
    reader.handle_splits_changes(
        [SubjectSplit(stream.name, stream.subject("a"), 0, created=created(stream))], []
    )
    batches = fetch_until(reader, lambda b: len(rows(b)) >= 10, 100, max_records=5)

    stream.orders("a", range(100, 200))  # sequences 11 to 110: the stream keeps 61 to 110
    batches += fetch_until(reader, lambda b: 199 in rows(b), 100, max_records=5)

    [lost] = [bad for b in batches for bad in b.bad_records]
    read = rows(batches)
    last_before = max((i for i in read if i < 150), default=9)
    position = last_before + 1 if last_before < 100 else last_before - 100 + 11  # its sequence
    assert lost.position == position + 1
    assert f"messages {position + 1} to 60 of stream {stream.name} ({60 - position})" in lost.reason
    assert "discarded by its limits" in lost.reason
    assert read == list(range(10)) + list(range(100, last_before + 1) if last_before >= 100 else []) + list(
        range(150, 200)
    )
    reader.close()


@pytest.mark.slow
def test_messages_discarded_while_no_reader_read_fail_a_split_that_skips_no_errors(env, stream):
    stream.run(stream.js.delete_stream(stream.name))
    stream.create(subjects=("a",), max_msgs=50)
    stream.orders("a", range(10))
    first = created(stream)
    stream.orders("a", range(100, 200))  # the split read up to 10; the stream keeps 61 to 110

    reader = reader_of(env, stream, fails_split=True)
    reader.handle_splits_changes([SubjectSplit(stream.name, stream.subject("a"), 10, created=first)], [])
    batches = fetch_until(reader, lambda b: any(x.bad_records for x in b))

    [lost] = [bad for b in batches for bad in b.bad_records]
    assert lost.position == 11
    assert "messages 11 to 60" in lost.reason and "(50)" in lost.reason
    assert "set skip_errors to go on past lost messages" in lost.reason
    reader.close()


@pytest.mark.slow
def test_discarded_messages_of_a_stream_of_several_subjects_are_a_note_not_a_failure(env, stream):
    stream.run(stream.js.delete_stream(stream.name))
    stream.create(max_msgs=50)  # subjects a and b
    stream.orders("a", range(10))
    first = created(stream)
    stream.orders("b", range(100, 200))  # sequences 11 to 110
    stream.orders("a", range(10, 12))  # 111 and 112: the stream keeps 63 to 112

    reader = reader_of(env, stream, fails_split=True)
    reader.handle_splits_changes([SubjectSplit(stream.name, stream.subject("a"), 10, created=first)], [])
    batches = fetch_until(reader, lambda b: 11 in rows(b))

    assert not [bad for b in batches for bad in b.bad_records]
    [note] = [b.note for b in batches if b.note]
    assert f"messages 11 to 62 of stream {stream.name} were discarded" in note
    assert f"those on {stream.subject('a')} among them are lost" in note
    assert rows(batches) == [10, 11]
    reader.close()


def source_of(env, stream: Stream, **options) -> NatsJetStreamSource:
    table = {"servers": nats_url(), "stream": stream.name, "discovery_interval_ms": 100, **options}
    return NatsJetStreamSource.from_config(
        NatsSourceConfig.parse(table, env),
        validate_format({"type": "json", "schema": "id BIGINT"}),
        BuildContext(env=env, batch_size=100, flow_name="reset-test"),
    )


@pytest.mark.slow
def test_a_declared_restart_reads_a_stream_created_again_from_its_first_sequence(env, stream, caplog):
    stream.orders("a", range(10))
    first = created(stream)
    harness = SourceHarness(source_of(env, stream, on_reset="restart"), readers=1, poll_timeout_s=0.05)
    harness.run(until=lambda h: len(h.records()) == 10)

    stream.run(stream.js.delete_stream(stream.name))
    with logs_of(caplog, "connectors.nats"):
        harness.run(rounds=30)  # gone: waited for, said once, not failed
        assert not any(s.failed for s in harness.store.state.splits.values())
        stream.create()
        stream.orders("a", range(100, 140))  # sequences 1 to 40: past the old checkpoint too
        harness.run(until=lambda h: len(h.records()) == 50)

    assert sorted(r["id"] for r in harness.records()) == [*range(10), *range(100, 140)], "each once"
    splits = harness.store.state.splits
    old = splits[f"{stream.name} {stream.subject('a')}"]
    new = splits[f"{stream.name} {stream.subject('a')} (generation 2)"]
    assert old.finished and not old.failed and old.position == 10
    assert f"stream {stream.name} was created at {created(stream)}" in old.note, old.note
    assert f"(sequence 10) is of the stream created at {first}" in old.note
    assert (
        f"source.on_reset is 'restart': subject filter {stream.subject('a')} is read again from sequence 1 "
        f"of the stream created at {created(stream)}, as generation 2 of the split (reset 1 of this split "
        "in this run)"
    ) in old.note
    assert [r.levelname for r in caplog.records if r.getMessage() == old.note] == ["WARNING"]
    assert caplog.text.count(f"stream {stream.name} is gone: subject filter {stream.subject('a')}") == 1
    assert new.position == 40 and not new.failed
    assert not any(s.failed for s in splits.values())


@pytest.mark.parametrize(
    ("value", "reason"), [("skip", "must be one of fail, restart"), (1, "must be a string")]
)
def test_a_bad_on_reset_is_refused_naming_the_field(env, value, reason):
    with pytest.raises(ConfigError) as caught:
        NatsSourceConfig.parse({"servers": nats_url(), "stream": "S", "on_reset": value}, env)
    assert caught.value.field == "source.on_reset"
    assert str(caught.value) == f"source.on_reset: {reason}"


def test_a_split_among_several_subjects_asks_the_stream_once_not_at_each_gap(env, stream):
    # Subjects a and b interleaved: each batch of a's messages starts after a gap (b's).
    for i in range(12):
        stream.orders("a", [i])
        stream.orders("b", [100 + i])
    split = SubjectSplit(stream.name, stream.subject("a"), 1, created=created(stream))
    asked = stream.watch(f"$JS.API.STREAM.INFO.{stream.name}")
    reader = reader_of(env, stream)
    reader.clock = lambda: 1_000.0  # the set-up's look stays fresh (LOOK_FRESH_S)
    reader.handle_splits_changes([split], [])
    batches = fetch_until(reader, lambda b: len(rows(b)) >= 11, max_records=2)
    stream.run(stream.nc.flush())

    assert rows(batches) == list(range(1, 12)), "each once, in order"
    assert len(batches) >= 5 and not any(b.note or b.bad_records for b in batches)
    # Before: one STREAM.INFO per batch after a gap (a round trip each, 13% of a bench
    # reader's time); now the set-up's alone: the stream has no limits, so a gap is b's.
    assert asked.pending_msgs == 1
    reader.close()


def test_a_split_of_a_stream_with_limits_asks_at_each_gap(env, stream):
    stream.run(stream.js.delete_stream(stream.name))
    stream.create(max_msgs=1_000)  # limits: a gap may be a loss, so it is asked about
    for i in range(6):
        stream.orders("a", [i])
        stream.orders("b", [100 + i])
    split = SubjectSplit(stream.name, stream.subject("a"), 1, created=created(stream))
    asked = stream.watch(f"$JS.API.STREAM.INFO.{stream.name}")
    reader = reader_of(env, stream)
    reader.clock = lambda: 1_000.0
    reader.handle_splits_changes([split], [])
    batches = fetch_until(reader, lambda b: len(rows(b)) >= 5, max_records=1)
    stream.run(stream.nc.flush())

    assert rows(batches) == list(range(1, 6))
    assert asked.pending_msgs == 1 + len(batches)
    reader.close()
