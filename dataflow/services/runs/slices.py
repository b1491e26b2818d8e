"""One time slice of a reader (``source_support.runtime.reader_slice``), and what its
failure does to the run."""

from __future__ import annotations

import logging
import os
import socket

from django.conf import settings
from django.db import transaction
from django.db.models import F

from dataflow.encryption import SecretUndecryptable
from dataflow.models import FlowRun, RunStatus
from dataflow.services.context import coordinator_for, landing_zone, run_key, source_for
from dataflow.services.queues import READ_SPLITS, run_task_send
from dataflow.services.runs.finish import landed_files_release, run_finish
from dataflow.services.runs.tick import request_tick, run_refused_secrets, serve_split_requests
from dataflow.store import DjangoRunStore
from source_support.landing import LandingZoneUnwritable
from source_support.runtime import ReaderSettings, SliceOutcome, SliceReport, reader_slice

log = logging.getLogger("dataflow.services.runs")


def read_slice(*, run_id: int, subtask: int, token: str | None) -> SliceReport:
    """One time slice of reader ``subtask`` of a run (see ``source_support.runtime``)."""
    run = FlowRun.objects.filter(pk=run_id, status=RunStatus.READING).first()
    if run is None or subtask >= run.spec["parallelism"]:  # over, or rescaled below it
        return SliceReport(SliceOutcome.STOPPED, token)
    try:
        report = _read_slice(run, subtask, token)
    except LandingZoneUnwritable as exc:
        # Disk full, read-only or over quota: every reader would fail the same way, and
        # each retry would only add to what fills the disk.
        log.error("run %s: reader %s: %s", run.pk, subtask, exc)
        run_finish(
            run=run, status=RunStatus.FAILED, message=f"reader {subtask} could not land a batch: {exc}"
        )
        return SliceReport(SliceOutcome.STOPPED, token)
    except SecretUndecryptable as exc:
        run_refused_secrets(run, exc)
        return SliceReport(SliceOutcome.STOPPED, token)
    except Exception as exc:  # noqa: BLE001 - counted and shown on the run, never silent
        log.exception("run %s: reader %s failed", run.pk, subtask)
        _reader_failed(run, subtask, exc)
        return SliceReport(SliceOutcome.LOST, token)
    if report.outcome in (SliceOutcome.DONE, SliceOutcome.STOPPED):
        request_tick(run_id=run_id)
    if report.outcome != SliceOutcome.CONTINUE:
        # The run may have ended while this slice read: what it landed after the run let go
        # of its files must go too.
        ended = FlowRun.objects.filter(pk=run_id).exclude(status__in=[RunStatus.READING]).first()
        if ended is not None:
            landed_files_release(ended, ended.status)
    return report


def _reader_failed(run: FlowRun, subtask: int, exc: Exception) -> None:
    """Counts a failed reader task on the run and says why; past
    ``DATAFLOW_READER_FAILURE_LIMIT`` failures the run fails (a read-only landing zone, a
    missing disk... would otherwise make a run that reads nothing, forever)."""
    first_line = (str(exc).strip().splitlines() or [""])[0]
    reason = f"{type(exc).__name__}: {first_line}"[:500]
    with transaction.atomic():
        FlowRun.objects.filter(pk=run.pk, status=RunStatus.READING).update(
            reader_failures=F("reader_failures") + 1,
            message=f"reader {subtask} failed: {reason}",
        )
        failures = FlowRun.objects.filter(pk=run.pk).values_list("reader_failures", flat=True).first() or 0
    limit = settings.DATAFLOW_READER_FAILURE_LIMIT
    if failures >= limit:
        run_finish(
            run=run,
            status=RunStatus.FAILED,
            message=f"readers failed {failures} times (DATAFLOW_READER_FAILURE_LIMIT); last: {reason}",
        )


def _read_slice(run: FlowRun, subtask: int, token: str | None) -> SliceReport:
    spec = run.spec
    source = source_for(run)
    return reader_slice(
        source=source,
        coordinator=coordinator_for(run),
        store=DjangoRunStore(run),
        landing=landing_zone(),
        run_key=run_key(run),
        subtask=subtask,
        token=token,
        settings=ReaderSettings(
            slice_seconds=settings.DATAFLOW_READER_SLICE_SECONDS,
            poll_interval_s=spec["poll_interval_ms"] / 1000,
            skip_errors=spec["skip_errors"],
            park_seconds=settings.DATAFLOW_READER_PARK_SECONDS,
            location=f"{socket.gethostname()}:{os.getpid()}",
            stop_after_records=(spec.get("stop_rule") or {}).get("after_records"),
            linger_s=settings.DATAFLOW_READER_LINGER_MS / 1000,
            max_batch_records=spec["batch_size"],
            max_errors=spec.get("max_errors", 1000) if spec["skip_errors"] else None,
        ),
        on_split_request=lambda: serve_split_requests(run, source),
    )


def reader_requeue(*, run_id: int, subtask: int, token: str | None) -> None:
    """Queues the next slice of a reader (its previous slice asked to go on)."""
    run_task_send(READ_SPLITS, run_id, subtask, token)
