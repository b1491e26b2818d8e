"""Streaming benchmark: a Redis Streams flow against raw redis-py consumption.

``python bench/streaming.py [--records N] [--rate R] [--seconds S]``:

1. A producer writes N (1,000,000) ~100-byte records into a 4-stream topic.
2. Raw: one redis-py consumer reads them all with ``XREADGROUP`` + ``XACK`` (COUNT 10,000).
3. Ours: a flow (``redis_streams`` source over the topic from ``earliest``, ``fields``
   format, ``SELECT *``, Parquet sink) runs in this process on a warm fleet: an in-process
   Celery worker and beat, as ``runflow`` runs them, with the Spark session started and one
   job run before the flow starts (a fleet's workers are warm). Time: from the flow's start
   to the last of the N rows readable in the sink with pyarrow.
4. Latency: the producer goes on at a steady R (10,000) records/s for S (30) seconds; each
   record carries the time it was written; a watcher reads each new sink file once it
   appears, and latency = seen in the sink - written. The reader process's RSS is sampled.

The sink is checked: every record once (ids compared). Uses DATABASE_URL / REDIS_URL when
set, else the embedded defaults in ``bench/_work/stream-var``. The last line is
``throughput_ratio=<ours/raw> ours_rps=<n> raw_rps=<n> latency_p50_s=<s> latency_p99_s=<s>``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import threading
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
WORK = REPO / "bench" / "_work"
OUT = WORK / "stream-out"
STREAMS = 4
PAD = "x" * 40
SCHEMA = "id BIGINT, customer STRING, amount DOUBLE, written_ms BIGINT, pad STRING"


def setup_django() -> None:
    sys.path.insert(0, str(REPO))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dataflow.settings")
    os.environ.setdefault("DATAFLOW_VAR_DIR", str(WORK / "stream-var"))
    os.environ["DATAFLOW_ALLOWED_ROOTS"] = str(OUT)
    os.environ.setdefault("DATAFLOW_LANDING_FSYNC", "1")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def produce(client, topic: str, first_id: int, count: int) -> None:
    """``count`` records spread over the topic's streams, in pipelines of 5,000."""
    pipe = client.pipeline(transaction=False)
    now = int(time.time() * 1000)
    for i in range(first_id, first_id + count):
        fields = {"id": i, "customer": f"c{i % 97}", "amount": i % 1000 / 10, "written_ms": now, "pad": PAD}
        pipe.xadd(f"{topic}:{i % STREAMS}", fields)
        if i % 5000 == 4999:
            pipe.execute()
            now = int(time.time() * 1000)
    pipe.execute()


def raw_consume(client, topic: str, total: int) -> float:
    """Records/s of one redis-py consumer reading the topic with XREADGROUP + XACK."""
    keys = [f"{topic}:{i}" for i in range(STREAMS)]
    group = f"raw-{uuid.uuid4().hex[:8]}"
    for key in keys:
        client.xgroup_create(key, group, id="0")
    seen = 0
    started = time.perf_counter()
    while seen < total:
        reply = client.xreadgroup(group, "raw", {k: ">" for k in keys}, count=10_000, block=1000)
        pipe = client.pipeline(transaction=False)
        for key, entries in reply:
            seen += len(entries)
            pipe.xack(key, group, *[entry_id for entry_id, _ in entries])
        pipe.execute()
    return total / (time.perf_counter() - started)


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


def start_fleet(parallelism: int):
    """An in-process worker and beat, as ``runflow`` runs them, with Spark warm."""
    from celery.contrib.testing.worker import start_worker

    from dataflow.celery import app
    from dataflow.spark.session import get_spark

    get_spark().range(1000).selectExpr("sum(id)").collect()
    worker = start_worker(
        app,
        pool="threads",
        concurrency=parallelism + 3,
        perform_ping_check=False,
        loglevel="WARNING",
        shutdown_timeout=30,
    )
    worker.__enter__()
    return worker


