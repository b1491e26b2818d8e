"""Worker processes SIGKILLed in the middle of a dead-letter replay and of a paused stream
flow: what reaches the sink must be what was sent, each record once.

Real ``celery -A dataflow worker`` and ``beat`` processes (tests/e2e/fleet.py) against the
test's PostgreSQL, Redis and Spark; the sink is read as a plain reader (pandas, pyarrow)
reads it. The replay's worker is killed at the most delicate point of its transform: its
files are in the sink, and the transaction that deletes the replayed dead letters and ends
the run has not committed. A row lock the test holds on one of those dead letters keeps it
there, so the kill lands at that point every time, not by timing.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator

import pandas as pd
import psycopg
import pytest
from django.db import connection

from dataflow.models import Assignment, DeadLetter, FlowRun, RunStatus
from dataflow.services.dead_letters import dead_letters_replay
from dataflow.services.flows import flow_apply, flow_pause, flow_resume, flow_start, flow_stop
from tests.e2e.fleet import Fleet
from tests.e2e.streams_helpers import Producer, arrived, flowctl, sink_ids, stream_spec, what_differs
from tests.helpers import live, wait_for_run, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

#: temperature is read as a whole number first: the rows with a decimal one are dead letters.
STRICT = "id BIGINT, sensor STRING, temperature BIGINT"
FIXED = "id BIGINT, sensor STRING, temperature DOUBLE"
SPARK_QUEUE = {"DATAFLOW_SPARK_QUEUE": "spark"}


@pytest.fixture()
def quick(settings, dirs):
    """Short transform lease, checkpoint and transform slice intervals (set before a fleet
    starts: its processes take them from the environment)."""
    settings.DATAFLOW_CHECKPOINT_SECONDS = 1
    settings.DATAFLOW_METRICS_SECONDS = 1
    settings.DATAFLOW_TRANSFORM_LEASE_SECONDS = 4
    settings.DATAFLOW_STREAM_SLICE_SECONDS = 10
    return dirs


# A replay of dead letters.


def _readings(dirs, files: int = 2, rows: int = 300) -> tuple[dict[int, tuple[str, float]], set[int]]:
    """CSV files of readings, the columns in another order than the schema; every tenth row
    has a decimal temperature. Returns id -> (sensor, temperature) of every row written, and
    the ids of the decimal ones."""
    written: dict[int, tuple[str, float]] = {}
    decimal: set[int] = set()
    for f in range(files):
        lines = ["temperature,id,sensor"]
        for i in range(f * rows, (f + 1) * rows):
            temperature = i + 0.5 if i % 10 == 3 else float(i)
            if i % 10 == 3:
                decimal.add(i)
            written[i] = (f"s{i % 3}", temperature)
            lines.append(f"{temperature:g},{i},s{i % 3}")
        (dirs.data / f"readings-{f}.csv").write_text("\n".join(lines) + "\n")
    return written, decimal


def _readings_doc(dirs, schema: str) -> dict:
    return {
        "flow": {"name": "readings", "parallelism": 2, "poll_interval_ms": 50, "skip_errors": True},
        "source": {"type": "files", "path": str(dirs.data / "*.csv")},
        "format": {"type": "csv", "schema": schema},
        "transform": {"sql": "SELECT id, sensor, CAST(temperature AS DOUBLE) AS temperature FROM source"},
        "sink": {"type": "parquet", "path": str(dirs.out / "sink")},
    }


def _sink_rows(dirs) -> list[tuple[int, str, float]]:
    frame = pd.read_parquet(dirs.out / "sink")
    return [(int(r.id), r.sensor, float(r.temperature)) for r in frame.itertuples()]


def _sink_files(dirs) -> set[str]:
    return {p.name for p in (dirs.out / "sink").iterdir()}


class RowLock:
    """A transaction of its own, on a connection of its own, that holds a row lock until
    ``release``: whoever writes that row waits, and the test sees who waits."""

    def __init__(self) -> None:
        db = connection.settings_dict
        self.conn = psycopg.connect(
            host=db["HOST"],
            port=db["PORT"] or 5432,
            user=db["USER"],
            dbname=db["NAME"],
            password=db["PASSWORD"],
        )
        self.pid = self.conn.info.backend_pid

    def lock(self, table: str, pk: int) -> None:
        self.conn.execute(f'SELECT 1 FROM "{table}" WHERE id = %s FOR UPDATE', [pk]).fetchone()

    def waiting(self) -> list[tuple[int, str]]:
        """(pid, query) of each backend that waits for this lock."""
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pid, query FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))", [self.pid]
            )
            return cursor.fetchall()

    def release(self) -> None:
        self.conn.rollback()
        self.conn.close()


@pytest.fixture()
def row_lock() -> Iterator[RowLock]:
    held = RowLock()
    yield held
    if not held.conn.closed:
        held.release()


def _backend_gone(pid: int) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", [pid])
        return cursor.fetchone()[0] == 0


def test_a_replay_whose_worker_is_sigkilled_while_publishing_adds_each_record_once(
    fleet: Fleet, quick, row_lock
):
    dirs = quick
    written, decimal = _readings(dirs)
    flow, _ = flow_apply(spec=_readings_doc(dirs, STRICT))
    fleet.beat()
    fleet.worker("w1")
    first = wait_for_run(flow_start(flow=flow), timeout=120)
    assert first.status == RunStatus.SUCCEEDED, first.message + fleet.log("w1")[-3000:]
    assert Counter(i for i, _, _ in _sink_rows(dirs)) == Counter(set(written) - decimal)
    letters = list(DeadLetter.objects.filter(run=first).order_by("id"))
    assert sorted(int(d.raw.split(",")[1]) for d in letters) == sorted(decimal)

    flow, _ = flow_apply(spec=_readings_doc(dirs, FIXED))
    files_before = _sink_files(dirs)
    row_lock.lock(DeadLetter._meta.db_table, letters[-1].pk)
    replay = dead_letters_replay(flow=flow, run_id=first.pk)

    def publishing() -> bool:
        assert FlowRun.objects.get(pk=replay.pk).status == RunStatus.TRANSFORMING, "the replay ended"
        return any(query.startswith("DELETE") for _, query in row_lock.waiting())

    wait_until(
        publishing, 120, lambda: f"the replay did not publish: {FlowRun.objects.get(pk=replay.pk).message}"
    )
    # Its rows are in the sink, and the transaction that settles its dead letters is open.
    victim = next(pid for pid, query in row_lock.waiting() if query.startswith("DELETE"))
    assert _sink_files(dirs) - files_before, "the replay's files are not in the sink"
    fleet.kill("w1")
    row_lock.release()
    wait_until(lambda: _backend_gone(victim), 60, lambda: f"the killed worker's backend {victim} lives on")
    assert list(DeadLetter.objects.filter(flow=flow).order_by("id")) == letters  # nothing committed
    assert FlowRun.objects.get(pk=replay.pk).status == RunStatus.TRANSFORMING

    fleet.worker("w2")
    replay = wait_for_run(replay, timeout=180)

    assert replay.status == RunStatus.SUCCEEDED, replay.message + fleet.log("w2")[-3000:]
    assert replay.transform_attempts >= 2
    assert (replay.records_read, replay.errors_count, replay.rows_written) == (len(decimal), 0, len(decimal))
    rows = _sink_rows(dirs)
    assert Counter(i for i, _, _ in rows) == Counter(list(written)), "lost or duplicated ids"
    assert {i: (sensor, temperature) for i, sensor, temperature in rows} == written
    assert not DeadLetter.objects.filter(flow=flow).exists()
    # What the killed attempt left beside the sink was swept by the one that published. An
    # attempt of w2 whose short lease lapsed under load may still be writing its own staging
    # (it is refused at its fence and removes it), so the directory is watched, not looked at once.
    wait_until(
        lambda: sorted(p.name for p in dirs.out.iterdir()) == ["sink"],
        60,
        lambda: f"left beside the sink: {sorted(p.name for p in dirs.out.iterdir())}",
    )


# A paused stream flow.


def _slices_ended_since(fleet: Fleet, name: str, run: FlowRun, since: float) -> None:
    """Waits until each reader of ``run`` has run, in worker ``name``, a whole slice that
    began after ``since`` (time.time()); what it read before then is committed by now."""
    seen: dict[str, int] = {}  # task id -> subtask, of slices begun after ``since``
    ended: set[int] = set()
    subtasks = set(range(run.spec["parallelism"]))

    def done() -> bool:
        active = fleet.reader_slices(name, run)
        for piece in active:
            if piece.started_at > since:
                seen[piece.task_id] = piece.subtask
        running = {piece.task_id for piece in active}
        ended.update(subtask for task_id, subtask in seen.items() if task_id not in running)
        return ended >= subtasks

    wait_until(done, 60, lambda: f"readers {sorted(subtasks - ended)} ran no whole slice in {name}")


def test_a_paused_stream_whose_reader_worker_is_sigkilled_delivers_every_entry_once_after_resume(
    fleet: Fleet, quick, rds, prefix
):
    sink = quick.out / "sink"
    producer = Producer(rds, prefix)
    producer.write(200)  # every stream of the topic exists at the first discovery
    flow, _ = flow_apply(spec=stream_spec(f"pause-{prefix[:-1]}", prefix, sink))
    fleet.beat()
    fleet.worker("w1", env=SPARK_QUEUE)  # the readers: the one killed
    fleet.worker("s1", env=SPARK_QUEUE, queues="spark")  # the streaming transform
    fleet.wait_ready("w1", "s1")
    run = FlowRun.objects.get(pk=flowctl("start", flow.name, env=SPARK_QUEUE)["run"])
    wait_until(lambda: arrived(sink, producer.sent), 120, lambda: what_differs(sink, producer.sent, run))

    flow_pause(flow=flow)
    paused_at = time.time()
    producer.write(300)
    _slices_ended_since(fleet, "w1", run, paused_at)  # held, with their splits
    fleet.kill("w1")
    killed_at = time.time()
    producer.write(100)
    fleet.worker("w2", env=SPARK_QUEUE)
    # The killed readers' leases lapse and their splits go to new readers in w2, held too.
    _slices_ended_since(fleet, "w2", run, killed_at)
    held = live(run)
    _slices_ended_since(fleet, "w2", run, time.time())
    assert live(run) == held < len(producer.sent), f"run {run.pk} read on while paused"

    flow_resume(flow=flow)
    producer.write(200)
    sent = list(producer.sent)
    wait_until(
        lambda: arrived(sink, sent),
        120,
        lambda: what_differs(sink, sent, run) + "\n" + fleet.log("w2")[-3000:],
    )
    assert sink_ids(sink) == Counter(sent), what_differs(sink, sent, run)
    flow_stop(flow=flow)
    assert sink_ids(sink) == Counter(sent), what_differs(sink, sent, run)
    assert FlowRun.objects.get(pk=run.pk).status == RunStatus.STOPPED
    assert Assignment.objects.filter(split__run=run, outcome="expired").exists(), "the victim held splits"
