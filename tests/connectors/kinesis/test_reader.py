"""The kinesis split reader against the module's moto server (the stand-in for Kinesis):
records at their positions from a checkpoint (a resume point, the anchor with a skip),
a closed shard read to its end finishing its split and reported only once committed,
an expired iterator and throttling survived without a record lost or read twice."""

from __future__ import annotations

import datetime as dt

import botocore.exceptions
import pytest

from connectors.kinesis.config import KinesisSourceConfig
from connectors.kinesis.reader import SHARD_FINISHED, KinesisSplitReader
from connectors.kinesis.shards import shared_client
from connectors.kinesis.source import KinesisSource
from connectors.kinesis.split import AFTER_SEQUENCE_NUMBER, TRIM_HORIZON, Anchor, ShardSplit
from source_support.api import SourceEvent
from source_support.errors import SplitFailed
from source_support.formats import validate_format
from source_support.registry import BuildContext
from source_support.streams.reader import Decoding
from tests.connectors.kinesis.conftest import put_json, shard_ids, source_table


def source_of(env, moto, stream, **extra) -> KinesisSource:
    return KinesisSource.from_config(
        KinesisSourceConfig.parse(source_table(moto, stream, **extra), env),
        validate_format({"type": "json", "schema": "id BIGINT"}),
        BuildContext(env=env, batch_size=4),
    )


class Flaky:
    """The source's client, failing the next GetRecords calls with ``codes``."""

    def __init__(self, client, codes: list[str]) -> None:
        self.client, self.codes = client, list(codes)

    def __getattr__(self, name):
        return getattr(self.client, name)

    def get_records(self, **kwargs):
        if self.codes:
            code = self.codes.pop(0)
            raise botocore.exceptions.ClientError({"Error": {"Code": code, "Message": code}}, "GetRecords")
        return self.client.get_records(**kwargs)


def reader_of(source: KinesisSource, *, client=None, events=None, metadata=False) -> KinesisSplitReader:
    return KinesisSplitReader(
        (lambda: client) if client is not None else source.client,
        Decoding(source.decoder(), metadata=metadata),
        endpoint=f"{source.target.shown_endpoint} {id(source)}",  # no resume point of another test
        send_event=(events.append if events is not None else lambda event: None),
    )


def split_of(stream: str, shard: str, position: int = 0, anchor: Anchor | None = None) -> ShardSplit:
    return ShardSplit(stream, shard, position, "test", anchor or Anchor(TRIM_HORIZON))


def read_all(reader: KinesisSplitReader, rounds: int = 20) -> list:
    batches = []
    for _ in range(rounds):
        batches += reader.fetch(4, 0.0)
        if not reader.held:
            break
    return batches


def ids(batches) -> list[int]:
    return [i for b in batches for i in b.records.column("id").to_pylist()]


@pytest.fixture()
def one_shard(kinesis, stream_name) -> str:
    kinesis.create_stream(StreamName=stream_name, ShardCount=1)
    put_json(kinesis, stream_name, [{"id": i} for i in range(10)])
    return shard_ids(kinesis, stream_name)[0]


@pytest.mark.slow
def test_records_come_at_their_positions_from_the_shards_start(env, moto, stream_name, one_shard):
    reader = reader_of(source_of(env, moto, stream_name))
    reader.handle_splits_changes([split_of(stream_name, one_shard)], [])

    batches = read_all(reader, rounds=3)

    assert ids(batches) == list(range(10))
    assert [(b.start.position, b.end.position) for b in batches] == [(0, 4), (4, 8), (8, 10)]
    assert not any(b.finished for b in batches), "an open shard never ends"


@pytest.mark.parametrize(
    "anchor", [Anchor(TRIM_HORIZON), Anchor(AFTER_SEQUENCE_NUMBER, "3", 3)], ids=["skip", "anchor"]
)
def test_a_checkpoint_is_read_on_from_the_record_after_it(env, moto, stream_name, one_shard, anchor):
    reader = reader_of(source_of(env, moto, stream_name))
    reader.handle_splits_changes([split_of(stream_name, one_shard, position=6, anchor=anchor)], [])

    batches = read_all(reader, rounds=2)

    assert ids(batches) == [6, 7, 8, 9]
    assert batches[0].start.position == 6 and batches[-1].end.position == 10


