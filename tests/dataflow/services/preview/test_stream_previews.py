"""``flow_preview`` of the streams whose run keeps a position upstream (NATS JetStream,
Kafka, Kinesis): the records written are read through ``Source.sample``, from the start
or the newest, and no position is made or moved (checked on each real system)."""

from __future__ import annotations

import json
import uuid

import pytest
from confluent_kafka import OFFSET_INVALID, Producer, TopicPartition

from connectors.kafka.connection import new_consumer
from connectors.kafka.reader import group_name
from dataflow.models import FlowRun, Split
from dataflow.services.preview import flow_preview
from tests.connectors.kinesis.conftest import kinesis_server, put_json, source_table
from tests.connectors.nats.conftest import nats_url
from tests.connectors.nats.test_reader import Stream
from tests.dataflow.api.conftest import client_of
from tests.factories import ALL_FLOW_PERMS, UserFactory
from tests.kafka_cluster import PARTITIONS
from tests.tansu_broker import BROKERS, running_broker

pytestmark = [pytest.mark.django_db, pytest.mark.slow]

SCHEMA = "id BIGINT, amount DOUBLE"


def _order(i: int) -> bytes:
    return json.dumps({"id": i, "amount": i * 1.5}).encode()


def nats_spec(dirs, stream: Stream, **source) -> dict:
    return {
        "flow": {"name": "orders-nats"},
        "source": {"type": "nats_jetstream", "servers": nats_url(), "stream": stream.name, **source},
        "format": {"type": "json", "schema": SCHEMA},
        "transform": {"sql": "SELECT id, amount * 2 AS twice FROM source"},
        "sink": {"type": "parquet", "path": str(dirs.out / "orders")},
    }


@pytest.fixture()
def nats_stream():
    made = Stream(f"P{uuid.uuid4().hex[:10].upper()}")
    yield made
    made.run(made.js.delete_stream(made.name))
    made.close()


def _consumers(stream: Stream) -> dict:
    """Every consumer of the stream, with where it stands."""
    infos = stream.run(stream.js.consumers_info(stream.name))
    return {
        c.name: (c.config.durable_name, c.delivered, c.ack_floor, c.num_pending, c.num_ack_pending)
        for c in infos
    }


def test_a_nats_preview_reads_the_first_and_newest_messages_and_moves_no_consumer(dirs, nats_stream):
    for i in range(6):
        nats_stream.publish("a", _order(i))
        nats_stream.publish("b", _order(100 + i))
    # The flow's durable consumer, as a run left it: two messages acknowledged.
    durable = nats_stream.run(
        nats_stream.js.pull_subscribe(nats_stream.subject("a"), "orders-nats", stream=nats_stream.name)
    )
    for message in nats_stream.run(durable.fetch(2)):
        nats_stream.run(message.ack_sync())
    before = _consumers(nats_stream)
    spec = nats_spec(dirs, nats_stream, subjects=[nats_stream.subject("a")])

    first = flow_preview(spec=spec, owner=None, limit=4)
    latest = flow_preview(spec=spec, owner=None, limit=3, start="latest")

    assert [r["id"] for r in first["records"]] == [0, 1, 2, 3]
    assert [r["twice"] for r in first["output"]["rows"]] == [0.0, 3.0, 6.0, 9.0]
    assert [r["id"] for r in latest["records"]] == [3, 4, 5]
    assert _consumers(nats_stream) == before
    assert len(before) == 1


def test_a_nats_preview_of_every_subject_through_the_api(dirs, nats_stream):
    for i in range(3):
        nats_stream.publish("a", _order(i))
        nats_stream.publish("b", _order(10 + i))
    nats_stream.publish("b", b"not json")
    staff = UserFactory(is_staff=True, perms=ALL_FLOW_PERMS)
    spec = nats_spec(dirs, nats_stream)
    body = {"name": "orders-nats", **{k: v for k, v in spec.items() if k != "flow"}}

    response = client_of(staff).post("/api/flows/preview/", {**body, "limit": 10}, format="json")

    assert response.status_code == 200, response.content
    answer = response.json()
    assert sorted(r["id"] for r in answer["records"]) == [0, 1, 2, 10, 11, 12]
    assert [(b["raw"], b["position"]) for b in answer["bad_records"]] == [("not json", "7")]
    assert _consumers(nats_stream) == {}


@pytest.fixture(scope="module", params=BROKERS)
def kafka(request):
    """librdkafka's mock cluster, then a Tansu broker (a real Kafka-protocol broker)."""
    with running_broker(request.param) as broker:
        yield broker


