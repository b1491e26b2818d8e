"""Celery beat's scheduler (``CELERY_BEAT_SCHEDULER``): django-celery-beat's
``DatabaseScheduler``, which also records each of its ticks (``services.beat``) so that a
beat that stopped shows in ``/healthz``, ``/metrics`` and the dashboard."""

from __future__ import annotations

import logging

import redis
from django_celery_beat.schedulers import DatabaseScheduler

from dataflow.services.beat import beat_tick_note

log = logging.getLogger(__name__)


class Scheduler(DatabaseScheduler):
    """``DatabaseScheduler`` that notes each tick of beat's loop (at least every
    ``max_interval``, 5 s by default)."""

    def tick(self, *args, **kwargs) -> float:
        try:
            beat_tick_note()
        except redis.RedisError as exc:  # beat goes on: it sends through the same Redis anyway
            log.warning("beat: could not record its tick: %s", exc)
        return super().tick(*args, **kwargs)
