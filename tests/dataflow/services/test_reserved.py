"""The deployment's own names in its Redis (Celery's queues, kombu's keys, its namespace) are
out of every flow's reach: when a connection or a flow is saved, and at run time, key by
key, also for a connection saved before the rule."""

from __future__ import annotations

import pyarrow as pa
import pytest
from django.conf import settings

from connectors.redis_streams.sink import append_batch
from dataflow.models import Connection
from dataflow.redis_client import redis_url
from dataflow.services.connections import flow_connections_resolve
from dataflow.services.environment import environment
from dataflow.services.flows import flow_apply
from dataflow.services.queues import runflow_queue_name
from dataflow.services.reserved import reserved_redis_keys
from source_support.connections import ConnectionTarget, key_reserved
from source_support.errors import ConfigError
from tests.factories import DataFlowFactory, UserFactory

pytestmark = pytest.mark.django_db

ROWS = pa.table({"id": pa.array([1, 2], pa.int64())})


def test_every_queue_the_deployment_uses_is_reserved(settings):
    settings.CELERY_TASK_ROUTES = {"dataflow.tasks.run_transform": {"queue": "spark"}}
    flow = DataFlowFactory(name="orders")
    reserved = reserved_redis_keys()

    for key in (
        settings.CELERY_TASK_DEFAULT_QUEUE,
        f"{settings.CELERY_TASK_DEFAULT_QUEUE}\x06\x169",  # a priority list of the queue
        "spark",
        runflow_queue_name(flow),
        "_kombu.binding.dataflow",
        "unacked",
        "unacked_index",
        "celery-task-meta-1f0c",
        f"{settings.DATAFLOW_REDIS_NAMESPACE}:run:x",
        "adf:sink:staging:x",
        "0b1c2d3e-aaaa-bbbb-cccc-0123456789ab.reply.celery.pidbox",
    ):
        assert key_reserved(key, reserved), key
    for key in ("alice:orders:1", "dataflowx", "sparkles", "team:dataflow"):
        assert not key_reserved(key, reserved), key


@pytest.mark.parametrize("queue", ["default", "spark"])
def test_a_sink_on_a_queue_is_refused_at_run_time_even_through_a_connection_allowing_it(queue, rds, settings):
    # As a connection saved before the rule would resolve: its patterns allow every key.
    settings.CELERY_TASK_ROUTES = {"dataflow.tasks.run_transform": {"queue": "spark"}}
    key = settings.CELERY_TASK_DEFAULT_QUEUE if queue == "default" else "spark"
    old = ConnectionTarget("old", "redis", redis_url(), key_patterns=("*",))
    env = environment(connections={"old": old})
    kind = rds.type(key)

    with pytest.raises(ConfigError) as refused:
        append_batch(ROWS, {"key": key, "connection": "old"}, batch_key="b-reserved", env=env)

    assert refused.value.field == "sink.key"
    assert "the deployment itself uses" in str(refused.value)
    assert rds.type(key) == kind  # untouched: still a list (or absent), never a stream


def test_a_staff_sink_on_the_deployments_redis_without_a_connection_is_refused_at_run_time(rds):
    key = settings.CELERY_TASK_DEFAULT_QUEUE
    kind = rds.type(key)

    with pytest.raises(ConfigError) as refused:
        append_batch(ROWS, {"key": key}, batch_key="b-reserved", env=environment())

    assert refused.value.field == "sink.key"
    assert rds.type(key) == kind


def test_a_connection_saved_before_the_rule_is_refused_when_a_run_resolves_it():
    Connection.objects.create(name="old", type="redis", url=redis_url(), key_patterns=["data*"])

    with pytest.raises(ConfigError) as refused:
        flow_connections_resolve(
            source_type="redis_streams",
            source_config={"connection": "old", "streams": "team:*"},
            sink_type="redis_stream",
            sink_config={"connection": "old", "key": "dataflow"},
            owner=UserFactory(is_staff=True),
        )

    assert refused.value.field == "source.connection"
    assert "deployment's own keys" in str(refused.value)


@pytest.mark.parametrize(("section", "table"), [("sink", {"key": "dataflow"}), ("source", {"streams": "d*"})])
def test_a_staff_flow_on_the_deployments_redis_cannot_name_its_keys(section, table, dirs):
    spec = {
        "flow": {"name": "own-keys"},
        "source": {"type": "redis_streams", "streams": "team:*"},
        "format": {"type": "fields", "schema": "id BIGINT"},
        "transform": {"sql": "SELECT id FROM source"},
        "sink": {"type": "redis_stream", "key": "team:out"},
    }
    spec[section] = {**spec[section], **table}

    with pytest.raises(ConfigError) as refused:
        flow_apply(spec=spec, owner=UserFactory(is_staff=True))

    assert refused.value.field == f"{section}.{next(iter(table))}"
