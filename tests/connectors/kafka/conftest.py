"""One librdkafka mock cluster (``tests.kafka_cluster``: not a real broker) for the Kafka
connector's tests, in a process of its own; each test uses topics of its own. ``broker``:
the mock cluster, then Tansu (``tests.tansu_broker``, a real Kafka-protocol broker started
for the test module), for the tests that run on both."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from connectors.kafka.config import KafkaSourceConfig
from connectors.kafka.connection import close_metadata_clients
from connectors.kafka.source import KafkaSource
from source_support.formats import validate_format
from source_support.registry import BuildContext, Environment
from tests.kafka_cluster import PARTITIONS, MockKafkaCluster
from tests.tansu_broker import BROKERS, KafkaBroker, running_broker


@pytest.fixture(scope="session")
def cluster():
    cluster = MockKafkaCluster()
    yield cluster
    close_metadata_clients()  # before the brokers go: a client left open waits for them
    cluster.kill()


@pytest.fixture(scope="module", params=BROKERS)
def broker(request) -> Iterator[KafkaBroker]:
    """A mock cluster, then a Tansu broker, of the module's own."""
    with running_broker(request.param) as broker:
        yield broker


@pytest.fixture()
def env(tmp_path) -> Environment:
    return Environment(allowed_roots=(tmp_path,), base_dir=Path(tmp_path))


@pytest.fixture()
def prefix() -> str:
    return f"t{uuid.uuid4().hex[:10]}"


class Topics:
    """Writes to the topics of a broker (``make`` gives a topic 4 partitions)."""

    def __init__(self, broker: KafkaBroker) -> None:
        self.broker = broker
        self.producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})

    def make(self, topic: str) -> None:
        self.broker.make_topic(topic, PARTITIONS)

    def send(
        self,
        topic: str,
        partition: int,
        values: list[bytes | None],
        *,
        key: bytes | None = None,
        ts_ms: int = 0,
    ) -> list[int]:
        """Produces ``values`` to the partition; the offset of each."""
        offsets: list[int] = []

        def delivered(err: Any, msg: Any) -> None:
            assert err is None, err
            offsets.append(msg.offset())

        for value in values:
            self.producer.produce(
                topic, value, key=key, partition=partition, on_delivery=delivered, timestamp=ts_ms
            )
            self.producer.poll(0)
        assert self.producer.flush(30) == 0
        return offsets

    def send_json(self, topic: str, partition: int, records: list[dict[str, Any]], **kw: Any) -> list[int]:
        return self.send(topic, partition, [json.dumps(r).encode() for r in records], **kw)


@pytest.fixture()
def topics(cluster) -> Topics:
    return Topics(cluster)


@pytest.fixture(scope="module")
def tansu() -> Iterator[KafkaBroker]:
    """A Tansu broker of the module's own (a real Kafka-protocol broker), for what the mock
    cluster does not show."""
    with running_broker("tansu") as broker:
        yield broker


def kafka_source(env: Environment, broker: KafkaBroker, topic: str, **options: Any) -> KafkaSource:
    """A kafka source of ``topic`` on ``broker``, JSON values ``{id}``; ``stop``: the
    ``[stop]`` rule as the build gets it; the rest are ``[source]`` options."""
    stop = options.pop("stop", None)
    table = {"bootstrap_servers": broker.bootstrap, "topics": [topic], **options}
    return KafkaSource.from_config(
        KafkaSourceConfig.parse(table, env),
        validate_format({"type": "json", "schema": "id BIGINT"}),
        BuildContext(env=env, batch_size=100, stop=stop, flow_name="tansu-test"),
    )
