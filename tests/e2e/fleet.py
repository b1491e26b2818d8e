"""Real worker and beat processes for crash tests: started with the test's database,
Redis and directories, and killed with SIGKILL by pid."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.db import connection

from dataflow.celery import app as celery_app
from dataflow.models import FlowRun
from dataflow.services.queues import FAIR_NEXT, READ_SPLITS, fair_work_running

ROOT = Path(__file__).resolve().parents[2]


def fleet_env() -> dict[str, str]:
    db = connection.settings_dict
    env = dict(os.environ)
    env.update(
        DATABASE_URL=f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
        DATAFLOW_ALLOWED_ROOTS=":".join(str(p) for p in settings.DATAFLOW_ALLOWED_ROOTS),
        DATAFLOW_BASE_DIR=str(settings.DATAFLOW_BASE_DIR),
        DATAFLOW_LANDING_ROOT=str(settings.DATAFLOW_LANDING_ROOT),
        DATAFLOW_READER_LEASE_SECONDS=str(settings.DATAFLOW_READER_LEASE_SECONDS),
        DATAFLOW_READER_SLICE_SECONDS=str(settings.DATAFLOW_READER_SLICE_SECONDS),
        DATAFLOW_READER_PARK_SECONDS=str(settings.DATAFLOW_READER_PARK_SECONDS),
        DATAFLOW_TICK_SECONDS=str(settings.DATAFLOW_TICK_SECONDS),
        DATAFLOW_KEEP_LANDED="1" if settings.DATAFLOW_KEEP_LANDED else "0",
        DATAFLOW_TRANSFORM_LEASE_SECONDS=str(settings.DATAFLOW_TRANSFORM_LEASE_SECONDS),
        DATAFLOW_STREAM_SLICE_SECONDS=str(settings.DATAFLOW_STREAM_SLICE_SECONDS),
        DATAFLOW_CHECKPOINT_SECONDS=str(settings.DATAFLOW_CHECKPOINT_SECONDS),
        DATAFLOW_METRICS_SECONDS=str(settings.DATAFLOW_METRICS_SECONDS),
        DATAFLOW_STALL_SECONDS=str(settings.DATAFLOW_STALL_SECONDS),
        PYTHONUNBUFFERED="1",
        # Off unless a test turns it on: on 2 cores, a JVM and its warm-up jobs in each of
        # a test's worker processes would slow every test that starts some.
        DATAFLOW_WORKER_SPARK_WARM_UP="0",
    )
    return env


def _node(name: str) -> str:
    """The Celery node name of fleet worker ``name`` (started with ``-n name@%h``)."""
    return f"{name}@{socket.gethostname()}"


@dataclass(frozen=True)
class ReaderSlice:
    task_id: str
    subtask: int
    token: str | None  # None: the slice's reader instance is new
    started_at: float  # time.time()


class Fleet:
    """Worker and beat processes of one test; every process is killed at the end."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.procs: dict[str, subprocess.Popen] = {}

    def _start(self, name: str, args: list[str], env: dict[str, str] | None = None) -> subprocess.Popen:
        log = open(self.log_dir / f"{name}.log", "ab")  # noqa: SIM115 - closed with the process
        proc = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "dataflow", *args],
            cwd=ROOT,
            env={**fleet_env(), **(env or {})},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.procs[name] = proc
        return proc

    def worker(
        self,
        name: str,
        concurrency: int = 4,
        env: dict[str, str] | None = None,
        queues: str = "",
        pool: str = "threads",
    ) -> subprocess.Popen:
        """A worker process; ``env`` overrides the fleet's environment (e.g. its REDIS_URL),
        ``queues`` (comma-separated) replaces the default queue it consumes."""
        return self._start(
            name,
            [
                "worker", "-P", pool, "-c", str(concurrency), "-n", f"{name}@%h",
                "--without-gossip", "--without-mingle", "--loglevel", "WARNING",
                *(["-Q", queues] if queues else []),
            ],
            env,
        )  # fmt: skip

    def beat(self) -> subprocess.Popen:
        return self._start(
            "beat",
            [
                "beat", "-S", "dataflow.beat:Scheduler",
                "--max-interval", "1", "--loglevel", "WARNING",
                "--pidfile", str(self.log_dir / "beat.pid"),
            ],
        )  # fmt: skip

    def kill(self, name: str) -> None:
        """SIGKILL: no shutdown handler runs, nothing is acknowledged or released."""
        proc = self.procs.pop(name)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)

    def freeze(self, name: str) -> None:
        """SIGSTOP: the process stops where it is (a long GC pause, a frozen VM) and its
        leases lapse; ``thaw`` lets it go on from there."""
        os.killpg(self.procs[name].pid, signal.SIGSTOP)

    def thaw(self, name: str) -> None:
        os.killpg(self.procs[name].pid, signal.SIGCONT)

    def name_of(self, pid: int) -> str | None:
        return next((name for name, proc in self.procs.items() if proc.pid == pid), None)

    def wait_ready(self, *names: str, timeout: float = 60) -> None:
        """Waits until workers ``names`` answer a ping (they consume from the broker)."""
        nodes = {_node(name) for name in names}
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            replies = celery_app.control.ping(destination=list(nodes), timeout=1)
            if nodes <= {node for reply in replies for node in reply}:
                return
        raise AssertionError(f"workers {names} did not answer within {timeout}s")

    def reader_slices(self, name: str, run: FlowRun) -> list[ReaderSlice]:
        """The reader slices of ``run`` that worker ``name`` is running right now, as Celery's
        ``inspect active`` reports them (a reader's slices may run in any worker)."""
        node = _node(name)
        active = celery_app.control.inspect(destination=[node], timeout=2, limit=1).active() or {}
        slices = []
        for task in active.get(node, []):
            name, args = task["name"], task["args"]
            if name == FAIR_NEXT:  # a token: what it runs is kept in Redis while it runs
                work = fair_work_running(token_id=task["id"])
                name, args = (work.task, work.args) if work else (name, args)
            if name == READ_SPLITS and args[0] == run.pk:
                slices.append(ReaderSlice(task["id"], args[1], args[2], task["time_start"]))
        return slices

    def log(self, name: str) -> str:
        return (self.log_dir / f"{name}.log").read_text(errors="replace")

    def close(self) -> None:
        for name in list(self.procs):
            self.kill(name)
