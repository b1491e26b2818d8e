"""What bounds a transform attempt (a stream's epoch) while Spark runs it.

Each attempt runs its Spark jobs in a job group of its own (``dataflow.spark.job_group``),
and a ``TransformWatch`` thread cancels that group, interrupting its tasks, once the run no
longer wants the attempt: the run was stopped (or ended otherwise), paused (a stream), a
later attempt took over, the transform lease was lost, or ``[transform] timeout`` passed.
The attempt's thread then sees ``TransformCancelled`` saying why. A job cancelled early
writes nothing to the sink: a sink is published only by the attempt's fenced step.

A cancelled Spark task stops only when it next looks at its interrupt flag, which a tight
generated loop (a cross join) may not do for minutes: if the attempt's tasks still run
``DATAFLOW_TRANSFORM_KILL_SECONDS`` after the cancel, and they are all that this process's
Spark runs, its JVM is killed and the next job starts a new one (on a cluster, Spark's task
reaper kills the executor instead).

A worker that leaves (SIGTERM, a warm shutdown) cancels the jobs of every attempt running in
its process and gives their runs back at once (``transforms_give_back``), so another worker
takes them up without waiting for the lease to lapse.

``[transform] max_output_rows`` (or the site's ``DATAFLOW_TRANSFORM_MAX_OUTPUT_ROWS``) bounds
a bounded run's job while it writes: its result is limited to one row past the bound
(``bounded_output``), and a job that wrote that row fails its run before the publishing
step. A stream's epoch is checked on the rows it staged (a limit would add a shuffle to
every epoch, and an epoch reads one trigger's landed batches). A watch given its staging's size also cancels the job once the staging directory holds
more than ``DATAFLOW_TRANSFORM_MAX_STAGING_BYTES``. Either way nothing is published and the
sink stays as it was.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from enum import Enum

from django.conf import settings
from django.db import close_old_connections, connection

from dataflow.models import ACTIVE_RUN_STATUSES, FlowRun, RunStatus
from dataflow.services.specs import TransformLimits
from dataflow.spark.errors import is_deterministic
from dataflow.spark.jobs import JobGroup, job_group
from dataflow.spark.session import kill_stuck_group, stuck_tasks
from source_support.errors import ConfigError

log = logging.getLogger(__name__)

#: How often a watch looks at its run (and cancels again a job started after a cancel).
WATCH_INTERVAL_S = 0.5


class CancelReason(Enum):
    STOPPED = "the run ended"  # stopped by request, or failed in another process
    PAUSED = "the run was paused"
    SUPERSEDED = "a later transform attempt took over"
    LEASE_LOST = "its transform lease was lost"
    TIMEOUT = "timeout"
    STAGING_FULL = "its staging directory is full"
    WORKER_LEAVING = "its worker is shutting down"


class TransformCancelled(Exception):
    """The attempt's Spark jobs were cancelled on purpose; ``reason`` says why."""

    def __init__(self, reason: CancelReason, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class OutputRowsExceeded(Exception):
    """The transform wrote more rows than ``[transform] max_output_rows`` allows."""


def bounded_output(frame, limits: TransformLimits):
    """``frame`` limited to one row past the run's bound (if it has one): a job over the
    bound stops writing there, and ``check_output_rows`` then fails it."""
    return frame.limit(limits.max_output_rows + 1) if limits.max_output_rows else frame


def check_output_rows(limits: TransformLimits, rows: int, *, what: str = "the transform") -> None:
    """Raises ``OutputRowsExceeded`` when ``rows`` is over the run's bound (if it has one)."""
    if limits.max_output_rows and rows > limits.max_output_rows:
        raise OutputRowsExceeded(
            f"{what} wrote {rows:,} rows, more than {limits.max_output_rows_by} = {limits.max_output_rows:,}; "
            "nothing was published and the sink was left as it was"
        )


class StagingFull(Exception):
    """The transform's staging directory holds more than ``DATAFLOW_TRANSFORM_MAX_STAGING_BYTES``."""


def check_staging_bytes(limits: TransformLimits, size: int | None) -> None:
    """Raises ``StagingFull`` when ``size`` (None: not measured) is over the site's bound."""
    if limits.max_staging_bytes and size is not None and size > limits.max_staging_bytes:
        raise StagingFull(staging_full_message(limits, size))


def staging_full_message(limits: TransformLimits, size: int) -> str:
    return (
        f"the transform wrote {size:,} bytes into its staging directory, more than "
        f"DATAFLOW_TRANSFORM_MAX_STAGING_BYTES = {limits.max_staging_bytes:,}; it was stopped, "
        "nothing was published and the sink was left as it was"
    )


class TransformWatch:
    """Watches one transform attempt (or one epoch of a stream) of a run from a thread of
    its own while ``watching`` runs, and cancels its Spark job group when the run no longer
    wants it. ``attempt``: the bounded transform's attempt number (None for a stream, whose
    epochs are fenced otherwise); ``lease_lost``: set once another process took the lease;
    ``staging_bytes``: what its sink's staging directory holds now (None: not measured)."""

    def __init__(
        self,
        *,
        run_id: int,
        limits: TransformLimits,
        attempt: int | None = None,
        lease_lost: threading.Event | None = None,
        staging_bytes: Callable[[], int | None] | None = None,
        interval_s: float = WATCH_INTERVAL_S,
    ) -> None:
        self.run_id = run_id
        self.limits = limits
        self.attempt = attempt
        self.lease_lost = lease_lost
        self.staging_bytes = staging_bytes
        self.staged_seen = 0
        self.interval_s = interval_s
        #: Why the jobs were cancelled; set before the first cancel, so the attempt's thread
        #: finds it once its job fails.
        self.reason: CancelReason | None = None

    @contextmanager
    def watching(self, session, *, name: str, description: str) -> Iterator[JobGroup]:
        """Runs the block's Spark jobs in job group ``name``, watched; a job that fails
        because the watch cancelled it raises ``TransformCancelled`` instead."""
        with job_group(session, name, description) as group:
            stop = threading.Event()
            watcher = threading.Thread(
                target=self._watch, args=(group, stop, time.monotonic()), name=f"watch-{name}", daemon=True
            )
            watcher.start()
            try:
                yield group
            except Exception as exc:
                if self.reason is not None:
                    raise TransformCancelled(self.reason, self.message()) from exc
                raise
            finally:
                stop.set()
                watcher.join()
                if self.reason is not None:
                    self._reap(group)

    def message(self) -> str:
        """What the run says about the cancel."""
        if self.reason == CancelReason.TIMEOUT:
            return f"transform exceeded [transform] timeout of {self.limits.timeout_s:g} s"
        if self.reason == CancelReason.STAGING_FULL:
            return "transform failed: " + staging_full_message(self.limits, self.staged_seen)
        return f"transform cancelled: {self.reason.value if self.reason else 'no reason'}"

    def _watch(self, group: JobGroup, stop: threading.Event, started: float) -> None:
        try:
            while not stop.wait(self.interval_s):
                reason = self.reason or self._reason(started)
                if reason is None:
                    continue
                if self.reason is None:
                    log.warning(
                        "run %s: cancelling Spark job group %s: %s", self.run_id, group.name, reason.value
                    )
                    self.reason = reason
                group.cancel()  # again each round: a job started after the first cancel goes too
        except Exception as exc:  # noqa: BLE001 - the session may be gone under the watch
            log.warning("run %s: the transform watch of %s ended: %s", self.run_id, group.name, exc)
        finally:
            connection.close()  # this thread's own database connection

    def _reap(self, group: JobGroup) -> None:
        """Waits until the cancelled group's tasks have stopped; past
        ``DATAFLOW_TRANSFORM_KILL_SECONDS`` kills the Spark JVM they run in, if they are all
        it runs (``kill_stuck_group``). The attempt keeps its lease meanwhile, so no next
        attempt starts beside tasks of this one."""
        deadline = time.monotonic() + settings.DATAFLOW_TRANSFORM_KILL_SECONDS
        try:
            while stuck_tasks(group):
                if time.monotonic() > deadline:
                    if not kill_stuck_group(group):
                        log.warning("run %s: cancelled tasks of %s still run", self.run_id, group.name)
                    return
                time.sleep(self.interval_s)
        except Exception as exc:  # noqa: BLE001 - a session already gone runs no task
            log.debug("run %s: reaping %s: %s", self.run_id, group.name, exc)

    def _reason(self, started: float) -> CancelReason | None:
        if _worker_leaving.is_set():
            return CancelReason.WORKER_LEAVING
        if time.monotonic() - started > self.limits.timeout_s:
            return CancelReason.TIMEOUT
        if self.lease_lost is not None and self.lease_lost.is_set():
            return CancelReason.LEASE_LOST
        if self._staging_full():
            return CancelReason.STAGING_FULL
        try:
            close_old_connections()
            row = (
                FlowRun.objects.filter(pk=self.run_id)
                .values("status", "transform_attempts", "paused_at")
                .first()
            )
        except Exception as exc:  # noqa: BLE001 - a database hiccup is no reason to cancel
            log.warning("run %s: the transform watch could not read the run: %s", self.run_id, exc)
            connection.close()
            return None
        if row is not None and self.attempt is not None and row["transform_attempts"] != self.attempt:
            return CancelReason.SUPERSEDED
        if row is not None and row["status"] == RunStatus.SUCCEEDED:
            return None  # this attempt (a stream's last epoch) published and ended the run
        if row is None or row["status"] not in ACTIVE_RUN_STATUSES:
            return CancelReason.STOPPED
        # A bounded run cannot be paused once it transforms (``flow_pause``); a stream's
        # epochs wait while it is paused.
        if self.attempt is None and row["paused_at"] is not None:
            return CancelReason.PAUSED
        return None

    def _staging_full(self) -> bool:
        if self.staging_bytes is None or not self.limits.max_staging_bytes:
            return False
        try:
            size = self.staging_bytes()
        except OSError as exc:  # a file renamed under the walk: the next round sees it
            log.debug("run %s: measuring the staging directory: %s", self.run_id, exc)
            return False
        if size is None:
            return False
        self.staged_seen = max(self.staged_seen, size)
        return size > self.limits.max_staging_bytes


class SinkRowsMismatch(RuntimeError):
    """The staged sink does not hold the rows the Spark job wrote."""


def transform_is_deterministic(exc: BaseException) -> bool:
    """Whether a retry from the same landed files would fail the same way."""
    if isinstance(exc, SinkRowsMismatch):
        return False
    if isinstance(exc, OutputRowsExceeded | StagingFull | ConfigError):
        return True  # ConfigError: a refused query or a failed expectation
    return is_deterministic(exc)


# A worker that leaves.


#: Set once this process's worker is shutting down (SIGTERM: a warm shutdown).
_worker_leaving = threading.Event()


class _RunningTransforms:
    """How many transform attempts run their Spark job in this process."""

    def __init__(self) -> None:
        self.count = 0
        self._lock = threading.Lock()

    def __enter__(self) -> None:
        with self._lock:
            self.count += 1

    def __exit__(self, *exc) -> None:
        with self._lock:
            self.count -= 1


_transforms_here = _RunningTransforms()


def transforms_running_here():
    """Counts the block as a transform running its Spark job in this process: a worker
    that leaves (``transforms_give_back``) cancels its jobs until the block ends."""
    return _transforms_here


def worker_leaving() -> bool:
    """Whether this process's worker is shutting down (SIGTERM: a warm shutdown)."""
    return _worker_leaving.is_set()


def transforms_give_back(*, every_s: float = 0.5) -> None:
    """This worker process is leaving: its transform attempts give their runs back at once
    (the lease released, no failure counted, no backoff), so another worker takes them up
    without waiting for the lease to lapse; a transform task that arrives now is left for
    another worker. Each attempt's ``TransformWatch`` cancels its jobs (reason
    ``WORKER_LEAVING``), again each round while they run; returns once none runs here,
    looking every ``every_s``."""
    _worker_leaving.set()
    while _transforms_here.count:
        time.sleep(every_s)
