"""Kafka flows end to end, against librdkafka's mock cluster (tests/kafka_cluster.py: NOT a
real broker; its brokers run in a process of their own, which the Celery workers reach over
loopback like any broker). A producer writes orders to a topic's 4 partitions while the flow
runs, and the sink, as pyarrow reads it, must hold every id once, through a SIGKILLed
reader worker; a bounded run stops at the ends the partitions had at its start and
dead-letters a value that is not JSON at its offset.

Real Redis, PostgreSQL, Celery workers and Spark.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import Producer

from connectors.kafka.connection import close_metadata_clients
from dataflow.models import Assignment, DeadLetter, RunStatus, Split
from dataflow.services.flows import flow_apply, flow_start, flow_stop
from tests.e2e.streams_helpers import SCHEMA, SteadyWriter, kill_a_reading_worker, sink_ids, what_differs
from tests.helpers import Beat, wait_for_run
from tests.kafka_cluster import MockKafkaCluster

pytestmark = pytest.mark.django_db(transaction=True)
PARTITIONS = 4  # what the mock cluster gives a topic


@pytest.fixture(scope="module")
def cluster():
    cluster = MockKafkaCluster()
    yield cluster
    close_metadata_clients()
    cluster.kill()


class KafkaProducer(SteadyWriter):
    """Writes orders ``{id, customer, amount}`` with ids 0, 1, 2... round robin to the
    partitions of ``topic``."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__()
        self.topic = topic
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        self.producer.list_topics(topic, timeout=10)  # the mock cluster makes it

    def send(self, partition: int, value: bytes) -> int:
        offsets: list[int] = []
        self.producer.produce(
            self.topic, value, partition=partition, on_delivery=lambda e, m: offsets.append(m.offset())
        )
        assert self.producer.flush(30) == 0
        return offsets[0]

    def write(self, count: int) -> list[int]:
        with self._lock:
            first = len(self.sent)
            ids = list(range(first, first + count))
            for i in ids:
                body = json.dumps({"id": i, "customer": f"c{i % 5}", "amount": i / 2}).encode()
                self.producer.produce(self.topic, body, partition=i % PARTITIONS)
            assert self.producer.flush(30) == 0
            self.sent.extend(ids)
        return ids


@pytest.fixture()
def producer(cluster):
    producer = KafkaProducer(cluster.bootstrap, f"e2e{uuid.uuid4().hex[:10]}")
    yield producer
    producer.stop()


def kafka_spec(name: str, bootstrap: str, topic: str, sink: Path, **flow_fields) -> dict:
    flow = {"name": name, "parallelism": 2, "batch_size": 50, "poll_interval_ms": 50}
    return {
        "flow": {**flow, **flow_fields},
        "source": {"type": "kafka", "bootstrap_servers": bootstrap, "topics": [topic]},
        "format": {"type": "json", "schema": SCHEMA},
        "transform": {"sql": "SELECT id, customer, amount FROM source", "trigger_ms": 500},
        "sink": {"type": "parquet", "path": str(sink)},
    }


def test_a_sigkilled_reader_worker_loses_and_duplicates_no_record(fleet, quick, cluster, producer):
    producer.write(40)
    sink = quick.out / "sink"
    flow, _ = flow_apply(spec=kafka_spec("kill-kafka", cluster.bootstrap, producer.topic, sink))
    run, sent = kill_a_reading_worker(fleet, flow, producer, sink)
    flow_stop(flow=flow)
    assert sink_ids(sink) == Counter(sent), what_differs(sink, sent, run)
    assert Assignment.objects.filter(split__run=run, outcome="expired").exists(), "the victim held splits"


def test_a_stop_at_latest_ends_the_run_and_a_bad_value_is_dead_lettered_at_its_offset(
    worker, quick, cluster, producer
):
    producer.write(120)
    bad_offset = producer.send(1, b"this is not json")
    sink = quick.out / "sink"
    spec = kafka_spec("stop-kafka", cluster.bootstrap, producer.topic, sink, skip_errors=True)
    spec["stop"] = {"at": "latest"}
    flow, _ = flow_apply(spec=spec)
    with Beat():
        run = flow_start(flow=flow)
        producer.start(rate=100)  # records past the stop are not read
        run = wait_for_run(run, timeout=120)
        producer.stop()

    assert run.status == RunStatus.SUCCEEDED, run.message
    assert sink_ids(sink) == Counter(range(120)), what_differs(sink, range(120), run)
    splits = Split.objects.filter(run=run)
    assert sorted(s.records_read for s in splits) == [30, 30, 30, 30]
    letter = DeadLetter.objects.get(run=run)
    assert (letter.split_id, letter.position, letter.offset) == (
        f"{producer.topic}:1",
        bad_offset,
        str(bad_offset),
    )
    assert letter.raw == "this is not json"
