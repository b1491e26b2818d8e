"""Redis Streams flows end to end: each ``[stop]`` rule (and ``start``) through ``manage.py
runflow NAME --until-done`` (a subprocess, as a user runs it), runflow interrupted and
resumed, the window query against pandas, the stateless query while it runs, a source Redis
(and runflow's only Redis) restarted mid-flow, and bad input.

What arrived in the sink is read with pyarrow/pandas and compared with what was written to
the streams. Each test keeps its streams under a key prefix of its own and deletes them.
``runflow`` runs on the test's PostgreSQL database and its own embedded Redis (broker and
coordination), so its worker never takes tasks meant for the in-process ``worker`` fixture.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest
import redis
from django.conf import settings
from django.db import connection

from connectors.redis_streams.split import decode_position, encode_id, position_ms
from dataflow.models import DataFlow, DeadLetter, FlowRun, Split
from dataflow.services.flows import flow_apply, flow_start, flow_stop
from dataflow.services.runs.tick import flow_tick
from tests.helpers import Beat, live, multiset, wait_for_run, wait_until
from tests.redis_server import PrivateRedis
from tests.server_process import free_port

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[2]
FIELDS = "id BIGINT, customer STRING, amount DOUBLE"
#: A millisecond time in the past that explicit entry ids are placed around.
T = 1_700_000_000_000


def source_url() -> str:
    return settings.REDIS_URL


def record(i: int) -> dict:
    return {"id": i, "customer": f"c{i % 4}", "amount": i / 2}


def row(i: int) -> tuple:
    return (i, f"c{i % 4}", i / 2)


def flow_doc(name: str, prefix: str, sink: Path, *, stop: dict | None = None, **source) -> dict:
    doc = {
        "flow": {"name": name, "parallelism": 2, "batch_size": 50, "poll_interval_ms": 50},
        "source": {
            "type": "redis_streams",
            "url": source_url(),
            "streams": f"{prefix}orders:*",
            "discovery_interval_ms": 300,
            **source,
        },
        "format": {"type": "fields", "schema": FIELDS},
        "transform": {"sql": "SELECT id, customer, amount FROM source", "trigger_ms": 200},
        "sink": {"type": "parquet", "path": str(sink)},
    }
    if stop is not None:
        doc["stop"] = stop
    return doc


def sink_rows(sink: Path) -> list[tuple]:
    """The sink's rows as a plain reader (pyarrow) lists them; none if it has no file yet."""
    if not sink.exists() or not any(p for p in sink.rglob("*.parquet") if not _hidden(p, sink)):
        return []
    table = pq.read_table(sink)
    return list(zip(*[table.column(c).to_pylist() for c in ("id", "customer", "amount")], strict=True))


def _hidden(path: Path, root: Path) -> bool:
    return any(part.startswith((".", "_")) for part in path.relative_to(root).parts)


