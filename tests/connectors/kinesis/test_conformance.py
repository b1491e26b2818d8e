"""The conformance kit over the kinesis source, against a moto server of the module's own
(the stand-in for Kinesis)."""

from __future__ import annotations

import contextlib
import json
import uuid

import pytest

from connectors.kinesis.config import KinesisSourceConfig
from connectors.kinesis.source import KinesisSource
from source_support.formats import FormatSpec
from source_support.registry import BuildContext, Environment
from source_support.testing import ExternalContext, Record, SourceOptions
from source_support.testing.suite import SourceConformanceSuite
from tests.connectors.kinesis.conftest import kinesis_server, source_table
from tests.moto_server import PrivateMotoServer

# The whole kit runs with the suite; the fast lane keeps this connector's unit tests.
pytestmark = pytest.mark.slow

FORMAT = FormatSpec("jsonl", {"schema": "id BIGINT, split BIGINT, text STRING"})


class KinesisContext(ExternalContext):
    """Split i is shard i of one stream (each record put with the shard's first hash key).

    moto keeps streams in memory, so a restarted server is empty. Kinesis keeps a stream's
    records through an outage; to play that, ``start_system`` puts every record written
    before the stop again, in the same order, into the same shards: moto numbers a shard's
    records 1, 2, 3..., so the shards come back as they were."""

    writes_while_running = True

    def __init__(self, stream: str, env: Environment, server: PrivateMotoServer) -> None:
        self.stream, self.env, self.server = stream, env, server
        self.count = 0
        self.hashes: list[str] = []
        #: Each body put, with its shard index, in order.
        self.puts: list[tuple[int, bytes]] = []
        self.written: list[Record] = []

    def splits_wanted(self, count: int) -> None:
        assert self.count in (0, count), "the kit asks for the shards once"
        self.count = count
        self._create()

    def _create(self) -> None:
        client = self.server.client("kinesis")
        client.create_stream(StreamName=self.stream, ShardCount=self.count)
        shards = client.list_shards(StreamName=self.stream)["Shards"]
        self.hashes = [s["HashKeyRange"]["StartingHashKey"] for s in shards]

    def _put(self, split_index: int, body: bytes) -> None:
        self.server.client("kinesis").put_record(
            StreamName=self.stream, Data=body, PartitionKey="k", ExplicitHashKey=self.hashes[split_index]
        )
        self.puts.append((split_index, body))

    def write(self, split_index: int, records: list[Record]) -> list[Record]:
        for record in records:
            self._put(split_index, json.dumps(record).encode())
        self.written += records
        return records

    def write_bad_record(self, split_index: int) -> None:
        """A record whose id is a word, in a BIGINT column."""
        self._put(split_index, json.dumps({"id": "not-a-number", "split": split_index}).encode())

    def append(self, split_index: int, records: list[Record]) -> list[Record]:
        return self.write(split_index, records)

    def stop_system(self) -> None:
        self.server.kill()

    def start_system(self) -> None:
        self.server.start()
        self._create()
        puts, self.puts = self.puts, []
        for split_index, body in puts:
            self._put(split_index, body)

    def source(self, options: SourceOptions) -> KinesisSource:
        table = source_table(self.server, self.stream, discovery_interval_ms=1000)
        context = BuildContext(
            env=self.env, batch_size=options.batch_size, stop=options.stop, flow_name="kit"
        )
        source = KinesisSource.from_config(KinesisSourceConfig.parse(table, self.env), FORMAT, context)
        source.clock = options.clock  # the kit moves time: discovery follows it
        return source

    def expected(self) -> list[Record]:
        return list(self.written)

    def close(self) -> None:
        client = self.server.client("kinesis")
        with contextlib.suppress(client.exceptions.ResourceNotFoundException):
            client.delete_stream(StreamName=self.stream)


@pytest.fixture(scope="module")
def server():
    with kinesis_server() as server:
        yield server


class TestKinesisConformance(SourceConformanceSuite):
    #: An idle shard is asked again after a short wait (Kinesis allows five calls a second).
    poll_timeout_s = 0.05

    @pytest.fixture()
    def external_context(self, server, env):
        context = KinesisContext(f"t-{uuid.uuid4().hex[:10]}", env, server)
        yield context
        context.close()

    @pytest.mark.slow  # about 9 s: the server is killed, started again and refilled
    def test_the_external_system_going_away_and_coming_back_loses_nothing(self, external_context):
        super().test_the_external_system_going_away_and_coming_back_loses_nothing(external_context)

    @pytest.mark.slow  # about 5 s of rounds with idle shards
    def test_readers_added_and_removed_mid_run_read_every_record_once(self, external_context):
        super().test_readers_added_and_removed_mid_run_read_every_record_once(external_context)

    # Two to three seconds each on a busy machine (a moto call per shard per round): run
    # with the slow lane, so the fast lane keeps the kit's core cases only.

    @pytest.mark.slow
    def test_many_splits_are_read_exactly_once(self, external_context):
        super().test_many_splits_are_read_exactly_once(external_context)

    @pytest.mark.slow
    def test_splits_returned_after_a_failure_are_read_first(self, external_context):
        super().test_splits_returned_after_a_failure_are_read_first(external_context)

    @pytest.mark.slow
    def test_a_reader_goes_on_in_its_next_slice(self, external_context):
        super().test_a_reader_goes_on_in_its_next_slice(external_context)

    @pytest.mark.slow
    def test_records_written_while_reading_are_read(self, external_context):
        super().test_records_written_while_reading_are_read(external_context)

    @pytest.mark.slow
    def test_idle_readers_do_not_hold_the_run(self, external_context):
        super().test_idle_readers_do_not_hold_the_run(external_context)
