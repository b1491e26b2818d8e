"""The NATS split reader against a real NATS server: typed records from message bodies,
positions as stream sequences, a checkpoint that wins over the consumer's ack floor, bad
messages at their sequence, stops, metadata and the raw format."""

from __future__ import annotations

import asyncio
import io
import json

import fastavro
import nats
import pyarrow as pa
import pytest
from nats.js.api import AckPolicy, ConsumerConfig, StreamConfig

from connectors.nats.config import NatsSourceConfig
from connectors.nats.jetstream import consumer_name
from connectors.nats.source import NatsJetStreamSource
from connectors.nats.split import SubjectSplit
from source_support.api import RecordBatch
from source_support.formats import validate_format
from source_support.registry import BuildContext
from source_support.schema import parse_ddl
from tests.connectors.nats.conftest import nats_url
from tests.source_support.fakes import RecordingReaderContext
from tests.source_support.test_avro import READING, plain, single_object

SCHEMA = "id BIGINT, customer STRING"
FLOW = "reader-test"


class Stream:
    """A stream of the test's own with subjects ``<name>.a`` and ``<name>.b``."""

    def __init__(self, name: str, url: str | None = None, **config) -> None:
        self.name = name
        self.loop = asyncio.new_event_loop()
        self.nc = self.loop.run_until_complete(
            nats.connect(url or nats_url(), max_reconnect_attempts=-1, reconnect_time_wait=0.2)
        )
        self.js = self.nc.jetstream()
        self.create(**config)

    def create(self, subjects: tuple[str, ...] = ("a", "b"), **config) -> None:
        """Creates the stream (again), over ``<name>.<tail>`` for each of ``subjects``."""
        self.run(
            self.js.add_stream(
                StreamConfig(name=self.name, subjects=[self.subject(t) for t in subjects], **config)
            )
        )

    def run(self, coro):
        return self.loop.run_until_complete(coro)

    def subject(self, tail: str) -> str:
        return f"{self.name.lower()}.{tail}"

    def watch(self, subject: str):
        """A subscription to ``subject`` that the server holds before this returns (a flush
        after the SUB): a request another connection sends next is counted, never missed."""
        subscription = self.run(self.nc.subscribe(subject))
        self.run(self.nc.flush())
        return subscription

    def publish(self, tail: str, body: bytes) -> int:
        return self.run(self.js.publish(self.subject(tail), body)).seq

    def orders(self, tail: str, ids) -> list[int]:
        return [self.publish(tail, json.dumps({"id": i, "customer": f"c{i}"}).encode()) for i in ids]

    def close(self) -> None:
        self.run(self.nc.close())
        self.loop.close()


@pytest.fixture()
def stream(stream_name):
    made = Stream(stream_name)
    yield made
    made.close()


def reader_of(
    env,
    stream: Stream,
    fmt: dict | None = None,
    *,
    metadata=False,
    fails_split=False,
    stop=None,
    servers=None,
):
    table = {"servers": servers or nats_url(), "stream": stream.name, "metadata": metadata}
    config = NatsSourceConfig.parse(table, env)
    spec = validate_format(fmt or {"type": "json", "schema": SCHEMA})
    source = NatsJetStreamSource.from_config(
        config, spec, BuildContext(env=env, batch_size=100, flow_name=FLOW, stop=stop or {})
    )
    return source.create_reader(RecordingReaderContext(fails_split=fails_split)).split_reader


def fetch_until(reader, predicate, rounds: int = 50, *, max_records: int = 100) -> list:
    """Batches of ``reader`` until ``predicate(batches)`` holds (each fetch waits for data;
    the consumer is asked for ``max_records`` at a time, so the rest stays on the server)."""
    batches: list = []
    for _ in range(rounds):
        batches += reader.fetch(max_records, 0.2)
        if predicate(batches):
            return batches
    raise AssertionError(f"not reached after {rounds} fetches: {batches}")


def read_all(reader, count: int) -> RecordBatch:
    """The batches of ``reader`` until ``count`` messages (records and bad records) were read,
    as one batch: a fetch hands out what has arrived, which may be part of what one pull
    delivered (in two reads of the socket, at load)."""
    batches = fetch_until(reader, lambda b: sum(x.records.num_rows + len(x.bad_records) for x in b) >= count)
    assert len({b.split_id for b in batches}) == 1, batches
    return RecordBatch(
        batches[0].split_id,
        batches[0].start,
        batches[-1].end,
        pa.concat_tables([b.records for b in batches]),
        [r for b in batches for r in b.bad_records],
        finished=batches[-1].finished,
    )


def test_message_bodies_become_typed_records_at_their_stream_sequences(env, stream):
    stream.orders("b", [100])
    seqs = stream.orders("a", range(3))
    reader = reader_of(env, stream)
    reader.handle_splits_changes([SubjectSplit(stream.name, stream.subject("a"), 0)], [])

    batch = read_all(reader, 3)

    assert batch.records.schema == parse_ddl(SCHEMA)
    assert batch.records.to_pylist() == [{"id": i, "customer": f"c{i}"} for i in range(3)]
    assert (batch.start.position, batch.end.position) == (0, seqs[-1]) == (0, 4)
    assert not batch.finished
    reader.close()