class Cli:
    """``manage.py`` subprocesses on the test's database and directories, each with an
    embedded Redis of its own (under ``var``) for its broker and coordination."""

    def __init__(self, dirs) -> None:
        db = connection.settings_dict
        auth = db["USER"] + (f":{db['PASSWORD']}" if db["PASSWORD"] else "")
        # The secret keys stay: the flows a test stores are sealed with this process's keys.
        env = {
            k: v
            for k, v in os.environ.items()
            if k == "DATAFLOW_SECRET_KEYS" or not k.startswith(("DATAFLOW_", "REDIS_URL"))
        }
        env.update(
            DATABASE_URL=f"postgres://{auth}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}",
            DATAFLOW_VAR_DIR=str(dirs.root / "var"),
            DATAFLOW_BASE_DIR=str(dirs.root),
            DATAFLOW_ALLOWED_ROOTS=f"{dirs.data}:{dirs.out}",
            DATAFLOW_TICK_SECONDS="1",
            DATAFLOW_READER_LEASE_SECONDS="3",
            DATAFLOW_READER_SLICE_SECONDS="2",
            DATAFLOW_READER_PARK_SECONDS="8",
            DATAFLOW_CHECKPOINT_SECONDS="2",
        )
        self.env = env
        self.procs: list[subprocess.Popen] = []

    def manage(self, *args: str, timeout: float = 240) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def start(self, *args: str) -> subprocess.Popen:
        proc = subprocess.Popen(
            [sys.executable, "manage.py", *args],
            cwd=ROOT,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.procs.append(proc)
        return proc

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.communicate()


@pytest.fixture()
def cli(dirs):
    cli = Cli(dirs)
    yield cli
    cli.close()


def runflow_until_done(cli: Cli, name: str) -> subprocess.Popen:
    return cli.start("runflow", name, "--until-done", "--no-progress")


def finished(proc: subprocess.Popen, timeout: float = 240) -> tuple[int, str]:
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out + err


def active_run(name: str) -> FlowRun | None:
    return FlowRun.objects.filter(flow__name=name).order_by("-id").first()


def reading_before_producing(name: str, proc: subprocess.Popen) -> None:
    """Waits for runflow's run to be reading. A producer started before runflow would
    pile up a backlog while Django and the JVM start (300 entries/s for 5-10 s under load),
    and the first epochs could reach the ``after_records`` rule before the test's Ctrl-C."""
    wait_until(
        lambda: (run := active_run(name)) is not None and run.status == "reading" or proc.poll() is not None,
        120,
        lambda: "runflow's run never started reading",
    )
    assert proc.poll() is None, "runflow ended before its run started reading"


def server_ms(rds: redis.Redis) -> int:
    seconds, micros = rds.time()
    return seconds * 1000 + micros // 1000


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat().replace("+00:00", "Z")


# Stop rules, through runflow


def test_one_stream_and_more_readers_than_streams_end_at_latest(cli, rds, prefix, dirs):
    for i in range(40):
        rds.xadd(f"{prefix}orders", record(i))
    sink = dirs.out / "sink"
    doc = flow_doc("one-stream", prefix, sink, stop={"at": "latest"})
    doc["source"]["streams"] = f"{prefix}orders"  # a key, not a pattern
    doc["flow"]["parallelism"] = 4
    flow_apply(spec=doc)

    code, output = finished(runflow_until_done(cli, "one-stream"))

    assert code == 0, output[-3000:]
    assert multiset(sink_rows(sink)) == multiset(row(i) for i in range(40))


def test_stop_at_latest_reads_what_was_there_when_the_run_started_and_ends(cli, rds, prefix, dirs):
    sent = []
    for i in range(90):
        rds.xadd(f"{prefix}orders:{i % 3}", record(i))
        sent.append(row(i))
    # Two streams that never get data: one never had any, one lost its only entry.
    rds.xgroup_create(f"{prefix}orders:empty", "other", id="$", mkstream=True)
    gone = rds.xadd(f"{prefix}orders:emptied", record(-1))
    rds.xdel(f"{prefix}orders:emptied", gone)
    sink = dirs.out / "sink"
    flow_apply(spec=flow_doc("latest", prefix, sink, stop={"at": "latest"}))

    proc = runflow_until_done(cli, "latest")
    wait_until(
        lambda: active_run("latest") is not None or proc.poll() is not None,
        120,
        lambda: "runflow started no run",
    )
    for i in range(90, 120):  # after the run started: not read
        rds.xadd(f"{prefix}orders:{i % 4}", record(i))
    code, output = finished(proc)

    assert code == 0, output[-3000:]
    assert f"run {active_run('latest').pk} succeeded: 90 records read" in output, output[-3000:]
    assert multiset(sink_rows(sink)) == multiset(sent)


def _records_around_t(rds, prefix: str) -> dict[str, tuple]:
    """Entries placed in time around ``T`` in three streams (entry id -> row), and a
    fourth stream whose entries all come after ``T``; then entries added now."""
    placed = {}
    i = 0
    for s in range(3):
        key = f"{prefix}orders:{s}"
        ids = [f"{T - 3000 + k * 700}-0" for k in range(4)]
        ids += [f"{T}-0", f"{T}-1", f"{T}-2", f"{T + 1}-0", f"{T + 2500}-0"]
        for entry_id in ids:
            rds.xadd(key, record(i), id=entry_id)
            placed[(key, entry_id)] = row(i)
            i += 1
        rds.xadd(key, record(i))  # now: long after T
        placed[(key, "now")] = row(i)
        i += 1
    for k in range(3):
        rds.xadd(f"{prefix}orders:late", record(i), id=f"{T + 5000 + k}-0")
        placed[(f"{prefix}orders:late", f"{T + 5000 + k}-0")] = row(i)
        i += 1
    return placed


def _id_at_most(entry_id: str, bound: tuple[int, int], *, below: bool = False) -> bool:
    """Whether ``entry_id`` ("now": later than any) is at most ``bound`` (below it)."""
    if entry_id == "now":
        return False
    ms, seq = (int(part) for part in entry_id.split("-"))
    return (ms, seq) < bound if below else (ms, seq) <= bound


@pytest.mark.parametrize(
    ("at", "bound"),
    [(iso(T), (T, 2**20 - 1)), (f"{T}-1", (T, 1)), (str(T), (T, 2**20 - 1))],
    ids=["iso-time", "entry-id", "entry-ms"],
)
def test_stop_at_a_time_or_an_entry_id_reads_the_entries_up_to_it_and_ends(cli, rds, prefix, dirs, at, bound):
    placed = _records_around_t(rds, prefix)
    sink = dirs.out / "sink"
    flow_apply(spec=flow_doc("placed", prefix, sink, stop={"at": at}))

    code, output = finished(runflow_until_done(cli, "placed"))

    expected = [r for (_, entry_id), r in placed.items() if _id_at_most(entry_id, bound)]
    assert code == 0, output[-3000:]
    assert len(expected) == 3 * (4 + (3 if bound[1] > 1 else 2))
    assert multiset(sink_rows(sink)) == multiset(expected)
    assert f"succeeded: {len(expected)} records read" in output, output[-3000:]


@pytest.mark.parametrize(
    ("start", "first"),
    [(iso(T), (T, 0)), (f"{T}-1", (T, 1)), ("latest", None)],
    ids=["iso-time", "entry-id", "latest"],
)
def test_a_start_time_or_entry_id_reads_from_it(cli, rds, prefix, dirs, start, first):
    placed = _records_around_t(rds, prefix)
    sink = dirs.out / "sink"
    flow_apply(spec=flow_doc("started", prefix, sink, stop={"at": "latest"}, start=start))

    code, output = finished(runflow_until_done(cli, "started"))

    expected = [
        r for (_, entry_id), r in placed.items() if first and not _id_at_most(entry_id, first, below=True)
    ]
    assert code == 0, output[-3000:]
    assert multiset(sink_rows(sink)) == multiset(expected)
    assert f"succeeded: {len(expected)} records read" in output, output[-3000:]


def test_stop_at_a_time_ahead_reads_up_to_it_as_it_passes_and_ends_with_idle_streams(cli, rds, prefix, dirs):
    stop_ms = server_ms(rds) + 4000
    rds.xadd(f"{prefix}orders:idle", record(-1))  # read, then nothing more comes
    sent = {f"{prefix}orders:idle": [(encode_id(rds.xrange(f"{prefix}orders:idle")[0][0]), row(-1))]}
    sink = dirs.out / "sink"
    flow_apply(spec=flow_doc("ahead", prefix, sink, stop={"at": iso(stop_ms)}))

    proc = runflow_until_done(cli, "ahead")
    i = 0
    while server_ms(rds) <= stop_ms + 1500:
        key = f"{prefix}orders:{i % 3}"
        entry_id = rds.xadd(key, record(i))
        sent.setdefault(key, []).append((encode_id(entry_id), row(i)))
        i += 1
        time.sleep(0.02)
    code, output = finished(proc)

    expected = [r for entries in sent.values() for position, r in entries if position_ms(position) <= stop_ms]
    assert code == 0, output[-3000:]
    assert len(expected) < sum(len(e) for e in sent.values()), "no record came after the stop time"
    assert multiset(sink_rows(sink)) == multiset(expected)


class Producer:
    """Adds records to three streams, a few every 20 ms, until stopped."""

    def __init__(self, rds: redis.Redis, prefix: str, *, fields=record) -> None:
        self.rds, self.prefix, self.fields, self.next = rds, prefix, fields, 0
        #: the rows of the sink's records (``row``), and the entries as written
        self.sent: list[tuple] = []
        self.entries: list[dict] = []
        self.halt = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.halt.wait(0.02):
            pipe = self.rds.pipeline(transaction=False)
            for _ in range(6):
                entry = self.fields(self.next)
                pipe.xadd(f"{self.prefix}orders:{self.next % 3}", entry)
                self.sent.append(row(self.next))
                self.entries.append(entry)
                self.next += 1
            pipe.execute()

    def __enter__(self) -> Producer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.halt.set()
        self.thread.join()


AFTER_RECORDS = 500


def test_stop_after_records_ends_once_that_many_were_committed_each_once(cli, rds, prefix, dirs):
    # Read here: 501-504 records for 500. Readers count what they commit and each stops
    # after its current fetch, so a run reads at most one batch per stream past the rule.
    sink = dirs.out / "sink"
    flow_apply(spec=flow_doc("counted", prefix, sink, stop={"after_records": AFTER_RECORDS}))

    with Producer(rds, prefix) as producer:
        code, output = finished(runflow_until_done(cli, "counted"))

    run = active_run("counted")
    rows = sink_rows(sink)
    assert code == 0, output[-3000:]
    assert run.status == "succeeded"
    assert AFTER_RECORDS <= len(rows) <= AFTER_RECORDS + 3 * 50  # 3 streams, batches of 50
    assert len(set(rows)) == len(rows), "a row reached the sink twice"
    assert set(rows) <= set(producer.sent), "the sink holds a row that was never produced"
    assert len(rows) == run.records_read
    for s in range(3):  # what was read of each stream is its first entries, without a gap
        read = sorted(r for r in rows if r[0] % 3 == s)
        assert read == [r for r in producer.sent if r[0] % 3 == s][: len(read)]


def test_runflow_interrupted_then_resumed_writes_each_entry_once(cli, rds, prefix, dirs):
    sink = dirs.out / "sink"
    flow_apply(spec=flow_doc("resumed", prefix, sink, stop={"after_records": 4500}))

    proc = cli.start("runflow", "resumed", "--no-progress")
    reading_before_producing("resumed", proc)
    with Producer(rds, prefix) as producer:
        wait_until(
            lambda: len(sink_rows(sink)) >= 300 or proc.poll() is not None,
            120,
            lambda: f"no rows in the sink ({run_note(active_run('resumed'))})",
        )
        proc.send_signal(signal.SIGINT)  # Ctrl-C, mid-epoch perhaps
        code, output = finished(proc)
        assert code == 130, output[-3000:]
        stopped = len(sink_rows(sink))
        code, output = finished(runflow_until_done(cli, "resumed"))

    run = active_run("resumed")
    rows = sink_rows(sink)
    assert code == 0, output[-3000:]
    assert "resuming stopped run" in output
    assert len(rows) > stopped
    assert len(set(rows)) == len(rows), "a row reached the sink twice"
    assert len(rows) == run.records_read >= 4500
    for s in range(3):  # what was read of each stream is its first entries, without a gap
        read = sorted(r for r in rows if r[0] % 3 == s)
        assert read == [r for r in producer.sent if r[0] % 3 == s][: len(read)]


# The window query and the stateless query, in the in-process worker

EVENTS = "id BIGINT, customer STRING, amount DOUBLE, ts TIMESTAMP"
T0_MS = int(datetime(2024, 5, 1, tzinfo=UTC).timestamp() * 1000)
WINDOW_SQL = (
    "SELECT window.start AS window_start, customer, count(*) AS n, sum(amount) AS total "
    "FROM source GROUP BY window(ts, '10 seconds'), customer"
)


class Events:
    """Events with an event time (``ts``) in three streams, in time order within each."""

    def __init__(self, rds: redis.Redis, prefix: str) -> None:
        self.rds, self.prefix = rds, prefix
        self.sent: list[dict] = []

    def add(self, windows: range, per_window: int = 4) -> None:
        """``per_window`` events per stream in each 10 s window of ``windows`` (counted
        from ``T0_MS``), spread over the window."""
        for s in range(3):
            for w in windows:
                for k in range(per_window):
                    offset_ms = (k * 10_000 + s * 1_700 + (len(self.sent) * 37) % 900) // per_window
                    self._add(s, T0_MS + w * 10_000 + offset_ms)

    def _add(self, stream: int, ts_ms: int) -> None:
        i = len(self.sent)
        event = {"id": i, "customer": f"c{i % 3}", "amount": i / 2, "ts": iso(ts_ms)}
        self.rds.xadd(f"{self.prefix}orders:{stream}", event)
        self.sent.append({**event, "ts_ms": ts_ms})

    def windows(self, *, before_ms: int | None = None) -> list[tuple]:
        return pandas_windows(self.sent, before_ms=before_ms)


def pandas_windows(events: list[dict], *, before_ms: int | None = None) -> list[tuple]:
    """pandas' groupby of ``events`` into 10 s windows (those ending by ``before_ms``):
    (window start in ms, customer, count, sum)."""
    frame = pd.DataFrame(events)
    frame["ts"] = pd.to_datetime(frame["ts_ms"], unit="ms", utc=True)
    grouped = (
        frame.groupby([pd.Grouper(key="ts", freq="10s"), "customer"])
        .agg(n=("id", "count"), total=("amount", "sum"))
        .reset_index()
    )
    grouped = grouped[grouped["n"] > 0]
    starts = grouped["ts"].map(lambda t: int(t.timestamp() * 1000))
    rows = sorted(zip(starts, grouped["customer"], grouped["n"], grouped["total"], strict=True))
    return [r for r in rows if before_ms is None or r[0] + 10_000 <= before_ms]


def window_rows(sink: Path) -> list[tuple]:
    """The window results in the sink, read with pandas."""
    if not sink.exists() or not any(p for p in sink.rglob("*.parquet") if not _hidden(p, sink)):
        return []
    frame = pd.read_parquet(sink)
    starts = pd.to_datetime(frame["window_start"])
    if starts.dt.tz is None:
        starts = starts.dt.tz_localize("UTC")  # Spark's session time zone is UTC
    ms = starts.map(lambda t: int(t.timestamp() * 1000))
    return sorted(zip(ms, frame["customer"], frame["n"], frame["total"], strict=True))


def event_doc(name: str, prefix: str, sink: Path, sql: str, *, stop: dict | None = None) -> dict:
    doc = flow_doc(name, prefix, sink, stop=stop)
    doc["format"] = {"type": "fields", "schema": EVENTS}
    doc["transform"] = {"sql": sql, "trigger_ms": 200}
    return doc


def test_windows_over_three_streams_equal_pandas_groupby_at_the_end(worker, rds, prefix, dirs):
    events = Events(rds, prefix)
    events.add(range(5))
    sink = dirs.out / "sink"
    flow, _ = flow_apply(spec=event_doc("windows", prefix, sink, WINDOW_SQL, stop={"at": "latest"}))

    with Beat():
        run = wait_for_run(flow_start(flow=flow), timeout=180)

    assert run.status == "succeeded", run.message
    assert window_rows(sink) == events.windows()
    assert run.rows_written == len(events.windows())


def test_a_running_window_flow_writes_only_closed_windows(worker, rds, prefix, dirs):
    events = Events(rds, prefix)
    events.add(range(4))  # every stream's latest event lies in window 3: it stays open
    sink = dirs.out / "sink"
    flow, _ = flow_apply(spec=event_doc("open-windows", prefix, sink, WINDOW_SQL))

    with Beat():
        run = flow_start(flow=flow)
        closed = events.windows(before_ms=T0_MS + 30_000)
        wait_until(
            lambda: window_rows(sink) == closed,
            120,
            lambda: f"windows 0-2 not written: {window_rows(sink)} ({run_note(run)})",
        )
        latest = max(e["ts_ms"] for e in events.sent)
        wait_until(
            lambda: (FlowRun.objects.get(pk=run.pk).stream_state or {}).get("latest_event_ms") == latest,
            60,
            lambda: f"the transform did not take every event ({run_note(run)})",
        )
        assert window_rows(sink) == closed  # having seen every event, window 3 is still open
        events.add(range(4, 5))  # every stream passes the end of window 3
        closed = events.windows(before_ms=T0_MS + 40_000)
        wait_until(
            lambda: window_rows(sink) == closed,
            120,
            lambda: f"window 3 not written: {window_rows(sink)} ({run_note(run)})",
        )
        run.refresh_from_db()
        assert run.status == "reading", run.message
        flow_stop(flow=flow)

    assert window_rows(sink) == closed  # window 4 never closed: it was not written


def test_a_stream_that_never_gets_an_event_does_not_hold_windows_open(worker, rds, prefix, dirs):
    events = Events(rds, prefix)
    events.add(range(4))
    rds.xgroup_create(f"{prefix}orders:quiet", "other", id="$", mkstream=True)  # no event, ever
    sink = dirs.out / "sink"
    flow, _ = flow_apply(spec=event_doc("quiet-stream", prefix, sink, WINDOW_SQL))

    with Beat():
        run = flow_start(flow=flow)
        closed = events.windows(before_ms=T0_MS + 30_000)
        wait_until(
            lambda: window_rows(sink) == closed,
            90,
            lambda: f"windows 0-2 not written: {window_rows(sink)} ({run_state(run)})",
        )
        flow_stop(flow=flow)


def run_state(run: FlowRun) -> str:
    """What a run that does not end is at: its note, splits and live readers."""
    from dataflow.services.context import coordinator_for

    splits = [
        f"{s.split_id} {s.status} owner={s.owner_subtask}/{s.owner_token[:6]} read={s.records_read}"
        for s in Split.objects.filter(run=run).order_by("split_id")
    ]
    live = coordinator_for(run).live_readers(run.spec["parallelism"])
    return f"{run_note(run)}; splits: {'; '.join(splits)}; live readers: {live}"


def run_note(run: FlowRun) -> str:
    run.refresh_from_db()
    return f"run {run.status}: {run.message}"


def test_a_stateless_query_writes_rows_while_the_flow_runs(worker, rds, prefix, dirs):
    sink = dirs.out / "sink"
    doc = flow_doc("stateless", prefix, sink)
    doc["transform"]["sql"] = "SELECT id, customer, amount FROM source WHERE id % 5 <> 0"
    flow, _ = flow_apply(spec=doc)

    with Beat(), Producer(rds, prefix) as producer:
        run = flow_start(flow=flow)
        wait_until(
            lambda: len(sink_rows(sink)) >= 100,
            120,
            lambda: f"no rows reached the sink while the flow ran ({run_note(run)})",
        )
        assert FlowRun.objects.get(pk=run.pk).status == "reading"
        producer.halt.set()
        producer.thread.join()
        wanted = multiset(r for r in producer.sent if r[0] % 5)
        wait_until(
            lambda: multiset(sink_rows(sink)) == wanted,
            120,
            lambda: f"{len(sink_rows(sink))} of {sum(wanted.values())} rows in the sink ({run_note(run)})",
        )
        flow_stop(flow=flow)

    assert multiset(sink_rows(sink)) == wanted


# A source Redis restarted mid-flow


@pytest.fixture()
def private_redis(tmp_path):
    server = PrivateRedis(tmp_path / "redis")
    server.start()
    yield server
    server.kill()


class SturdyBeat(Beat):
    """``Beat`` that, as celery beat and runflow's beat do, tries again at the next tick
    after a tick that failed (the source's Redis was down)."""

    def _run(self) -> None:
        from django.db import close_old_connections

        while not self.stop.wait(self.interval):
            for flow_id in DataFlow.objects.values_list("pk", flat=True):
                try:
                    flow_tick(flow_id=flow_id)
                except redis.RedisError as exc:
                    self.failed.append(exc)
            close_old_connections()

    def __init__(self) -> None:
        super().__init__()
        self.failed: list[Exception] = []


@pytest.mark.parametrize("when", ["caught-up", "mid-read"])
def test_a_source_redis_restarted_mid_flow_loses_and_repeats_nothing(worker, private_redis, dirs, when):
    source = private_redis.client()

    def write(ids: range) -> list[tuple]:
        pipe = source.pipeline(transaction=False)
        for i in ids:
            pipe.xadd(f"orders:{i % 3}", record(i))
        pipe.execute()
        return [row(i) for i in ids]

    # The run ends after all records, and the last 300 are written only after the
    # restart: the restart falls in the middle of the run whatever the speed of the
    # machine; "caught-up" restarts once the readers wait for more, "mid-read" while they
    # work through a backlog (most likely: they may be quicker).
    first = 300 if when == "caught-up" else 6000
    sent = write(range(first))
    sink = dirs.out / "sink"
    doc = flow_doc("restarted", "", sink, stop={"after_records": first + 300}, url=private_redis.url)
    doc["flow"]["batch_size"] = 20
    flow, _ = flow_apply(spec=doc)

    with SturdyBeat():
        run = flow_start(flow=flow)
        wait_until(
            lambda: live(run) >= (first if when == "caught-up" else 200),
            120,
            lambda: f"the first records were not read ({run_note(run)})",
        )
        private_redis.stop()
        time.sleep(4)  # down for longer than a client's quick retries
        private_redis.start()
        sent += write(range(first, first + 300))
        wait_until(
            lambda: FlowRun.objects.get(pk=run.pk).status not in ("reading", "transforming"),
            180,
            lambda: f"the run did not end: {run_state(run)}",
        )
        run.refresh_from_db()

    source.close()
    assert run.status == "succeeded", run.message
    assert multiset(sink_rows(sink)) == multiset(sent)
    assert run.records_read == len(sent)


def test_runflow_rides_out_a_restart_of_its_only_redis(cli, private_redis, dirs):
    """The private Redis is the source, and runflow's broker and coordination too."""
    source = private_redis.client()

    def write(ids: range) -> list[tuple]:
        for i in ids:
            source.xadd(f"orders:{i % 3}", record(i))
        return [row(i) for i in ids]

    sent = write(range(150))
    sink = dirs.out / "sink"
    doc = flow_doc("restarted-all", "", sink, stop={"after_records": 300})
    del doc["source"]["url"]  # the deployment's Redis
    doc["flow"]["batch_size"] = 20
    flow_apply(spec=doc)
    cli.env["REDIS_URL"] = private_redis.url

    proc = runflow_until_done(cli, "restarted-all")
    wait_until(
        lambda: (run := active_run("restarted-all")) is not None and live(run) == len(sent),
        120,
        lambda: f"the first half was not read: {proc.poll()}",
    )
    private_redis.stop()
    time.sleep(4)
    private_redis.start()
    sent += write(range(150, 300))
    code, output = finished(proc)

    source.close()
    assert code == 0, output[-3000:]
    assert multiset(sink_rows(sink)) == multiset(sent)
    assert active_run("restarted-all").records_read == len(sent)


# Bad input


def test_a_start_that_is_no_id_and_no_time_is_refused_naming_source_start(cli, prefix, dirs):
    doc = flow_doc("bad-start", prefix, dirs.out / "sink", stop={"at": "latest"}, start="yesterday")
    (dirs.root / "flow.toml").write_text(toml(doc))

    done = cli.manage("applyflows", str(dirs.root / "flow.toml"))

    assert done.returncode != 0
    assert "source.start" in done.stderr and "'yesterday'" in done.stderr, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    assert not DataFlow.objects.filter(name="bad-start").exists()


def toml(doc: dict) -> str:
    """A flow spec as TOML (tables of strings, numbers and booleans)."""

    def value(v) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, (int, float)):
            return str(v)
        return '"' + str(v).replace("\\", "\\\\").replace('"', '\\"') + '"'

    return "\n".join(
        f"[{section}]\n" + "".join(f"{k} = {value(v)}\n" for k, v in table.items())
        for section, table in doc.items()
    )


