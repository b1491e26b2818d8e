"""The NATS enumerator against a real NATS server: where each subject filter starts, stops
scoped to the whole stream, subjects added to the stream, and a time stop placed by a
reader and passed on to every reader."""

from __future__ import annotations

import time

import pytest

from connectors.nats.config import NatsSourceConfig
from connectors.nats.reader import STOP_PLACED
from connectors.nats.source import NatsJetStreamSource
from connectors.nats.split import SubjectSplit
from source_support.api import SourceEvent
from source_support.formats import validate_format
from source_support.registry import BuildContext
from tests.connectors.nats.conftest import nats_url
from tests.connectors.nats.test_reader import Stream
from tests.source_support.fakes import RecordingContext


@pytest.fixture()
def stream(stream_name):
    made = Stream(stream_name)
    yield made
    made.close()


def enumerator_of(env, stream: Stream, context, *, state=None, stop=None, **source):
    table = {"servers": nats_url(), "stream": stream.name, "discovery_interval_ms": 100, **source}
    built = NatsJetStreamSource.from_config(
        NatsSourceConfig.parse(table, env),
        validate_format({"type": "json", "schema": "id BIGINT"}),
        BuildContext(env=env, batch_size=10, flow_name="enum-test", stop=stop or {}),
    )
    return built.restore_enumerator(context, state)


def starts(context) -> dict[str, int]:
    return {split.subject: split.position for _, split in context.assigned}


def test_each_subject_of_the_stream_is_a_split_from_earliest(env, stream):
    stream.orders("a", range(3))
    context = RecordingContext()
    enumerator = enumerator_of(env, stream, context)
    enumerator.start()

    assert starts(context) == {stream.subject("a"): 0, stream.subject("b"): 0}
    assert sorted(subtask for subtask, _ in context.assigned) == [0, 1]


@pytest.mark.parametrize("start", ["latest", "3", "time"])
def test_a_start_places_every_filter_on_a_stream_sequence(env, stream, start):
    stream.orders("a", range(2))
    time.sleep(0.05)
    middle_ms = int(time.time() * 1000)
    time.sleep(0.05)
    third = stream.orders("b", [2])[0]
    stream.orders("a", [3])
    if start == "time":
        start = (
            time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(middle_ms // 1000)) + f".{middle_ms % 1000:03d}Z"
        )
    context = RecordingContext()
    enumerator_of(env, stream, context, start=start).start()

    got = starts(context)
    if start == "latest":
        assert got == {stream.subject("a"): 4, stream.subject("b"): 4}
    elif start == "3":
        assert got == {stream.subject("a"): 2, stream.subject("b"): 2}
    else:  # the first message of each filter at or after the time
        assert got == {stream.subject("a"): 3, stream.subject("b"): third - 1}


def test_explicit_filters_are_the_splits(env, stream):
    context = RecordingContext()
    enumerator_of(env, stream, context, subjects=[stream.subject("a")]).start()

    assert list(starts(context)) == [stream.subject("a")]


def test_a_stop_at_latest_is_the_streams_last_sequence_for_every_split_and_ends_discovery(env, stream):
    last = stream.orders("a", range(5))[-1]
    context = RecordingContext()
    enumerator = enumerator_of(env, stream, context, stop={"at": "latest", "kind": "latest"})
    enumerator.start()

    assert {split.stop_position for _, split in context.assigned} == {last}
    assert enumerator.is_exhausted()
    enumerator.handle_split_request(0)
    assert context.no_more == [0]


def test_a_subject_added_to_the_stream_becomes_a_new_split_read_from_its_start(env, stream):
    stream.orders("a", range(2))
    context = RecordingContext()
    enumerator = enumerator_of(env, stream, context, start="latest")
    enumerator.start()
    state = enumerator.snapshot_state()
    info = stream.run(stream.js.stream_info(stream.name))
    info.config.subjects = [*info.config.subjects, stream.subject("c")]
    stream.run(stream.js.update_stream(info.config))
    stream.orders("c", [9])
    time.sleep(0.15)  # past the discovery interval

    enumerator = enumerator_of(env, stream, context, state=state, start="latest")
    enumerator.start()

    assert starts(context)[stream.subject("c")] == 0
    assert len(context.assigned) == 3


def test_a_time_stop_placed_by_a_reader_is_passed_on_to_every_reader(env, stream):
    stream.orders("a", range(2))
    context = RecordingContext()
    stop = {"at": "2999-01-01T00:00:00Z", "kind": "time", "time_ms": 32_472_144_000_000}
    enumerator = enumerator_of(env, stream, context, stop=stop)
    enumerator.start()
    assert all(isinstance(s, SubjectSplit) and s.stop_time_ms for _, s in context.assigned)

    enumerator.handle_source_event(0, SourceEvent(STOP_PLACED, {"seq": 2}))

    assert sorted(subtask for subtask, event in context.events if event.payload == {"seq": 2}) == [0, 1]
    assert {s["stop"] for s in enumerator.snapshot_state()["splits"].values()} == {2}
