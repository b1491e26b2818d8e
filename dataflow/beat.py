"""Celery beat's scheduler (``CELERY_BEAT_SCHEDULER``): django-celery-beat's
``DatabaseScheduler``, which also records each of its ticks (``services.beat``) so that a
beat that stopped shows in ``/healthz``, ``/metrics`` and the dashboard, and which ends
beat cleanly on SIGTERM or SIGINT whenever it comes.

Celery's own handler saves the schedule inside the signal handler and raises SystemExit
wherever the main thread is. A SIGTERM while the scheduler was still writing its entries
to the database (beat just started, as a process manager's restart does) closed that
connection under the writer and the SystemExit never reached beat's loop: beat slept on,
and its process manager had to SIGKILL it. Here the handler only notes the signal; the
loop's next tick (at most ``--max-interval`` later) raises SystemExit in the loop itself,
and beat saves its schedule and exits 0 as Celery's loop does on Ctrl-C.
"""

from __future__ import annotations

import logging
import signal
import threading

import redis
from django_celery_beat.schedulers import DatabaseScheduler

from dataflow.services.beat import beat_tick_note

log = logging.getLogger(__name__)

#: Set by SIGTERM or SIGINT: the scheduler's next tick ends beat's loop.
_stopping = threading.Event()


def _stop_at_next_tick(signum: int, frame) -> None:
    _stopping.set()


class Scheduler(DatabaseScheduler):
    """``DatabaseScheduler`` that notes each tick of beat's loop (at least every
    ``max_interval``, 5 s by default) and ends the loop once beat was told to stop."""

    def __init__(self, *args, **kwargs) -> None:
        # Before the entries are written (the base class writes them as it is made), and
        # after Celery installed its own handler (beat makes its working scheduler then).
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGTERM, signal.SIGINT):
                signal.signal(signum, _stop_at_next_tick)
        super().__init__(*args, **kwargs)

    def tick(self, *args, **kwargs) -> float:
        if _stopping.is_set():
            raise SystemExit(0)  # in beat's loop, which saves the schedule and ends
        try:
            beat_tick_note()
        except redis.RedisError as exc:  # beat goes on: it sends through the same Redis anyway
            log.warning("beat: could not record its tick: %s", exc)
        return super().tick(*args, **kwargs)
