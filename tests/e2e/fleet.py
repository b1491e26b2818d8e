"""Real worker and beat processes for crash tests: started with the test's database,
Redis and directories, and killed with SIGKILL by pid."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from django.conf import settings
from django.db import connection

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
        PYTHONUNBUFFERED="1",
    )
    return env


class Fleet:
    """Worker and beat processes of one test; every process is killed at the end."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.procs: dict[str, subprocess.Popen] = {}

    def _start(self, name: str, args: list[str]) -> subprocess.Popen:
        log = open(self.log_dir / f"{name}.log", "ab")  # noqa: SIM115 - closed with the process
        proc = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "dataflow", *args],
            cwd=ROOT,
            env=fleet_env(),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.procs[name] = proc
        return proc

    def worker(self, name: str, concurrency: int = 4) -> subprocess.Popen:
        return self._start(
            name,
            [
                "worker", "-P", "threads", "-c", str(concurrency), "-n", f"{name}@%h",
                "--without-gossip", "--without-mingle", "--loglevel", "WARNING",
            ],
        )  # fmt: skip

    def beat(self) -> subprocess.Popen:
        return self._start(
            "beat",
            [
                "beat", "-S", "django_celery_beat.schedulers:DatabaseScheduler",
                "--max-interval", "1", "--loglevel", "WARNING",
                "--pidfile", str(self.log_dir / "beat.pid"),
            ],
        )  # fmt: skip

    def kill(self, name: str) -> None:
        """SIGKILL: no shutdown handler runs, nothing is acknowledged or released."""
        proc = self.procs.pop(name)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)

    def name_of(self, pid: int) -> str | None:
        return next((name for name, proc in self.procs.items() if proc.pid == pid), None)

    def log(self, name: str) -> str:
        return (self.log_dir / f"{name}.log").read_text(errors="replace")

    def close(self) -> None:
        for name in list(self.procs):
            self.kill(name)