def beat(flow_id: int, stop: threading.Event) -> None:
    from django.conf import settings

    from dataflow.services.runs.tick import flow_tick

    while not stop.wait(settings.DATAFLOW_TICK_SECONDS):
        flow_tick(flow_id=flow_id)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--rate", type=int, default=10_000, help="records/s of the latency phase")
    parser.add_argument("--seconds", type=float, default=30, help="length of the latency phase")
    parser.add_argument("--parallelism", type=int, default=2)
    args = parser.parse_args()
    shutil.rmtree(OUT, ignore_errors=True)
    OUT.mkdir(parents=True)
    setup_django()
    import psutil

    from dataflow.models import FlowStatus
    from dataflow.redis_client import get_redis
    from dataflow.services.flows import flow_apply, flow_start, flow_stop

    client = get_redis()
    topic = f"bench:{uuid.uuid4().hex[:8]}"
    started = time.perf_counter()
    produce(client, topic, 0, args.records)
    print(
        f"produced {args.records:,} records into {STREAMS} streams in {time.perf_counter() - started:.1f} s"
    )
    raw_rps = raw_consume(client, topic, args.records)
    print(f"raw: XREADGROUP + XACK, {raw_rps:,.0f} records/s")

    sink = OUT / "sink"
    flow, _ = flow_apply(
        spec={
            "flow": {
                "name": "bench-streaming",
                "parallelism": args.parallelism,
                "batch_size": 20_000,
                "poll_interval_ms": 100,
            },
            "source": {"type": "redis_streams", "streams": f"{topic}:*", "start": "earliest"},
            "format": {"type": "fields", "schema": SCHEMA},
            "transform": {"sql": "SELECT * FROM source", "trigger_ms": 1000},
            "sink": {"type": "parquet", "path": str(sink)},
        }
    )
    worker = start_fleet(args.parallelism)
    stop = threading.Event()
    watcher = SinkWatcher(sink)
    process = psutil.Process()
    try:
        began = time.perf_counter()
        run = flow_start(flow=flow)
        threading.Thread(target=beat, args=(flow.pk, stop), daemon=True).start()
        done = watcher.wait_for(args.records, timeout_s=600)
        ours_rps = args.records / (done - began)
        print(
            f"ours: run {run.pk}, {ours_rps:,.0f} records/s from the flow's start to the last row in the sink"
        )

        rss_start = process.memory_info().rss
        watcher.measure_from_id = args.records
        next_id, phase_start = args.records, time.perf_counter()
        while time.perf_counter() - phase_start < args.seconds:
            tick = time.perf_counter()
            produce(client, topic, next_id, args.rate // 10)
            next_id += args.rate // 10
            watcher.poll()
            time.sleep(max(0.0, 0.1 - (time.perf_counter() - tick)))
        watcher.wait_for(next_id, timeout_s=120)
        rss_end = process.memory_info().rss
    finally:
        stop.set()
        flow.refresh_from_db()
        if flow.status == FlowStatus.RUNNING:
            flow_stop(flow=flow)
        worker.__exit__(None, None, None)
    if sorted(watcher.ids) != list(range(next_id)):
        dupes = len(watcher.ids) - len(set(watcher.ids))
        sys.exit(f"the sink is not exact: {len(watcher.ids)} rows for {next_id} records, {dupes} duplicates")
    lat = sorted(watcher.latencies)
    p50, p99 = statistics.median(lat), lat[int(len(lat) * 0.99) - 1]
    print(
        f"latency at {args.rate:,} records/s over {args.seconds:.0f} s: p50 {p50:.3f} s, p99 {p99:.3f} s, "
        f"max {lat[-1]:.3f} s; process RSS {rss_start / 2**20:.0f} -> {rss_end / 2**20:.0f} MiB"
    )
    print(
        f"throughput_ratio={ours_rps / raw_rps:.3f} ours_rps={ours_rps:.0f} raw_rps={raw_rps:.0f} "
        f"latency_p50_s={p50:.3f} latency_p99_s={p99:.3f}"
    )


if __name__ == "__main__":
    main()
