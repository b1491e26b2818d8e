"""A Kafka flow through a SIGKILLed reader worker, run twice: against librdkafka's mock
cluster (NOT a real broker), then against Tansu, an independent Kafka-protocol broker (test
ids end in [mock] or [tansu]). A producer writes orders to a topic's 4 partitions while the
flow runs on two worker processes; the sink, as pyarrow reads it, must hold every id once.

Apart from tests/e2e/test_kafka.py: its tests run an in-process worker for the module, which
would take this test's tasks from the fleet's workers.

Real Redis, PostgreSQL, Celery worker processes and Spark.
"""

from __future__ import annotations

from collections import Counter

import pyarrow.parquet as pq
import pytest

from dataflow.models import Assignment
from dataflow.services.flows import flow_apply, flow_stop
from tests.e2e.kafka_helpers import kafka_spec, order
from tests.e2e.streams_helpers import kill_a_reading_worker, sink_ids, what_differs

pytestmark = pytest.mark.django_db(transaction=True)

IDENTITY = "SELECT * FROM source"


@pytest.mark.parametrize("sql", [None, IDENTITY], ids=["spark", "identity-without-spark"])
def test_a_sigkilled_reader_worker_loses_and_duplicates_no_record(
    fleet, quick, kafka_broker, kafka_producer, sql
):
    """With ``SELECT *`` the epochs publish the landed files without Spark, and each reader
    keeps its consumer from one time slice to the next: the same promise."""
    kafka_producer.write(40)
    sink = quick.out / "sink"
    spec = kafka_spec("kill-kafka", kafka_broker.bootstrap, kafka_producer.topic, sink)
    if sql is not None:
        spec["transform"]["sql"] = sql
    flow, _ = flow_apply(spec=spec)
    run, sent = kill_a_reading_worker(fleet, flow, kafka_producer, sink)
    flow_stop(flow=flow)
    assert sink_ids(sink) == Counter(sent), what_differs(sink, sent, run)
    assert Assignment.objects.filter(split__run=run, outcome="expired").exists(), "the victim held splits"
    if sql == IDENTITY:
        rows = pq.read_table(sink, columns=["id", "customer", "amount"]).to_pylist()
        assert Counter(tuple(r.values()) for r in rows) == Counter(tuple(order(i).values()) for i in sent)
        run.refresh_from_db()
        assert run.spark_app_id == "", "no epoch ran on Spark"