def test_streams_that_match_nothing_yet_wait_and_are_read_when_they_appear(worker, rds, prefix, dirs):
    sink = dirs.out / "sink"
    flow, _ = flow_apply(spec=flow_doc("waiting", prefix, sink, stop={"after_records": 40}))

    with Beat():
        run = flow_start(flow=flow)
        wait_until(
            lambda: FlowRun.objects.get(pk=run.pk).message.startswith("waiting:"),
            60,
            lambda: f"the run does not say it waits: {run_note(run)}",
        )
        run.refresh_from_db()
        assert run.status == "reading"
        assert f"{prefix}orders:*" in run.message, run.message
        for i in range(40):
            rds.xadd(f"{prefix}orders:{i % 2}", record(i))
        run = wait_for_run(run, timeout=120)

    assert run.status == "succeeded", run.message
    assert multiset(sink_rows(sink)) == multiset(row(i) for i in range(40))


def test_runflow_says_it_waits_for_streams_that_match_nothing(cli, rds, prefix, dirs):
    sink = dirs.out / "sink"
    flow_apply(spec=flow_doc("waiting-cli", prefix, sink, stop={"after_records": 20}))

    proc = cli.start("runflow", "waiting-cli", "--until-done")
    wait_until(
        lambda: (run := active_run("waiting-cli")) is not None and run.message.startswith("waiting:"),
        120,
        lambda: f"the run does not say it waits ({proc.poll()})",
    )
    for i in range(20):
        rds.xadd(f"{prefix}orders:{i % 2}", record(i))
    code, output = finished(proc)

    assert code == 0, output[-3000:]
    assert f"waiting: nothing matches source.streams '{prefix}orders:*' yet" in output, output[-3000:]
    assert multiset(sink_rows(sink)) == multiset(row(i) for i in range(20))


