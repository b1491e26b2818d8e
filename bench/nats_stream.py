"""NATS JetStream benchmark: a nats_jetstream flow against raw nats-py pull consumption.

``python bench/nats_stream.py [--records N] [--rate R] [--seconds S] [--parallelism P]``:

1. A producer publishes N (1,000,000) ~100-byte JSON messages into a stream of 4 subjects
   (``<stream>.0`` ... ``<stream>.3``, one subject filter each).
2. Raw: P (2, our readers' number) processes, each with a durable pull consumer on its
   share of the 4 filters (AckAll, no limit on unacknowledged messages, as ours), fetch
   batches of 10,000 and acknowledge each batch (on its last message), until all N are read. Time: from the start to the last message.
3. Ours: a flow (``nats_jetstream`` source from ``earliest``, ``json`` format, ``SELECT *``,
   Parquet sink) on a warm in-process fleet (Celery worker and beat as ``runflow`` runs
   them, the Spark session started before). Time: from the flow's start to the last of
   the N rows readable in the sink with pyarrow.
4. Latency: the same flow goes on running; a producer process publishes at a steady R
   (10,000) messages/s for S (30) seconds, each carrying the time it was written; a
   watcher reads each new sink file once it appears, and latency = seen in the sink -
   written.

Every sink is checked: every record once (ids compared). The last line is
``throughput_ratio=<ours/raw> ours_rps=<n> raw_rps=<n> latency_p50_s=<s> latency_p99_s=<s>``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import threading
import time
import uuid

from procs import (
    WORK,
    PeakRss,
    SinkWatcher,
    cpu_seconds,
    flow_beat,
    quantile,
    setup_django,
    start_fleet,
    together,
    watched,
)

NATS_URL = os.environ.get("NATS_URL", "nats://127.0.0.1:4222")
SUBJECTS = 4
PAD = "x" * 40
SCHEMA = "id BIGINT, customer STRING, amount DOUBLE, written_ms BIGINT, pad STRING"
OUT = WORK / "stream-out"


def set_up() -> None:
    os.environ.setdefault("DATAFLOW_LANDING_FSYNC", "1")
    setup_django(var_dir=WORK / "nats-var", allowed_roots=[OUT])


def body(i: int, now_ms: int) -> bytes:
    record = {"id": i, "customer": f"c{i % 97}", "amount": i % 1000 / 10, "written_ms": now_ms, "pad": PAD}
    return json.dumps(record).encode()


async def _produce(js, stream: str, first_id: int, count: int) -> None:
    now = int(time.time() * 1000)
    for i in range(first_id, first_id + count):
        await js.publish_async(f"{stream.lower()}.{i % SUBJECTS}", body(i, now))
        if i % 5000 == 4999:
            await js.publish_async_completed()
            now = int(time.time() * 1000)
    await js.publish_async_completed()


class Producer:
    """A NATS connection of the benchmark's own, on an event loop in a thread."""

    def __init__(self, stream: str) -> None:
        import nats

        self.stream = stream
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()
        self.nc = self.run(nats.connect(NATS_URL))
        self.js = self.nc.jetstream()

    def run(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def create(self) -> None:
        from nats.js.api import StreamConfig

        subjects = [f"{self.stream.lower()}.{i}" for i in range(SUBJECTS)]
        self.run(self.js.add_stream(StreamConfig(name=self.stream, subjects=subjects)))

    def produce(self, first_id: int, count: int) -> None:
        self.run(_produce(self.js, self.stream, first_id, count))

    def close(self) -> None:
        self.run(self.js.delete_stream(self.stream))
        self.run(self.nc.close())


def _raw_consumer(stream: str, subjects: list[str], total, seen, ready, go, results) -> None:
    asyncio.run(_raw_consume(stream, subjects, total, seen, ready, go, results))


async def _raw_consume(stream: str, subjects: list[str], total, seen, ready, go, results) -> None:
    import nats
    from nats.js.api import AckPolicy, ConsumerConfig

    nc = await nats.connect(NATS_URL)
    js = nc.jetstream()
    subs = []
    for subject in subjects:
        name = f"raw_{uuid.uuid4().hex[:8]}"
        config = ConsumerConfig(
            durable_name=name, filter_subject=subject, ack_policy=AckPolicy.ALL, max_ack_pending=-1
        )
        await js.add_consumer(stream, config)
        subs.append(await js.pull_subscribe_bind(name, stream))
    ready.release()
    while not go.is_set():
        await asyncio.sleep(0.001)

    async def drain(sub) -> None:
        while seen.value < total:
            try:
                msgs = await sub.fetch(10_000, timeout=0.5)
            except nats.errors.TimeoutError:
                continue
            if not msgs:  # a fetch may end with none (nats-py 2.x), as a timeout does
                continue
            await msgs[-1].ack()
            with seen.get_lock():
                seen.value += len(msgs)

    await asyncio.gather(*(drain(sub) for sub in subs))
    results.put(time.time())
    await nc.close()


def raw_consume(stream: str, total: int, consumers: int) -> float:
    """Messages/s of ``consumers`` nats-py processes sharing the 4 subject filters."""
    subjects = [f"{stream.lower()}.{i}" for i in range(SUBJECTS)]
    started, seen, ends = together(
        _raw_consumer, [(stream, subjects[i::consumers], total) for i in range(consumers)]
    )
    if seen != total:
        sys.exit(f"raw consumers read {seen} messages of {total}")
    return total / (max(ends) - started)


def _steady_producer(stream: str, first_id: int, rate: int, seconds: float, done) -> None:
    asyncio.run(_steady(stream, first_id, rate, seconds, done))


async def _steady(stream: str, first_id: int, rate: int, seconds: float, done) -> None:
    """Publishes ``rate`` messages/s for ``seconds``, ten bursts a second."""
    import nats

    nc = await nats.connect(NATS_URL)
    js = nc.jetstream()
    per_tick = max(1, rate // 10)
    next_id, started = first_id, time.perf_counter()
    while time.perf_counter() - started < seconds:
        tick = time.perf_counter()
        await _produce(js, stream, next_id, per_tick)
        next_id += per_tick
        await asyncio.sleep(max(0.0, 0.1 - (time.perf_counter() - tick)))
    await nc.close()
    done.put(next_id)


def steady(stream: str, first_id: int, rate: int, seconds: float, watcher: SinkWatcher) -> int:
    """Publishes ``rate`` messages/s for ``seconds`` from a process of its own (so the
    producer shares no interpreter with the flow), watching the sink meanwhile; the next id."""
    return watched(_steady_producer, (stream, first_id, rate, seconds), watcher)


def ours(
    producer: Producer, records: int, parallelism: int, rate: int, seconds: float
) -> tuple[float, list[float]]:
    """Our flow's records/s from its start to the last row in the sink, then the
    latencies (s) at a steady ``rate``."""
    from dataflow.models import FlowStatus
    from dataflow.services.flows import flow_apply, flow_start, flow_stop

    sink = OUT / "nats-sink"
    flow, _ = flow_apply(
        spec={
            "flow": {
                "name": "bench-nats",
                "parallelism": parallelism,
                "batch_size": 20_000,
                "poll_interval_ms": 100,
            },
            "source": {"type": "nats_jetstream", "servers": NATS_URL, "stream": producer.stream},
            "format": {"type": "json", "schema": SCHEMA},
            "transform": {"sql": "SELECT * FROM source", "trigger_ms": 1000},
            "sink": {"type": "parquet", "path": str(sink)},
        }
    )
    warm = start_fleet(parallelism, beat=False)
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
        print(f"ours: run {run.pk}, {ours_rps:,.0f} records/s in {done - began:.1f} s; CPU seconds: {cpu}")
        watcher.measure(records)
        next_id = steady(producer.stream, records, rate, seconds, watcher)
        watcher.wait_for(next_id, timeout_s=120)
    finally:
        stop.set()
        flow.refresh_from_db()
        if flow.status == FlowStatus.RUNNING:
            flow_stop(flow=flow)
        warm.stop()
        print(f"ours: peak RSS {meter.stop() / 2**20:.0f} MiB")
    watcher.check_exact(next_id)
    return ours_rps, sorted(watcher.latencies)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--rate", type=int, default=10_000)
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--parallelism", type=int, default=2)
    args = parser.parse_args()
    shutil.rmtree(OUT / "nats-sink", ignore_errors=True)
    OUT.mkdir(parents=True, exist_ok=True)
    set_up()
    producer = Producer(f"BENCH{uuid.uuid4().hex[:8].upper()}")
    producer.create()
    try:
        started = time.perf_counter()
        producer.produce(0, args.records)
        print(
            f"produced {args.records:,} messages on {SUBJECTS} subjects in {time.perf_counter() - started:.1f} s"
        )
        raw_rps = raw_consume(producer.stream, args.records, args.parallelism)
        print(f"raw: {args.parallelism} nats-py processes, fetch 10,000 + ack, {raw_rps:,.0f} messages/s")
        ours_rps, lat = ours(producer, args.records, args.parallelism, args.rate, args.seconds)
    finally:
        producer.close()
    p50, p99 = quantile(lat, 0.5), quantile(lat, 0.99)
    print(f"latency at {args.rate:,} messages/s over {args.seconds:.0f} s: p50 {p50:.3f} s, p99 {p99:.3f} s")
    print(
        f"throughput_ratio={ours_rps / raw_rps:.3f} ours_rps={ours_rps:.0f} raw_rps={raw_rps:.0f} "
        f"latency_p50_s={p50:.3f} latency_p99_s={p99:.3f}"
    )


if __name__ == "__main__":
    main()