def kafka_spec(dirs, broker, topic: str) -> dict:
    return {
        "flow": {"name": "orders-kafka"},
        "source": {"type": "kafka", "bootstrap_servers": broker.bootstrap, "topics": [topic]},
        "format": {"type": "json", "schema": SCHEMA},
        "transform": {"sql": "SELECT id, amount * 2 AS twice FROM source"},
        "sink": {"type": "parquet", "path": str(dirs.out / "orders")},
    }


def _committed(broker, topic: str) -> list[int]:
    """The offsets the flow's consumer group has committed, partition by partition."""
    consumer = new_consumer(broker.bootstrap, group_id=group_name("orders-kafka"))
    try:
        parts = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        return [tp.offset for tp in consumer.committed(parts, timeout=10)]
    finally:
        consumer.close()


def test_a_kafka_preview_reads_the_first_and_newest_records_and_commits_nothing(dirs, kafka):
    topic = f"t{uuid.uuid4().hex[:10]}"
    kafka.make_topic(topic, PARTITIONS)
    producer = Producer({"bootstrap.servers": kafka.bootstrap, "linger.ms": 0})
    for i in range(6):
        producer.produce(topic, _order(i), partition=0)
    producer.produce(topic, b"not json", partition=0)
    for i in range(3):
        producer.produce(topic, _order(100 + i), partition=1)
    assert producer.flush(30) == 0
    before = _committed(kafka, topic)
    api = client_of(UserFactory(is_staff=True, perms=ALL_FLOW_PERMS))
    body = {
        "name": "orders-kafka",
        **{k: v for k, v in kafka_spec(dirs, kafka, topic).items() if k != "flow"},
    }

    first = flow_preview(spec=kafka_spec(dirs, kafka, topic), owner=None, limit=4)
    latest = api.post("/api/flows/preview/", {**body, "limit": 4, "from": "latest"}, format="json")

    assert [r["id"] for r in first["records"]] == [0, 1, 2, 3]
    assert [r["twice"] for r in first["output"]["rows"]] == [0.0, 3.0, 6.0, 9.0]
    assert latest.status_code == 200, latest.content
    # The newest four of partition 0 (the first partition with records), its bad one too.
    assert [r["id"] for r in latest.json()["records"]] == [3, 4, 5]
    assert [(b["raw"], b["position"]) for b in latest.json()["bad_records"]] == [("not json", "6")]
    assert _committed(kafka, topic) == before == [OFFSET_INVALID] * PARTITIONS


@pytest.fixture(scope="module")
def moto():
    """The stand-in for Kinesis (AWS cannot be reached here): a moto server, as the Kinesis
    connector's tests run it."""
    with kinesis_server() as server:
        yield server


def test_a_kinesis_preview_reads_the_first_and_newest_records_and_stores_nothing(dirs, moto, rds):
    kinesis = moto.client("kinesis")
    stream = f"t-{uuid.uuid4().hex[:10]}"
    kinesis.create_stream(StreamName=stream, ShardCount=1)
    put_json(kinesis, stream, [{"id": i, "amount": i * 1.5} for i in range(6)])
    kinesis.put_record(StreamName=stream, Data=b"not json", PartitionKey="k")
    spec = {
        "flow": {"name": "orders-kinesis"},
        "source": {"type": "kinesis", **source_table(moto, stream)},
        "format": {"type": "json", "schema": SCHEMA},
        "transform": {"sql": "SELECT id, amount * 2 AS twice FROM source"},
        "sink": {"type": "parquet", "path": str(dirs.out / "orders")},
    }
    run_keys = sorted(rds.scan_iter(match="adf:run:*"))

    first = flow_preview(spec=spec, owner=None, limit=4)
    latest = flow_preview(spec=spec, owner=None, limit=4, start="latest")

    assert [r["id"] for r in first["records"]] == [0, 1, 2, 3]
    assert [r["twice"] for r in first["output"]["rows"]] == [0.0, 3.0, 6.0, 9.0]
    assert [r["id"] for r in latest["records"]] == [3, 4, 5]
    assert [b["raw"] for b in latest["bad_records"]] == ["not json"]
    assert "sequence number" in latest["bad_records"][0]["reason"]
    # Kinesis keeps no reader position: a run's would be its splits, checkpoints and keys.
    assert not FlowRun.objects.exists() and not Split.objects.exists()
    assert sorted(rds.scan_iter(match="adf:run:*")) == run_keys
