"""Kinesis flows end to end: a producer puts orders into a stream while the flow runs,
and the sink, as pyarrow reads it, must hold every id once, through a SIGKILLed reader
worker and through a reshard (a split, then a merge of its children) during the flow,
with each child shard read only after its parents were read to their end.

Kinesis is played by a moto server of the module's own (AWS cannot be reached here),
with resharding corrected to Kinesis's documented behaviour
(tests/connectors/kinesis/moto_kinesis.py). Real Redis, PostgreSQL, Spark and worker
processes.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from pathlib import Path

import pytest
from django.db.models import Max, Min

from dataflow.models import Assignment, Split
from dataflow.services.flows import flow_apply, flow_start, flow_stop
from tests.connectors.kinesis.conftest import kinesis_server, shard_ids
from tests.e2e.streams_helpers import (
    SCHEMA,
    SteadyWriter,
    arrived,
    kill_a_reading_worker,
    sink_ids,
    what_differs,
)
from tests.helpers import Beat, live, wait_until
from tests.moto_server import ACCESS_KEY_ID, SECRET_ACCESS_KEY, PrivateMotoServer

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


class KinesisProducer(SteadyWriter):
    """Puts orders ``{id, customer, amount}`` with ids 0, 1, 2... into ``stream``, each
    with its customer as partition key (so a customer's orders keep their order)."""

    def __init__(self, server: PrivateMotoServer, stream: str, *, shards: int = 2) -> None:
        super().__init__()
        self.client = server.client("kinesis")
        self.stream = stream
        self.client.create_stream(StreamName=stream, ShardCount=shards)

    def write(self, count: int) -> list[int]:
        with self._lock:
            first = len(self.sent)
            ids = list(range(first, first + count))
            for start in range(0, len(ids), 500):
                entries = [
                    {
                        "Data": json.dumps({"id": i, "customer": f"c{i % 5}", "amount": i / 2}).encode(),
                        "PartitionKey": f"c{i % 5}",
                    }
                    for i in ids[start : start + 500]
                ]
                answer = self.client.put_records(StreamName=self.stream, Records=entries)
                assert not answer.get("FailedRecordCount"), answer
            self.sent.extend(ids)
        return ids

    def close(self) -> None:
        self.client.delete_stream(StreamName=self.stream)


@pytest.fixture(scope="module")
def moto():
    with kinesis_server() as server:
        yield server


@pytest.fixture()
def producer(moto):
    producer = KinesisProducer(moto, f"e2e-{uuid.uuid4().hex[:10]}")
    yield producer
    producer.stop()
    producer.close()


def kinesis_spec(name: str, moto: PrivateMotoServer, stream: str, sink: Path, **source) -> dict:
    """An unbounded flow over ``stream`` into a Parquet sink."""
    return {
        "flow": {"name": name, "parallelism": 2, "batch_size": 50, "poll_interval_ms": 50},
        "source": {
            "type": "kinesis",
            "endpoint_url": moto.endpoint_url,
            "access_key_id": ACCESS_KEY_ID,
            "secret_access_key": SECRET_ACCESS_KEY,
            "stream_name": stream,
            **source,
        },
        "format": {"type": "json", "schema": SCHEMA},
        "transform": {"sql": "SELECT id, customer, amount FROM source", "trigger_ms": 500},
        "sink": {"type": "parquet", "path": str(sink)},
    }


def test_a_sigkilled_reader_worker_loses_and_duplicates_no_record(fleet, quick, moto, producer):
    producer.write(40)
    sink = quick.out / "sink"
    flow, _ = flow_apply(spec=kinesis_spec("kill-kinesis", moto, producer.stream, sink))

    run, sent = kill_a_reading_worker(fleet, flow, producer, sink)
    flow_stop(flow=flow)

    assert sink_ids(sink) == Counter(sent), what_differs(sink, sent, run)
    assert Assignment.objects.filter(split__run=run, outcome="expired").exists(), "the victim held shards"


def test_a_reshard_during_the_flow_reads_children_after_parents_once(worker, quick, moto, producer):
    producer.write(100)
    sink = quick.out / "sink"
    spec = kinesis_spec("reshard-kinesis", moto, producer.stream, sink, discovery_interval_ms=300)
    flow, _ = flow_apply(spec=spec)
    kinesis = producer.client
    with Beat():
        run = flow_start(flow=flow)
        producer.start(rate=100)
        wait_until(lambda: live(run) >= 150, 60, lambda: what_differs(sink, producer.sent, run))
        first, _ = shard_ids(kinesis, producer.stream)
        shard = kinesis.list_shards(StreamName=producer.stream)["Shards"][0]["HashKeyRange"]
        middle = (int(shard["StartingHashKey"]) + int(shard["EndingHashKey"])) // 2
        kinesis.split_shard(StreamName=producer.stream, ShardToSplit=first, NewStartingHashKey=str(middle))
        wait_until(lambda: live(run) >= 300, 60, lambda: what_differs(sink, producer.sent, run))
        children = [
            s["ShardId"]
            for s in kinesis.list_shards(StreamName=producer.stream)["Shards"]
            if s.get("ParentShardId") == first
        ]
        kinesis.merge_shards(
            StreamName=producer.stream, ShardToMerge=children[0], AdjacentShardToMerge=children[1]
        )
        wait_until(lambda: live(run) >= 450, 60, lambda: what_differs(sink, producer.sent, run))
        sent = producer.stop()
        wait_until(lambda: arrived(sink, sent), 90, lambda: what_differs(sink, sent, run))
        flow_stop(flow=flow)

    assert sink_ids(sink) == Counter(sent), what_differs(sink, sent, run)
    shards = kinesis.list_shards(StreamName=producer.stream)["Shards"]
    assert len(shards) == 5, "two shards, a split's two children and their merge"
    splits = {s.split_id: s for s in Split.objects.filter(run=run)}
    assert set(splits) == {s["ShardId"] for s in shards}
    for shard in shards:
        parents = [p for p in (shard.get("ParentShardId"), shard.get("AdjacentParentShardId")) if p]
        started = Assignment.objects.filter(split=splits[shard["ShardId"]]).aggregate(at=Min("assigned_at"))[
            "at"
        ]
        for parent in parents:
            assert splits[parent].status == "finished", f"{parent} was read to its end"
            ended = splits[parent].landed.aggregate(at=Max("landed_at"))["at"]
            assert ended is None or started >= ended, (
                f"{shard['ShardId']} was first assigned at {started}, before its parent {parent} "
                f"landed its last batch at {ended}"
            )
