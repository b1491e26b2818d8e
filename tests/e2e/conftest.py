import uuid

import pytest

from tests.e2e.fleet import Fleet
from tests.e2e.kafka_helpers import KafkaProducer
from tests.e2e.streams_helpers import quick_stream_intervals
from tests.tansu_broker import BROKERS, running_broker


@pytest.fixture()
def fleet(dirs, tmp_path):
    """Worker and beat processes started by the test; all are SIGKILLed at its end."""
    fleet = Fleet(tmp_path)
    yield fleet
    fleet.close()


@pytest.fixture()
def quick(settings, dirs):
    """The test's directories, with short stream intervals (``quick_stream_intervals``); a
    module that needs other intervals defines its own ``quick``."""
    quick_stream_intervals(settings)
    return dirs


@pytest.fixture(scope="module", params=BROKERS)
def kafka_broker(request):
    """A Kafka broker of the module's own: the mock cluster, then Tansu (test ids end in
    [mock] or [tansu])."""
    with running_broker(request.param) as broker:
        yield broker


@pytest.fixture()
def kafka_producer(kafka_broker):
    """A producer of orders into a new topic of ``kafka_broker`` (4 partitions)."""
    producer = KafkaProducer(kafka_broker, f"e2e{uuid.uuid4().hex[:10]}")
    yield producer
    producer.stop()