def test_a_restored_checkpoint_wins_over_the_consumers_ack_floor(env, stream):
    seqs = stream.orders("a", range(10))
    name = consumer_name(FLOW, stream.subject("a"))
    # The consumer acknowledged everything (a run that went further, then was restored).
    config = ConsumerConfig(durable_name=name, filter_subject=stream.subject("a"), ack_policy=AckPolicy.ALL)
    stream.run(stream.js.add_consumer(stream.name, config))
    sub = stream.run(stream.js.pull_subscribe_bind(name, stream.name))
    stream.run(stream.run(sub.fetch(10))[-1].ack_sync())

    reader = reader_of(env, stream)
    reader.handle_splits_changes([SubjectSplit(stream.name, stream.subject("a"), seqs[3])], [])
    batches = fetch_until(reader, lambda b: sum(x.records.num_rows for x in b) >= 6)

    assert [r["id"] for b in batches for r in b.records.to_pylist()] == list(range(4, 10))
    reader.close()


def test_messages_are_acknowledged_only_up_to_a_committed_position(env, stream):
    seqs = stream.orders("a", range(6))
    reader = reader_of(env, stream)
    reader.handle_splits_changes([SubjectSplit(stream.name, stream.subject("a"), 0)], [])
    # All six, in as many batches as their deliveries arrived in.
    batch = fetch_until(reader, lambda b: sum(x.records.num_rows for x in b) == 6)[-1]
    name = consumer_name(FLOW, stream.subject("a"))

    assert stream.run(stream.js.consumer_info(stream.name, name)).ack_floor.stream_seq == 0
    reader.notify_checkpoint_complete({batch.split_id: batch.end.position})
    assert stream.run(stream.js.consumer_info(stream.name, name)).ack_floor.stream_seq == seqs[-1]
    reader.close()


def test_a_message_that_is_not_json_is_a_bad_record_at_its_sequence(env, stream):
    stream.orders("a", [1])
    bad = stream.publish("a", b"not json at all")
    stream.orders("a", [2])
    reader = reader_of(env, stream)
    reader.handle_splits_changes([SubjectSplit(stream.name, stream.subject("a"), 0)], [])

    batch = read_all(reader, 3)

    assert [r["id"] for r in batch.records.to_pylist()] == [1, 2]
    [record] = batch.bad_records
    assert (record.position, record.raw) == (bad, "not json at all")
    described = reader.describe(SubjectSplit(stream.name, stream.subject("a"), 0), bad)
    assert described == f"stream {stream.name} subject filter {stream.subject('a')} sequence {bad}"
    reader.close()


def test_a_stop_ends_a_split_at_it_and_an_idle_split_at_once(env, stream):
    stream.orders("a", range(5))
    stop = stream.orders("a", [5])[0]
    stream.orders("a", range(6, 9))  # past the stop
    reader = reader_of(env, stream)
    reader.handle_splits_changes(
        [
            SubjectSplit(stream.name, stream.subject("a"), 0, stop),
            SubjectSplit(stream.name, stream.subject("b"), 0, stop),  # no message at all
        ],
        [],
    )

    batches = fetch_until(reader, lambda b: sum(x.finished for x in b) == 2)

    read = [r["id"] for b in batches for r in b.records.to_pylist()]
    assert read == list(range(6))
    assert {b.split_id: b.end.position for b in batches if b.finished} == {
        f"{stream.name} {stream.subject('a')}": stop,
        f"{stream.name} {stream.subject('b')}": stop,
    }
    reader.close()


def test_metadata_adds_subject_sequence_and_time(env, stream):
    seqs = stream.orders("b", [7])
    reader = reader_of(env, stream, metadata=True)
    reader.handle_splits_changes([SubjectSplit(stream.name, stream.subject("b"), 0)], [])

    [batch] = fetch_until(reader, bool)

    [row] = batch.records.to_pylist()
    assert (row["id"], row["_subject"], row["_seq"]) == (7, stream.subject("b"), seqs[0])
    assert row["_ts"].tzinfo is not None
    assert batch.records.schema.field("_ts").type == pa.timestamp("us", tz="UTC")
    reader.close()


def test_the_raw_format_keeps_each_body_as_it_came(env, stream):
    bodies = [b"\x00\x01binary", b"not json", b'{"id": 1}']
    for body in bodies:
        stream.publish("a", body)
    reader = reader_of(env, stream, {"type": "raw"})
    reader.handle_splits_changes([SubjectSplit(stream.name, stream.subject("a"), 0)], [])

    batch = read_all(reader, len(bodies))

    assert batch.records.column("data").to_pylist() == bodies
    assert batch.bad_records == []
    reader.close()