@pytest.fixture()
def tcp_server():
    """Starts TCP servers that take each connection and answer it with fixed bytes
    (nothing: they close it at once, as a proxy whose backend is down does); returns the
    port. They stop at the end of the test."""
    servers: list[tuple[socket.socket, threading.Event, threading.Thread]] = []

    def start(answer: bytes) -> int:
        server = socket.create_server(("127.0.0.1", 0))
        server.settimeout(0.2)
        halt = threading.Event()

        def serve() -> None:
            while not halt.is_set():
                try:
                    conn, _ = server.accept()
                except TimeoutError:
                    continue
                with conn:
                    conn.recv(1024)
                    conn.sendall(answer)

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        servers.append((server, halt, thread))
        return server.getsockname()[1]

    yield start
    for server, halt, thread in servers:
        halt.set()
        thread.join()
        server.close()


@pytest.mark.parametrize(
    ("server", "auth"),
    [
        ("nothing", "reader:s3cr3t-pw@"),
        ("web", "reader:s3cr3t-pw@"),
        ("closes", "reader:s3cr3t-pw@"),
        ("closes", ""),
    ],
)
def test_an_unreachable_url_fails_runflow_naming_source_url_without_its_password(
    cli, prefix, dirs, tcp_server, server, auth
):
    if server == "nothing":
        port = free_port()  # nothing listens there (tests/server_process.py says why not a probe)
    else:
        port = tcp_server({"web": b"HTTP/1.1 400 Bad Request\r\n\r\n", "closes": b""}[server])
    url = f"redis://{auth}127.0.0.1:{port}/0"
    flow_apply(spec=flow_doc("unreachable", prefix, dirs.out / "sink", stop={"at": "latest"}, url=url))

    code, output = finished(runflow_until_done(cli, "unreachable"), timeout=120)

    assert code != 0
    assert "source.url" in output, output[-3000:]
    assert f"127.0.0.1:{port}" in output, output[-3000:]
    assert "s3cr3t-pw" not in output
    assert "Traceback" not in output, output[-3000:]


