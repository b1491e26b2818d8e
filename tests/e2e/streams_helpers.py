"""Unbounded Redis Streams flows end to end: a producer of orders into a topic of streams,
a flow spec over it, and what arrived in the sink as a plain reader (pyarrow) sees it."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import redis

from dataflow.celery import app as celery_app
from dataflow.models import DataFlow, FlowRun, LandedBatch, Split
from dataflow.selectors.runs import run_progress
from dataflow.services.flows import flow_start
from tests.e2e.fleet import ROOT, Fleet, fleet_env
from tests.helpers import live, wait_until

SCHEMA = "id BIGINT, customer STRING, amount DOUBLE"


class SteadyWriter:
    """Ids 0, 1, 2... written by ``write`` (a subclass's), all at once or in the
    background at a steady rate with ``start``/``stop``."""

    def __init__(self) -> None:
        self.sent: list[int] = []
        self._lock = threading.Lock()  # writes from the test and from the background thread
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def write(self, count: int) -> list[int]:
        raise NotImplementedError

    def start(self, rate: int) -> None:
        """Writes about ``rate`` records a second until ``stop``."""
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, args=(max(1, rate // 20),), daemon=True)
        self._thread.start()

    def _run(self, per_tick: int) -> None:
        while not self._stop.wait(0.05):
            self.write(per_tick)

    def stop(self) -> list[int]:
        """Stops the background writes; returns every id written so far."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        return list(self.sent)


class Producer(SteadyWriter):
    """Writes orders ``{id, customer, amount}`` with ids 0, 1, 2... round robin into the
    streams ``<prefix>orders:0`` .. ``<prefix>orders:<streams - 1>``: all at once with
    ``write``, or in the background at a steady rate with ``start``/``stop``."""

    def __init__(self, rds: redis.Redis, prefix: str, *, streams: int = 4) -> None:
        super().__init__()
        self.rds, self.prefix, self.streams = rds, prefix, streams

    def key(self, stream: int | str) -> str:
        return f"{self.prefix}orders:{stream}"

    def write(self, count: int, *, stream: int | str | None = None) -> list[int]:
        """Writes ``count`` orders (into ``stream`` only, if given); returns their ids."""
        with self._lock:
            first = len(self.sent)
            ids = list(range(first, first + count))
            pipe = self.rds.pipeline(transaction=False)
            for i in ids:
                key = self.key(i % self.streams if stream is None else stream)
                pipe.xadd(key, {"id": i, "customer": f"c{i % 5}", "amount": i / 2})
            pipe.execute()
            self.sent.extend(ids)
        return ids

    def entry_ids(self, stream: int | str) -> list[str]:
        return [entry_id.decode() for entry_id, _ in self.rds.xrange(self.key(stream))]

    def ids_after(self, stream: int | str, entry_id: str) -> list[int]:
        """The order ids of ``stream`` whose entry ids come after ``entry_id``."""
        entries = self.rds.xrange(self.key(stream), min=f"({entry_id}")
        return [int(fields[b"id"]) for _, fields in entries]


def quick_stream_intervals(settings) -> None:
    """Short checkpoint, metrics, transform lease and transform slice intervals, for tests
    that wait on them (a fleet's processes take them from the environment: set them before
    it starts)."""
    settings.DATAFLOW_CHECKPOINT_SECONDS = 1
    settings.DATAFLOW_METRICS_SECONDS = 1
    settings.DATAFLOW_TRANSFORM_LEASE_SECONDS = 6
    settings.DATAFLOW_STREAM_SLICE_SECONDS = 10


def stream_spec(
    name: str,
    prefix: str,
    sink: Path,
    *,
    parallelism: int = 2,
    batch_size: int = 50,
    trigger_ms: int = 500,
    source: dict | None = None,
    **flow_fields,
) -> dict:
    """An unbounded flow over the topic ``<prefix>orders:*`` into a Parquet sink."""
    flow = {"name": name, "parallelism": parallelism, "batch_size": batch_size, "poll_interval_ms": 50}
    return {
        "flow": {**flow, **flow_fields},
        "source": {"type": "redis_streams", "streams": f"{prefix}orders:*", **(source or {})},
        "format": {"type": "fields", "schema": SCHEMA},
        "transform": {"sql": "SELECT id, customer, amount FROM source", "trigger_ms": trigger_ms},
        "sink": {"type": "parquet", "path": str(sink)},
    }


def sink_ids(sink: Path, run: FlowRun | None = None) -> Counter:
    """The ids in the sink as pyarrow reads the directory (only the files of ``run``, if
    given: their names start with the run's uid)."""
    files = sorted(p for p in sink.rglob("part-*") if p.is_file()) if sink.exists() else []
    if run is not None:
        files = [p for p in files if p.name.startswith(f"part-{run.uid.hex[:12]}-")]
        if not files:
            return Counter()
        return Counter(pq.read_table([str(p) for p in files]).column("id").to_pylist())
    if not files:
        return Counter()
    return Counter(pq.read_table(sink).column("id").to_pylist())


def arrived(sink: Path, sent, run: FlowRun | None = None) -> bool:
    """Whether every id of ``sent`` is in the sink (a file moved in meanwhile: not yet)."""
    try:
        return not Counter(sent) - sink_ids(sink, run)
    except (FileNotFoundError, OSError):
        return False


def what_differs(sink: Path, sent, run: FlowRun | None = None) -> str:
    """Lost and duplicated ids, and where the run is, for a failure message."""
    try:
        got = sink_ids(sink, run)
    except OSError as exc:
        return f"the sink cannot be read: {exc}"
    expected = Counter(sent)
    lost = sorted((expected - got).elements())
    extra = sorted((got - expected).elements())
    where = ""
    if run is not None:
        progress = run_progress(run_id=run.pk)
        untransformed = sum(
            LandedBatch.objects.filter(split__run=run, epoch__isnull=True).values_list("records", flat=True)
        )
        splits = list(Split.objects.filter(run=run).values_list("split_id", "owner_subtask", "records_read"))
        where = (
            f"; run {progress.status} {progress.message!r}, read {progress.records_read}, "
            f"untransformed {untransformed}, splits {splits}"
        )
    return (
        f"{len(expected)} sent, {sum(got.values())} in the sink: {len(lost)} lost {lost[:10]}, "
        f"{len(extra)} extra {extra[:10]}{where}"
    )


def flowctl(*args: str, env: dict[str, str] | None = None) -> dict | list:
    """``manage.py flowctl ARGS --json`` in a process of its own, with the fleet's environment."""
    done = subprocess.run(
        [sys.executable, "manage.py", "flowctl", *args, "--json"],
        cwd=ROOT,
        env={**fleet_env(), **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
    )
    if done.returncode:
        raise AssertionError(f"flowctl {' '.join(args)} failed: {done.stderr[-2000:]}")
    return json.loads(done.stdout)


def only_the_fleet_consumes(fleet: Fleet) -> None:
    """No worker but the fleet's answers (an in-process worker would take its tasks)."""
    nodes = {node for reply in celery_app.control.ping(timeout=1) for node in reply}
    ours = {f"{name}@" for name in fleet.procs}
    assert all(node.split("@")[0] + "@" in ours for node in nodes), f"other workers consume: {nodes}"


def worker_reading(fleet: Fleet, run: FlowRun, names: tuple[str, ...], timeout: float = 60) -> str:
    """The fleet name of a worker that runs a reader slice of ``run`` right now."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for name in names:
            if fleet.reader_slices(name, run):
                return name
        time.sleep(0.1)
    raise AssertionError(f"no worker of {names} runs a reader of run {run.pk}")


def kill_a_reading_worker(fleet: Fleet, flow: DataFlow, producer: Any, sink: Path) -> tuple[FlowRun, list]:
    """Runs ``flow`` on two fleet workers while ``producer`` writes at 200 records/s,
    SIGKILLs the worker that reads once 300 records are in, lets 400 more be written, and
    waits until the sink holds everything sent; returns the run and what was sent."""
    fleet.beat()
    fleet.worker("w1")
    fleet.worker("w2")
    fleet.wait_ready("w1", "w2")
    only_the_fleet_consumes(fleet)
    run = flow_start(flow=flow)
    producer.start(rate=200)

    wait_until(lambda: live(run) >= 300, 90, lambda: f"no progress: {what_differs(sink, producer.sent, run)}")
    victim = worker_reading(fleet, run, ("w1", "w2"))
    fleet.kill(victim)
    killed_at = len(producer.sent)
    wait_until(lambda: len(producer.sent) >= killed_at + 400, 30, lambda: "the producer stalled")
    sent = producer.stop()

    survivor = "w2" if victim == "w1" else "w1"
    wait_until(
        lambda: arrived(sink, sent),
        150,
        lambda: what_differs(sink, sent, run) + "\n" + fleet.log(survivor)[-3000:],
    )
    return run, sent
