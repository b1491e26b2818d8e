"""Kafka flows end to end, each run twice: against librdkafka's mock cluster
(tests/kafka_cluster.py: NOT a real broker), then against Tansu, an independent
Kafka-protocol broker (tests/tansu_broker.py); the test ids end in [mock] or [tansu]. Each
broker runs in a process of its own, which the Celery workers reach over loopback like any
broker. A bounded run stops at the ends the partitions had at its start and dead-letters a
value that is not JSON at its offset (the SIGKILLed reader worker: test_kafka_crash.py).

Real Redis, PostgreSQL, Celery workers and Spark.
"""

from __future__ import annotations

from collections import Counter

import pytest

from dataflow.models import DeadLetter, RunStatus, Split
from dataflow.services.flows import flow_apply, flow_start
from tests.e2e.kafka_helpers import kafka_spec
from tests.e2e.streams_helpers import sink_ids, what_differs
from tests.helpers import Beat, wait_for_run

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_stop_at_latest_ends_the_run_and_a_bad_value_is_dead_lettered_at_its_offset(
    worker, quick, kafka_broker, kafka_producer
):
    kafka_producer.write(120)
    bad_offset = kafka_producer.send(1, b"this is not json")
    sink = quick.out / "sink"
    spec = kafka_spec("stop-kafka", kafka_broker.bootstrap, kafka_producer.topic, sink, skip_errors=True)
    spec["stop"] = {"at": "latest"}
    flow, _ = flow_apply(spec=spec)
    with Beat():
        run = flow_start(flow=flow)
        kafka_producer.start(rate=100)  # records past the stop are not read
        run = wait_for_run(run, timeout=120)
        kafka_producer.stop()

    assert run.status == RunStatus.SUCCEEDED, run.message
    assert sink_ids(sink) == Counter(range(120)), what_differs(sink, range(120), run)
    splits = Split.objects.filter(run=run)
    assert sorted(s.records_read for s in splits) == [30, 30, 30, 30]
    letter = DeadLetter.objects.get(run=run)
    assert (letter.split_id, letter.position, letter.offset) == (
        f"{kafka_producer.topic}:1",
        bad_offset,
        str(bad_offset),
    )
    assert letter.raw == "this is not json"
