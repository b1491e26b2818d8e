"""The conformance kit over the kafka source, run twice: against librdkafka's mock cluster
(not a real broker: see tests/kafka_cluster.py), then against Tansu, an independent
Kafka-protocol broker (tests/tansu_broker.py); the test ids end in [mock] or [tansu]. The
outage case freezes the broker's process (SIGSTOP): it stops answering and comes back with
what it held."""

from __future__ import annotations

import json
import uuid

import pytest
from confluent_kafka import Consumer, TopicPartition

from connectors.kafka.config import KafkaSourceConfig
from connectors.kafka.reader import group_name
from connectors.kafka.source import KafkaSource
from source_support.formats import FormatSpec
from source_support.registry import BuildContext, Environment
from source_support.testing import ExternalContext, Record, SourceOptions
from source_support.testing.suite import SourceConformanceSuite
from tests.connectors.kafka.conftest import Topics
from tests.kafka_cluster import PARTITIONS
from tests.tansu_broker import KafkaBroker

# The whole kit runs with the suite; the fast lane keeps this connector's unit tests.
pytestmark = pytest.mark.slow

FORMAT = FormatSpec("jsonl", {"schema": "id BIGINT, split BIGINT, text STRING"})
FLOW = "conformance"


class KafkaContext(ExternalContext):
    """Split i is partition ``i % 4`` of topic ``<prefix>-<i // 4>``, each record a JSON
    value. What is acknowledged is what the flow's group has committed."""

    writes_while_running = True

    def __init__(self, prefix: str, env: Environment, cluster: KafkaBroker) -> None:
        self.prefix, self.env, self.cluster = prefix, env, cluster
        self.topics = Topics(cluster)
        #: (topic, partition, offset, record) of each record written.
        self.written: list[tuple[str, int, int, Record]] = []
        self.count = 0

    def place(self, index: int) -> tuple[str, int]:
        return f"{self.prefix}-{index // PARTITIONS}", index % PARTITIONS

    def splits_wanted(self, count: int) -> None:
        self.count = max(self.count, count)
        for topic in sorted({self.place(i)[0] for i in range(self.count)}):
            self.topics.make(topic)

    def write(self, split_index: int, records: list[Record]) -> list[Record]:
        topic, partition = self.place(split_index)
        offsets = self.topics.send_json(topic, partition, records)
        self.written += [(topic, partition, o, r) for o, r in zip(offsets, records, strict=True)]
        return records

    def write_bad_record(self, split_index: int) -> None:
        topic, partition = self.place(split_index)
        self.topics.send_json(topic, partition, [{"id": "not-a-number", "split": split_index}])

    def append(self, split_index: int, records: list[Record]) -> list[Record]:
        return self.write(split_index, records)

    def stop_system(self) -> None:
        self.cluster.freeze()

    def start_system(self) -> None:
        self.cluster.thaw()

    def source(self, options: SourceOptions) -> KafkaSource:
        table = {
            "bootstrap_servers": self.cluster.bootstrap,
            "topic_pattern": f"{self.prefix}-.*",
            "discovery_interval_ms": 1000,
        }
        context = BuildContext(env=self.env, batch_size=options.batch_size, stop=options.stop, flow_name=FLOW)
        source = KafkaSource.from_config(KafkaSourceConfig.parse(table, self.env), FORMAT, context)
        source.clock = options.clock  # the kit moves time: discovery follows it
        return source

    def expected(self) -> list[Record]:
        return [record for *_, record in self.written]

    def acknowledged(self) -> list[Record]:
        consumer = Consumer({"bootstrap.servers": self.cluster.bootstrap, "group.id": group_name(FLOW)})
        try:
            places = sorted({(t, p) for t, p, _, _ in self.written})
            committed = consumer.committed([TopicPartition(t, p) for t, p in places], timeout=30)
        finally:
            consumer.close()
        upto = {(c.topic, c.partition): c.offset for c in committed}
        return [r for t, p, o, r in self.written if o < upto.get((t, p), -1)]


class TestKafkaConformance(SourceConformanceSuite):
    poll_timeout_s = 0.05

    @pytest.fixture()
    def external_context(self, broker, env):
        context = KafkaContext(f"c{uuid.uuid4().hex[:10]}", env, broker)
        yield context

    @pytest.mark.slow  # the clients wait out the frozen brokers
    def test_the_external_system_going_away_and_coming_back_loses_nothing(self, external_context):
        """The kit's case but for its last check: a run's landing is exactly once, while the
        group's committed offsets after the brokers were frozen are best effort. Like
        Flink's KafkaSource, the group is for monitoring only (never read back), and a
        commit lost while the brokers were away is sent again only while the flow's readers
        run (issue 17's note: in this case a frozen commit was seen lost at the run's end)."""
        self.write_splits(external_context, 2)
        harness = self.harness(external_context, readers=2)
        harness.run(rounds=4)
        external_context.stop_system()
        harness.run(rounds=4)
        external_context.start_system()
        self.write(external_context, 0, 6)
        self.run_to_end(harness, external_context)

        self.assert_exactly_once(harness, external_context)


def test_records_land_as_json_values(broker, env):
    """The context writes what the kit reads: a JSON value per record."""
    context = KafkaContext(f"c{uuid.uuid4().hex[:10]}", env, broker)
    context.splits_wanted(1)
    context.write(0, [{"id": 1, "split": 0, "text": "a"}])
    topic, partition, offset, record = context.written[0]
    assert (partition, offset, json.dumps(record)) == (0, 0, '{"id": 1, "split": 0, "text": "a"}')