def _bad_amount_streams(rds, prefix: str) -> tuple[list[tuple], str]:
    """Records in two streams, one of which has amount "abc" (a DOUBLE column); returns
    the good rows and the bad entry's id."""
    good = []
    bad_id = ""
    for i in range(30):
        key = f"{prefix}orders:{i % 2}"
        if i == 17:
            bad_id = rds.xadd(key, {**record(i), "amount": "abc"}).decode()
            continue
        rds.xadd(key, record(i))
        good.append(row(i))
    return good, bad_id


def test_a_bad_record_fails_its_split_naming_the_entry_id(worker, rds, prefix, dirs):
    good, bad_id = _bad_amount_streams(rds, prefix)
    flow, _ = flow_apply(spec=flow_doc("poison", prefix, dirs.out / "sink", stop={"at": "latest"}))

    with Beat():
        run = wait_for_run(flow_start(flow=flow), timeout=120)

    assert run.status == "failed"
    assert bad_id in run.message and f"{prefix}orders:1" in run.message, run.message
    assert "amount" in run.message, run.message


def test_bad_records_go_to_dead_letters_with_their_entry_ids_when_skipped(worker, rds, prefix, dirs):
    good, bad_id = _bad_amount_streams(rds, prefix)
    sink = dirs.out / "sink"
    doc = flow_doc("skipping", prefix, sink, stop={"at": "latest"})
    doc["flow"]["skip_errors"] = True
    flow, _ = flow_apply(spec=doc)

    with Beat():
        run = wait_for_run(flow_start(flow=flow), timeout=120)

    assert run.status == "succeeded", run.message
    assert multiset(sink_rows(sink)) == multiset(good)
    letters = list(DeadLetter.objects.filter(run=run))
    assert [(d.split_id, decode_position(d.position)) for d in letters] == [(f"{prefix}orders:1", bad_id)]
    assert letters[0].offset == bad_id  # in the source's own words, for a person
    assert '"abc"' in letters[0].raw and "amount" in letters[0].error
    assert run.errors_count == 1


