"""OpenLineage events of every run: START when it starts, COMPLETE, FAIL or ABORT (a
stopped run) when it ends, through the ``openlineage-python`` client.

Where they go: ``DATAFLOW_OPENLINEAGE_URL``, an HTTP receiver (OpenLineage's convention:
the base URL; events are POSTed to ``DATAFLOW_OPENLINEAGE_ENDPOINT``, ``api/v1/lineage``
by default) or a ``file://`` URL; or ``DATAFLOW_OPENLINEAGE_FILE``, a file that gets one
JSON event per line. Neither set: no events, nothing started.

What an event says, and the client that sends it, are ``services.lineage_events``'s,
loaded only once lineage is on. Events are sent by one thread per process from a bounded
queue: a run never waits for the receiver and never fails because of it. A receiver that
does not answer is logged once (until it answers again); events beyond
``DATAFLOW_OPENLINEAGE_QUEUE`` waiting are dropped, logged once too.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import uuid
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.db import transaction

from dataflow.models import FlowRun, RunStatus

log = logging.getLogger(__name__)

EVENT_OF_STATUS = {
    RunStatus.SUCCEEDED: "COMPLETE",
    RunStatus.FAILED: "FAIL",
    RunStatus.STOPPED: "ABORT",
}


def lineage_enabled() -> bool:
    """Whether events are sent at all (a URL or a file is set)."""
    return bool(settings.DATAFLOW_OPENLINEAGE_URL or settings.DATAFLOW_OPENLINEAGE_FILE)


def run_lineage_emit(*, run: FlowRun, event_type: str | None = None) -> None:
    """Queues the run's event (``event_type``, else the one its status calls for: START
    while it is active, COMPLETE, FAIL or ABORT once it ended); returns at once. Never
    raises: lineage must not fail a run."""
    if not lineage_enabled():
        return
    try:
        from dataflow.services import lineage_events  # noqa: PLC0415 openlineage: 1 s of each start

        event = lineage_events.run_lineage_event(run=run, event_type=event_type or _event_type(run))
    except Exception as exc:  # noqa: BLE001 - a run's lineage never fails the run
        log.warning("lineage: no event for run %s: %s", run.pk, exc)
        return
    _emitter(lineage_events.lineage_client).put(event)


def _event_type(run: FlowRun) -> str:
    return EVENT_OF_STATUS.get(RunStatus(run.status), "START")


def run_lineage_again(*, run: FlowRun) -> None:
    """The ended ``run`` goes on again (resumed after a stop, its failed splits restarted):
    a new OpenLineage run, with a run id of its own, whose START is sent once the caller's
    transaction commits; its end is sent under that id. Call it inside the transaction that
    makes the run active again."""
    run.lineage_uid = uuid.uuid4()
    run.save(update_fields=["lineage_uid"])
    transaction.on_commit(lambda: run_lineage_emit(run=run, event_type="START"), robust=True)


# Sending, off the caller's thread.


class _Emitter:
    """One thread per process sending queued events through the client; a full queue
    drops (logged once), a failing receiver is logged once until it answers again."""

    def __init__(self, client: Any) -> None:
        self.queue: queue.Queue[Any] = queue.Queue(maxsize=settings.DATAFLOW_OPENLINEAGE_QUEUE)
        self.pid = os.getpid()
        self.failing = False
        self.dropping = False
        self.client = client
        self.thread = threading.Thread(target=self._run, name="openlineage-emitter", daemon=True)
        self.thread.start()

    def put(self, event: Any) -> None:
        try:
            self.queue.put_nowait(event)
            self.dropping = False
        except queue.Full:
            if not self.dropping:
                log.warning("lineage: %s events wait to be sent; dropping new ones", self.queue.maxsize)
            self.dropping = True

    def _run(self) -> None:
        while True:
            event = self.queue.get()
            try:
                self.client.emit(event)
                if self.failing:
                    log.info("lineage: the receiver takes events again")
                self.failing = False
            except Exception as exc:  # noqa: BLE001 - the thread outlives any receiver
                if not self.failing:
                    log.warning("lineage: events not sent (%s); said once until it answers", exc)
                self.failing = True
            finally:
                self.queue.task_done()

    def join(self) -> None:
        self.queue.join()


_emitters: dict[tuple, _Emitter] = {}
_emitters_lock = threading.Lock()


def _emitter(client: Callable[[], Any]) -> _Emitter:
    # Per process (a forked worker starts its own thread) and per configuration.
    key = (
        os.getpid(),
        settings.DATAFLOW_OPENLINEAGE_URL,
        settings.DATAFLOW_OPENLINEAGE_FILE,
        settings.DATAFLOW_OPENLINEAGE_ENDPOINT,
    )
    with _emitters_lock:
        if key not in _emitters:
            _emitters[key] = _Emitter(client())
        return _emitters[key]


def lineage_flush() -> None:
    """Waits until this process's queued events were sent (or given up): for tests and a
    process that is about to exit."""
    for key, emitter in list(_emitters.items()):
        if key[0] == os.getpid():
            emitter.join()
