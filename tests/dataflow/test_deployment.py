"""Two deployments on one Redis server: their queues apart, and a stranger's task refused
(a real Celery worker of the project's app, a real Redis)."""

from __future__ import annotations

import pytest
from django.conf import settings

from dataflow.celery import DEPLOYMENT_HEADER
from dataflow.celery import app as celery_app
from dataflow.models import FlowRun
from dataflow.services.deployment import deployment_identity
from dataflow.services.queues import RUN_SCHEDULED, broker_key_prefix, deployment_broker_keys
from tests.factories import DataFlowFactory
from tests.helpers import logs_of, wait_until, write_csv

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_queues_are_under_the_deployments_namespace(rds):
    celery_app.control.purge()
    with celery_app.connection_for_write() as connection:
        connection.default_channel.queue_declare(queue=settings.CELERY_TASK_DEFAULT_QUEUE)
    celery_app.send_task(RUN_SCHEDULED, args=(0,))  # no worker in this test: it waits

    try:
        queued = rds.keys(f"{broker_key_prefix()}*")
        assert (
            f"{settings.DATAFLOW_REDIS_NAMESPACE}:celery:{settings.CELERY_TASK_DEFAULT_QUEUE}".encode()
            in queued
        )
        assert not rds.exists(settings.CELERY_TASK_DEFAULT_QUEUE), "a queue outside the namespace"
        assert deployment_broker_keys() == [f"{settings.DATAFLOW_REDIS_NAMESPACE}:celery:*"]
    finally:
        celery_app.control.purge()


@pytest.mark.slow
def test_a_task_of_another_deployment_is_refused_loudly_and_never_run(worker, dirs, caplog):
    write_csv(dirs.data / "a.csv", range(10))
    flow = DataFlowFactory(name="theirs-by-id", schedule={"every": "1 hour"})
    stranger = f"{settings.DATAFLOW_REDIS_NAMESPACE}/0123456789abcdef0123456789abcdef"
    assert deployment_identity() != stranger

    with logs_of(caplog, "dataflow.services.deployment"):
        # What the other deployment's beat sends for its own flow of the same id.
        celery_app.send_task(RUN_SCHEDULED, args=(flow.pk,), headers={DEPLOYMENT_HEADER: stranger})
        wait_until(lambda: any("refused" in r.getMessage() for r in caplog.records), 30, lambda: caplog.text)
        refusal = next(r for r in caplog.records if "refused" in r.getMessage())

    assert refusal.levelname == "ERROR"
    assert stranger in refusal.getMessage() and deployment_identity() in refusal.getMessage()
    assert not FlowRun.objects.filter(flow=flow).exists(), "the stranger's task ran here"


@pytest.mark.slow
def test_a_task_of_this_deployment_runs(worker, dirs):
    write_csv(dirs.data / "a.csv", range(10))
    flow = DataFlowFactory(name="ours-by-id", schedule={"every": "1 hour"})

    celery_app.send_task(RUN_SCHEDULED, args=(flow.pk,))

    wait_until(lambda: FlowRun.objects.filter(flow=flow).exists(), 30, lambda: "no run started")
    celery_app.control.purge()