def test_a_consumer_changed_under_the_reader_is_made_again_at_the_position(env, stream):
    stream.orders("a", range(4))
    reader = reader_of(env, stream)
    reader.handle_splits_changes([SubjectSplit(stream.name, stream.subject("a"), 0)], [])
    first = read_all(reader, 4)
    # Someone makes the flow's consumer again from the stream's start: its deliveries
    # start over, and this reader must neither read them twice nor skip any.
    name = consumer_name(FLOW, stream.subject("a"))
    stream.run(stream.js.delete_consumer(stream.name, name))
    config = ConsumerConfig(durable_name=name, filter_subject=stream.subject("a"), ack_policy=AckPolicy.ALL)
    stream.run(stream.js.add_consumer(stream.name, config))
    stream.orders("a", range(4, 8))

    batches = fetch_until(reader, lambda b: sum(x.records.num_rows for x in b) >= 4)

    assert [r["id"] for r in first.records.to_pylist()] == [0, 1, 2, 3]
    assert [r["id"] for b in batches for r in b.records.to_pylist()] == [4, 5, 6, 7]
    reader.close()


def test_a_schema_is_inferred_from_the_streams_first_messages(env, stream):
    stream.orders("a", range(3))
    stream.orders("b", [3])
    config = NatsSourceConfig.parse({"servers": nats_url(), "stream": stream.name, "metadata": True}, env)
    source = NatsJetStreamSource.from_config(
        config, validate_format({"type": "json"}), BuildContext(env=env, batch_size=10, flow_name=FLOW)
    )

    inferred = source.infer_schema()

    assert inferred is not None
    assert inferred.names == ["id", "customer", "_subject", "_seq", "_ts"]
    assert inferred.field("id").type == pa.int64()


def test_avro_messages_are_read_as_fastavro_reads_them_and_a_bad_one_at_its_sequence(env, stream):
    # Single-object encoded and plain binary bodies (Avro's two framings without a
    # registry), and one body that is no Avro of the writer schema.
    records = [
        {"id": i, "sensor": None if i % 3 == 0 else f"s{i}", "ts": 1_700_000_000_000 + i} for i in range(6)
    ]
    seqs = [
        stream.publish("a", single_object(READING, r) if i % 2 else plain(READING, r))
        for i, r in enumerate(records)
    ]
    bad = stream.publish("a", b"\xc3\x01" + b"\x00" * 8 + b"not avro")
    reader = reader_of(env, stream, {"type": "avro", "writer_schema": json.dumps(READING)})
    reader.handle_splits_changes([SubjectSplit(stream.name, stream.subject("a"), 0)], [])

    batches = fetch_until(
        reader, lambda b: sum(x.records.num_rows for x in b) >= 6 and b[-1].end.position >= bad
    )

    decoded = [fastavro.schemaless_reader(io.BytesIO(plain(READING, r)), READING) for r in records]
    landed = [row for b in batches for row in b.records.to_pylist()]
    assert landed == decoded
    assert [r.position for b in batches for r in b.bad_records] == [bad]
    assert batches[-1].end.position == bad and seqs[-1] < bad
    reader.close()


def _ids(batches) -> list[int]:
    return [r["id"] for b in batches for r in b.records.to_pylist()]


def _one_slice(env, stream: Stream, split: SubjectSplit, count: int) -> int:
    """A reader's slice: ``count`` records of ``split`` read and committed, then the reader
    closed as a slice ends; the position it reached."""
    reader = reader_of(env, stream)
    reader.handle_splits_changes([split], [])
    end = fetch_until(reader, lambda b: len(_ids(b)) >= count)[-1].end.position
    reader.notify_checkpoint_complete({split.split_id: end})
    reader.close()
    return end


def test_the_next_slice_in_the_process_reads_on_with_the_splits_consumer_as_it_was(env, stream):
    # A reader lives one time slice. Its puller stopped as the slice ended left its pull
    # request waiting on the server, which gave it the next messages with nobody reading
    # them, while the next slice set its consumer up again (STREAM.INFO, CONSUMER.INFO)
    # behind it: the NATS bench's latency p99 was 6-15 s. The next slice takes it back.
    stream.orders("a", range(5))
    split = SubjectSplit(stream.name, stream.subject("a"), 0)
    end = _one_slice(env, stream, split, 5)
    asked = stream.watch("$JS.API.>")
    stream.orders("a", range(5, 10))  # between the two slices

    reader = reader_of(env, stream)
    reader.handle_splits_changes([split.at(end)], [])
    batches = fetch_until(reader, lambda b: len(_ids(b)) >= 5)
    stream.run(stream.nc.flush())

    assert _ids(batches) == list(range(5, 10)), "each once, in order"
    assert asked.pending_msgs == 0, "no JetStream API request: the consumer goes on as it was"
    reader.close()


def test_a_slice_that_starts_elsewhere_than_the_last_one_ended_sets_its_consumer_up_there(env, stream):
    stream.orders("a", range(10))
    split = SubjectSplit(stream.name, stream.subject("a"), 0)
    _one_slice(env, stream, split, 10)

    reader = reader_of(env, stream)  # a checkpoint restored to the fourth message
    reader.handle_splits_changes([split.at(4)], [])
    batches = fetch_until(reader, lambda b: len(_ids(b)) >= 6)

    assert _ids(batches) == list(range(4, 10))
    reader.close()