def test_a_window_flow_interrupted_then_resumed_equals_pandas_over_what_it_read(cli, rds, prefix, dirs):
    def event(i: int) -> dict:
        ts_ms = T0_MS + i * 25  # 400 events a window, in time order in every stream
        return {"id": i, "customer": f"c{i % 3}", "amount": i / 2, "ts": iso(ts_ms), "ts_ms": ts_ms}

    sink = dirs.out / "sink"
    flow_apply(spec=event_doc("windows-resumed", prefix, sink, WINDOW_SQL, stop={"after_records": 4000}))

    proc = cli.start("runflow", "windows-resumed", "--no-progress")
    reading_before_producing("windows-resumed", proc)
    with Producer(rds, prefix, fields=event) as producer:
        wait_until(
            lambda: window_rows(sink) or proc.poll() is not None,
            120,
            lambda: f"no window in the sink ({run_note(active_run('windows-resumed'))})",
        )
        proc.send_signal(signal.SIGINT)
        code, output = finished(proc)
        assert code == 130, output[-3000:]
        code, output = finished(runflow_until_done(cli, "windows-resumed"))

    assert code == 0, output[-3000:]
    run = active_run("windows-resumed")
    read = {int(s.split_id.rsplit(":", 1)[1]): s.records_read for s in Split.objects.filter(run=run)}
    events = [
        e for s, count in read.items() for e in [e for e in producer.entries if e["id"] % 3 == s][:count]
    ]
    assert len(events) == run.records_read >= 4000
    assert window_rows(sink) == pandas_windows(events)