def test_a_closed_shard_read_to_its_end_finishes_and_is_reported_once_committed(
    env, moto, kinesis, stream_name, one_shard
):
    kinesis.split_shard(StreamName=stream_name, ShardToSplit=one_shard, NewStartingHashKey=str(2**127))
    put_json(kinesis, stream_name, [{"id": 99}])  # goes to a child
    events: list[SourceEvent] = []
    reader = reader_of(source_of(env, moto, stream_name), events=events)
    reader.handle_splits_changes([split_of(stream_name, one_shard)], [])

    batches = read_all(reader)

    assert ids(batches) == list(range(10))
    assert batches[-1].finished and batches[-1].end.position == 10
    assert events == [], "nothing is reported before the commit"
    reader.notify_checkpoint_complete({one_shard: 10})
    assert events == [SourceEvent(SHARD_FINISHED, {"shard": one_shard})]


def test_an_expired_iterator_is_made_again_after_the_last_record_read(env, moto, stream_name, one_shard):
    source = source_of(env, moto, stream_name)
    flaky = Flaky(source.client(), [])
    reader = reader_of(source, client=flaky)
    reader.handle_splits_changes([split_of(stream_name, one_shard)], [])
    first = reader.fetch(4, 0.0)

    flaky.codes = ["ExpiredIteratorException"]
    rest = read_all(reader, rounds=5)

    assert ids(first + rest) == list(range(10))


def test_throttling_backs_off_and_reads_on_from_the_same_place(env, moto, stream_name, one_shard):
    source = source_of(env, moto, stream_name)
    flaky = Flaky(source.client(), ["ProvisionedThroughputExceededException"] * 2)
    reader = reader_of(source, client=flaky)
    reader.handle_splits_changes([split_of(stream_name, one_shard)], [])

    assert reader.fetch(4, 0.0) == []
    state = reader.held[one_shard]
    assert state.backoff_s > 0, "a throttled shard waits before it asks again"
    batches = []
    while len(ids(batches)) < 10:
        state.next_try = 0.0  # the wait, skipped
        batches += reader.fetch(4, 0.0)

    assert ids(batches) == list(range(10))


def test_a_stream_deleted_under_the_reader_fails_its_split(env, moto, kinesis, stream_name, one_shard):
    reader = reader_of(source_of(env, moto, stream_name))
    reader.handle_splits_changes([split_of(stream_name, one_shard)], [])
    kinesis.delete_stream(StreamName=stream_name)

    with pytest.raises(SplitFailed) as failed:
        reader.fetch(4, 0.0)

    assert failed.value.split_id == one_shard


def test_metadata_adds_shard_sequence_arrival_time_and_partition_key(env, moto, stream_name, one_shard):
    source = source_of(env, moto, stream_name, metadata=True)
    reader = reader_of(source, metadata=True)
    reader.handle_splits_changes([split_of(stream_name, one_shard)], [])

    table = reader.fetch(4, 0.0)[0].records

    assert table.column_names == ["id", "_shard", "_seq", "_ts", "_partition_key"]
    row = table.to_pylist()[0]
    assert (row["_shard"], row["_seq"], row["_partition_key"]) == (one_shard, "1", "k")
    assert abs(row["_ts"] - dt.datetime.now(dt.UTC)) < dt.timedelta(minutes=5)


def test_a_record_that_is_not_json_is_a_bad_record_at_its_position(
    env, moto, kinesis, stream_name, one_shard
):
    kinesis.put_record(StreamName=stream_name, Data=b"{not json", PartitionKey="k")
    reader = reader_of(source_of(env, moto, stream_name))
    reader.handle_splits_changes(
        [split_of(stream_name, one_shard, position=8, anchor=Anchor(TRIM_HORIZON))], []
    )

    assert reader.fetch(4, 0.0) == [], "the first call passes over the 8 records before the position"
    (batch,) = reader.fetch(4, 0.0)

    assert ids([batch]) == [8, 9]
    (bad,) = batch.bad_records
    assert bad.position == 11 and bad.raw == "{not json" and "sequence number 11" in bad.reason


def test_schema_inference_samples_the_shards_from_their_start(env, moto, stream_name, one_shard):
    source = source_of(env, moto, stream_name)
    source.fmt = validate_format({"type": "json"}).build(env)  # type: ignore[assignment]

    schema = source.infer_schema()

    assert schema is not None and schema.names == ["id"]
    assert shared_client(source.target) is source.client()
