"""Kafka flows end to end: a producer of orders into a topic's partitions, and a flow spec
over the topic. The broker is the ``kafka_broker`` fixture (tests/e2e/conftest.py): the mock
cluster, then Tansu."""

from __future__ import annotations

import json
from pathlib import Path

from confluent_kafka import Producer

from tests.e2e.streams_helpers import SCHEMA, SteadyWriter
from tests.kafka_cluster import PARTITIONS
from tests.tansu_broker import KafkaBroker


def order(i: int) -> dict:
    """The record of id ``i``, as ``KafkaProducer`` writes it."""
    return {"id": i, "customer": f"c{i % 5}", "amount": i / 2}


class KafkaProducer(SteadyWriter):
    """Writes orders ``{id, customer, amount}`` with ids 0, 1, 2... round robin to the
    partitions of ``topic``."""

    def __init__(self, broker: KafkaBroker, topic: str) -> None:
        super().__init__()
        self.topic = topic
        self.producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
        broker.make_topic(topic, PARTITIONS)

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
                body = json.dumps(order(i)).encode()
                self.producer.produce(self.topic, body, partition=i % PARTITIONS)
            assert self.producer.flush(30) == 0
            self.sent.extend(ids)
        return ids


def kafka_spec(name: str, bootstrap: str, topic: str, sink: Path, **flow_fields) -> dict:
    flow = {"name": name, "parallelism": 2, "batch_size": 50, "poll_interval_ms": 50}
    return {
        "flow": {**flow, **flow_fields},
        "source": {"type": "kafka", "bootstrap_servers": bootstrap, "topics": [topic]},
        "format": {"type": "json", "schema": SCHEMA},
        "transform": {"sql": "SELECT id, customer, amount FROM source", "trigger_ms": 500},
        "sink": {"type": "parquet", "path": str(sink)},
    }
