"""The streaming transform: epochs over what lands, exactly once into the sink as pyarrow and
pandas read it, after a crash at any moment too.

Runs are built by hand (a flow, a READING run, splits and landed Parquet batches, as readers
would commit them); the tests drive the epochs directly, or run the driver in a process of
its own and SIGKILL it.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from django.db.models import F
from django.utils import timezone

from dataflow.models import DeadLetter, EpochStatus, FlowRun, LandedBatch, RunStatus, Split, TransformEpoch
from dataflow.services.context import coordinator_for, landing_zone, run_key
from dataflow.services.expectations import ExpectationFailed
from dataflow.services.flows import flow_apply, flow_start, flow_stop
from dataflow.services.streams import driver as stream_driver
from dataflow.services.streams.driver import Step, StreamDriver
from dataflow.services.streams.epochs import epoch_key
from dataflow.services.streams.query import QueryKind, plan_contradiction
from dataflow.services.streams.tick import ensure_stream_transform, untransformed_records
from dataflow.spark.session import spark_job
from source_support.errors import ConfigError
from source_support.registry import SOURCES, SourceConnector
from source_support.schema import parse_ddl
from tests.e2e.fleet import ROOT, fleet_env
from tests.factories import DataFlowFactory, FlowRunFactory
from tests.helpers import Beat, spec, wait_for_run, wait_until, write_csv

SCHEMA = "id BIGINT, customer STRING, amount DOUBLE, ts TIMESTAMP"
T0 = datetime(2024, 5, 1, tzinfo=UTC)
WINDOW_SQL = (
    "SELECT window.start AS window_start, window.end AS window_end, customer, count(*) AS n, "
    "sum(amount) AS total FROM source GROUP BY window(ts, '10 seconds'), customer"
)


class Stream:
    """A run of an unbounded flow, built as flow_start would build it, and its splits'
    batches landed as readers would commit them."""

    def __init__(
        self,
        dirs,
        sql: str,
        *,
        sink: dict | None = None,
        transform: dict | None = None,
        schema: str = SCHEMA,
        expect: list[dict] | None = None,
    ) -> None:
        self.sink = dirs.out / "sink"
        self.schema = schema
        flow = DataFlowFactory(
            schema=schema,
            transform={"sql": sql, **(transform or {})},
            sink={"type": "parquet", "path": str(self.sink), **(sink or {})},
            expect=expect,
        )
        self.run = FlowRunFactory(flow=flow, running=True)
        self.out = dirs.out
        self.landed: list[tuple] = []
        self.next_id = 0

    def land(self, split_id: str, seconds: list[float], *, customers: str = "ab") -> list[tuple]:
        """One batch of rows at ``T0 + seconds`` into split ``split_id``; returns the rows."""
        split, _ = Split.objects.get_or_create(run=self.run, split_id=split_id, defaults={"payload": {}})
        rows = []
        for s in seconds:
            rows.append(
                (
                    self.next_id,
                    customers[self.next_id % len(customers)],
                    float(self.next_id),
                    T0 + timedelta(seconds=s),
                )
            )
            self.next_id += 1
        table = pa.Table.from_pylist(
            [dict(zip(("id", "customer", "amount", "ts"), row, strict=True)) for row in rows],
            schema=parse_ddl(self.schema),
        )
        path = landing_zone().batch_path(run_key(self.run), split_id, split.position)
        landing_zone().land(path, table)
        LandedBatch.objects.create(
            split=split,
            start_position=split.position,
            end_position=split.position + len(rows),
            path=str(path),
            records=len(rows),
        )
        Split.objects.filter(pk=split.pk).update(
            position=F("position") + len(rows),
            records_read=F("records_read") + len(rows),
            updated_at=timezone.now(),
        )
        self.landed += rows
        return rows

    def end_input(self) -> None:
        Split.objects.filter(run=self.run).update(status="finished")
        FlowRun.objects.filter(pk=self.run.pk).update(status=RunStatus.TRANSFORMING)

    def refreshed(self) -> FlowRun:
        self.run.refresh_from_db()
        return self.run

    def sink_ids(self) -> Counter:
        if not (self.sink.exists() and any(self.sink.iterdir())):
            return Counter()
        return Counter(pq.read_table(self.sink).column("id").to_pylist())

    def hidden_beside_sink(self) -> list[str]:
        return sorted(p.name for p in self.out.iterdir() if p.name.startswith("."))


def ids(rows) -> Counter:
    return Counter(row[0] for row in rows)


def driver(stream: Stream) -> StreamDriver:
    return StreamDriver(FlowRun.objects.select_related("flow").get(pk=stream.run.pk))


def run_one_epoch(stream: Stream) -> TransformEpoch | None:
    """PLAN, RUN, COMMIT of the next epoch, as one trigger does them."""
    worker = driver(stream)
    epoch = worker.plan()
    if epoch is not None:
        assert worker.run_epoch(epoch) is True
    return epoch


# Stateless


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_each_row_reaches_the_sink_once_through_three_epochs(dirs):
    stream = Stream(dirs, "SELECT id, customer, amount * 2 AS doubled FROM source WHERE amount >= 0")
    for number in (1, 2, 3):
        rows = stream.land("s1", [number, number + 0.5]) + stream.land("s2", [number])

        epoch = run_one_epoch(stream)

        assert (epoch.number, epoch.records_in) == (number, 3)
        assert stream.sink_ids() == ids(stream.landed), f"after epoch {number}"
        assert not LandedBatch.objects.filter(split__run=stream.run).exists()
        assert not any(Path(dirs.landing).rglob("*.parquet"))  # retired with their epoch
        assert set(row[0] for row in rows) <= set(stream.sink_ids())

    table = pq.read_table(stream.sink)
    frame = pd.read_parquet(stream.sink)
    assert Counter(table.column("id").to_pylist()) == ids(stream.landed)
    assert Counter(frame["id"]) == ids(stream.landed)
    assert sorted(frame["doubled"]) == sorted(2.0 * row[2] for row in stream.landed)
    assert sorted(p.name for p in stream.sink.iterdir()) == [
        f"part-{epoch_key(stream.run, n)}.snappy.parquet" for n in (1, 2, 3)
    ]
    assert stream.hidden_beside_sink() == []
    assert TransformEpoch.objects.filter(run=stream.run, status=EpochStatus.COMMITTED).count() == 3
    assert stream.refreshed().stream_state["rows_written"] == 9


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_expectations_count_each_epoch_and_drop_exactly_the_failing_rows(dirs):
    stream = Stream(
        dirs,
        "SELECT id, customer, amount FROM source",
        expect=[
            {"name": "even ids", "check": "id % 2 = 0", "on_fail": "drop"},
            {"name": "small", "check": "amount < 3", "on_fail": "warn"},
        ],
    )
    stream.land("s1", [1, 2, 3])  # ids 0, 1, 2
    first = run_one_epoch(stream)
    stream.land("s1", [4, 5])  # ids 3, 4
    second = run_one_epoch(stream)

    assert stream.sink_ids() == Counter([0, 2, 4])
    first.refresh_from_db()
    second.refresh_from_db()
    assert first.expectation_counts == {
        "even ids": {"passed": 2, "failed": 1, "on_fail": "drop"},
        "small": {"passed": 3, "failed": 0, "on_fail": "warn"},
    }
    assert second.expectation_counts == {
        "even ids": {"passed": 1, "failed": 1, "on_fail": "drop"},
        "small": {"passed": 0, "failed": 2, "on_fail": "warn"},
    }
    assert stream.refreshed().expectation_counts == {
        "even ids": {"passed": 3, "failed": 2, "on_fail": "drop"},
        "small": {"passed": 3, "failed": 2, "on_fail": "warn"},
    }
    letters = DeadLetter.objects.filter(run=stream.run)
    assert sorted(json.loads(letter.raw)["id"] for letter in letters) == [1, 3]
    assert {letter.expectation for letter in letters} == {"even ids"}
    assert sorted(letter.split_id for letter in letters) == [
        "expectation:even ids:epoch 1",
        "expectation:even ids:epoch 2",
    ]


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_failed_expectation_publishes_nothing_of_its_epoch(dirs):
    stream = Stream(
        dirs,
        "SELECT id, customer, amount FROM source",
        expect=[{"name": "few", "check": "id < 2", "on_fail": "fail"}],
    )
    stream.land("s1", [1, 2, 3])
    worker = driver(stream)
    epoch = worker.plan()

    with pytest.raises(ExpectationFailed, match="expectation 'few' failed on 1 of 3 rows"):
        worker.run_epoch(epoch)

    assert stream.sink_ids() == Counter()
    assert TransformEpoch.objects.get(pk=epoch.pk).status == EpochStatus.PLANNED
    assert stream.refreshed().expectation_counts == {}


def sink_rows(sink: Path) -> list[tuple]:
    return sorted(tuple(row.values()) for row in pq.read_table(sink).to_pylist())


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_identity_epochs_publish_the_landed_rows_without_spark(dirs):
    """``SELECT * FROM source`` into a local Parquet sink: each epoch adds the landed files
    as they are, under the epoch's names, row for row what was landed, and no Spark session
    is ever made for the run."""
    stream = Stream(dirs, "SELECT * FROM source")
    for number in (1, 2, 3):
        stream.land("s1", [number, number + 0.5])
        stream.land("s2", [number])

        epoch = run_one_epoch(stream)

        assert (epoch.number, epoch.records_in) == (number, 3)
        assert stream.sink_ids() == ids(stream.landed), f"after epoch {number}"
        assert not any(Path(dirs.landing).rglob("*.parquet"))  # retired with their epoch

    assert sink_rows(stream.sink) == sorted(stream.landed)
    assert pq.read_table(stream.sink).schema.equals(parse_ddl(SCHEMA))
    assert sorted(p.name for p in stream.sink.iterdir()) == sorted(
        f"part-{epoch_key(stream.run, n)}{suffix}.snappy.parquet" for n in (1, 2, 3) for suffix in ("", "-1")
    )
    assert stream.hidden_beside_sink() == []
    run = stream.refreshed()
    assert run.stream_state["rows_written"] == 9
    assert run.spark_app_id == ""  # set by the first Spark job of a run's epochs


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM source WHERE id >= 0",
        "SELECT id, customer, amount, ts FROM source",
        "SELECT * FROM source",
    ],
)
@pytest.mark.slow
def test_a_query_other_than_the_identity_goes_through_spark(dirs, sql):
    """Only the identity itself skips Spark: a filter or a projection (even of every
    column), or a sink that lays out its own files, runs each epoch as a Spark job."""
    sink = {"partition_by": ["customer"]} if sql == "SELECT * FROM source" else None
    stream = Stream(dirs, sql, sink=sink)
    stream.land("s1", [1, 2])

    run_one_epoch(stream)

    assert stream.sink_ids() == ids(stream.landed)
    assert stream.refreshed().spark_app_id != ""


@pytest.mark.django_db(transaction=True)
def test_a_filter_pyarrow_computes_as_spark_runs_no_spark_job(dirs, monkeypatch):
    """A projection and a filter of comparisons over plain columns (``arrow_query``): each
    epoch is computed by pyarrow, no Spark session is made for the run, and the sink holds
    what Spark's epochs of the same query hold (rows and schema)."""
    sql = "SELECT id AS n, customer FROM source WHERE amount >= 2 AND customer <> 'c'"
    plain = "id BIGINT, customer STRING, amount DOUBLE"

    def epochs(name: str) -> Stream:
        stream = Stream(dirs, sql, sink={"path": str(dirs.out / name)}, schema=plain)
        stream.sink = dirs.out / name
        for number in (1, 2):
            stream.land("s1", [number, number], customers="abc")
            stream.land("s2", [number], customers="abc")
            run_one_epoch(stream)
        return stream

    arrow = epochs("arrow")
    assert arrow.refreshed().spark_app_id == ""
    monkeypatch.setattr(stream_driver, "ARROW_EPOCH_MAX_RECORDS", 0)  # every epoch a Spark job
    spark = epochs("spark")
    assert spark.refreshed().spark_app_id != ""

    expected = sorted((row[0], row[1]) for row in arrow.landed if row[2] >= 2 and row[1] != "c")
    assert len(expected) == 2  # ids 3 (a) and 4 (b) of 0-5: amount is the id
    assert sink_rows(arrow.sink) == sink_rows(spark.sink) == expected
    arrow_schema, spark_schema = (pq.read_table(s.sink).schema.remove_metadata() for s in (arrow, spark))
    assert arrow_schema == spark_schema and arrow_schema.names == ["n", "customer"]


def written_by_spark(path: Path) -> bool:
    return b"org.apache.spark.version" in (pq.read_metadata(path).metadata or {})


def one_epoch_file(dirs, name: str, sql: str) -> Path:
    """The sink file of one epoch of ``sql`` over the same three landed rows."""
    stream = Stream(dirs, sql, sink={"path": str(dirs.out / name)})
    stream.land("s1", [1, 2])
    stream.land("s2", [3])
    run_one_epoch(stream)
    (path,) = (dirs.out / name).iterdir()
    return path


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_a_small_epoch_is_written_without_sparks_writer_as_spark_writes_it(dirs, monkeypatch):
    """A small stateless epoch is collected as Arrow and written by pyarrow, skipping the
    commit protocol of Spark's writer: the file reads back as Spark's would, schema and rows.
    A timestamp (Spark writes INT96) keeps Spark's writer."""
    sql = "SELECT id, customer, amount * 2 AS doubled, CAST(ts AS DATE) AS day FROM source WHERE id >= 0"
    arrow = one_epoch_file(dirs, "arrow", sql)
    monkeypatch.setattr(stream_driver, "ARROW_EPOCH_MAX_RECORDS", 0)
    spark = one_epoch_file(dirs, "spark", sql)

    assert not written_by_spark(arrow) and written_by_spark(spark)
    assert arrow.name.split("-")[-1] == spark.name.split("-")[-1] == "00000001.snappy.parquet"
    assert pq.read_table(arrow).schema.remove_metadata() == pq.read_table(spark).schema.remove_metadata()
    assert sink_rows(arrow) == sink_rows(spark) and len(sink_rows(arrow)) == 3
    monkeypatch.undo()
    assert written_by_spark(one_epoch_file(dirs, "timestamps", "SELECT id, ts FROM source WHERE id >= 0"))


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_a_trigger_with_no_new_batch_makes_no_epoch_and_no_file(dirs):
    stream = Stream(dirs, "SELECT * FROM source")
    stream.land("s1", [1])
    run_one_epoch(stream)

    assert driver(stream).trigger() == Step.IDLE
    assert TransformEpoch.objects.filter(run=stream.run).count() == 1
    assert len(list(stream.sink.iterdir())) == 1


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_a_driver_that_waits_for_input_asks_the_readers_for_it(dirs):
    """Between epochs the driver asks readers to land what they hold (their inbox shows the
    count move), so the next epoch takes it rather than waiting for their linger to end."""
    stream = Stream(dirs, "SELECT * FROM source")
    coordinator = coordinator_for(stream.run)
    before = coordinator.reader_inbox(0).input_wanted

    driver(stream).run_slice(deadline=time.monotonic() + 0.3)

    assert coordinator.reader_inbox(0).input_wanted > before


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_an_epoch_whose_rows_are_all_filtered_out_writes_no_file(dirs):
    stream = Stream(dirs, "SELECT * FROM source WHERE amount > 1000")
    stream.land("s1", [1, 2])

    epoch = run_one_epoch(stream)

    assert TransformEpoch.objects.get(pk=epoch.pk).rows_written == 0
    assert list(stream.sink.iterdir()) == []


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("kind", ["json", "csv"])
@pytest.mark.slow
def test_json_and_csv_sinks_get_each_row_once(dirs, kind):
    stream = Stream(dirs, "SELECT id, customer FROM source", sink={"type": kind})
    stream.land("s1", [1, 2])
    run_one_epoch(stream)
    stream.land("s1", [3])
    run_one_epoch(stream)

    files = sorted(stream.sink.iterdir())
    if kind == "json":
        frame = pd.concat(pd.read_json(f, lines=True) for f in files)
    else:
        frame = pd.concat(pd.read_csv(f) for f in files)
    assert Counter(frame["id"]) == ids(stream.landed)
    assert [f.name for f in files] == [f"part-{epoch_key(stream.run, n)}.{kind}" for n in (1, 2)]


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_a_partitioned_sink_gets_one_file_per_partition_and_epoch(dirs):
    stream = Stream(dirs, "SELECT * FROM source", sink={"partition_by": ["customer"]})
    stream.land("s1", [1, 2, 3])
    run_one_epoch(stream)

    assert sorted(str(p.relative_to(stream.sink)) for p in stream.sink.rglob("*.parquet")) == [
        f"customer={c}/part-{epoch_key(stream.run, 1)}.snappy.parquet" for c in "ab"
    ]
    assert stream.sink_ids() == ids(stream.landed)


# Crashes


def crash_before_commit(monkeypatch):
    """The driver dies after its files moved into the sink, before the epoch commits."""

    def die(*args, **kwargs):
        raise RuntimeError("killed before the commit")

    monkeypatch.setattr(StreamDriver, "_latency_ms", die)


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_an_epoch_published_but_not_committed_runs_again_without_duplicates(dirs, monkeypatch):
    stream = Stream(dirs, "SELECT * FROM source", sink={"partition_by": ["customer"]})
    stream.land("s1", [1, 2, 3, 4])
    run_one_epoch(stream)
    stream.land("s1", [5, 6, 7])
    stream.land("s2", [5.5])
    worker = driver(stream)
    epoch = worker.plan()
    with monkeypatch.context() as patch:
        crash_before_commit(patch)
        with pytest.raises(RuntimeError, match="killed before the commit"):
            worker.run_epoch(epoch)
    assert TransformEpoch.objects.get(pk=epoch.pk).status == EpochStatus.PLANNED
    assert stream.sink_ids() == ids(stream.landed)  # published already...
    # ... and a bigger earlier attempt of the same epoch left a file in a partition the
    # retry does not write.
    leftover = stream.sink / "customer=zz" / f"part-{epoch_key(stream.run, 2)}.snappy.parquet"
    leftover.parent.mkdir()
    leftover.write_bytes((stream.sink / "customer=a" / leftover.name).read_bytes())

    restarted = driver(stream)
    again = restarted.plan()
    assert again.pk == epoch.pk and again.number == 2
    assert restarted.run_epoch(again) is True

    assert stream.sink_ids() == ids(stream.landed)
    assert Counter(pd.read_parquet(stream.sink)["id"]) == ids(stream.landed)
    assert not leftover.exists()
    assert stream.hidden_beside_sink() == []
    assert TransformEpoch.objects.get(pk=epoch.pk).status == EpochStatus.COMMITTED


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_a_stopped_run_commits_nothing_more(dirs):
    stream = Stream(dirs, "SELECT * FROM source")
    stream.land("s1", [1])
    worker = driver(stream)
    epoch = worker.plan()
    flow_stop(flow=stream.run.flow)

    assert worker.run_epoch(epoch) is False
    assert worker.trigger() == Step.ENDED
    assert stream.sink_ids() == Counter()
    assert TransformEpoch.objects.get(pk=epoch.pk).status == EpochStatus.PLANNED
    assert stream.hidden_beside_sink() == []


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_a_driver_whose_epoch_another_driver_committed_meanwhile_steps_back(dirs):
    # After a quick stop and resume two drivers may run the same planned epoch: the one that
    # commits first removes its landed input, and the other's Spark job then finds it gone.
    # (Not the identity: its epochs run no Spark job.)
    stream = Stream(dirs, "SELECT id, customer, amount FROM source")
    stream.land("s1", [1, 2])
    slow, fast = driver(stream), driver(stream)
    epoch = slow.plan()
    read_input = slow._source_frame

    def read_after_the_other_committed(spark, paths, planned):
        assert fast.run_epoch(fast.plan()) is True  # the same epoch, committed first
        return read_input(spark, paths, planned)

    slow.plan = lambda: epoch
    slow._source_frame = read_after_the_other_committed

    assert slow.trigger() == Step.ENDED  # it leaves the run to the other driver
    run = stream.refreshed()
    assert run.status == RunStatus.READING and run.message == ""
    assert stream.sink_ids() == ids(stream.landed)


DRIVER = """
import sys, time
import django
django.setup()
from dataflow.models import ACTIVE_RUN_STATUSES, FlowRun
from dataflow.services.streams.driver import stream_transform
run_id = int(sys.argv[1])
while FlowRun.objects.filter(pk=run_id, status__in=ACTIVE_RUN_STATUSES).exists():
    stream_transform(run_id=run_id)  # False while the killed driver's lease lapses
    time.sleep(0.1)
"""


class DriverProcess:
    """The streaming transform in a process of its own (with its Spark JVM), as a worker runs it."""

    def __init__(self, run: FlowRun, log_dir: Path) -> None:
        self.run, self.log_dir, self.proc, self.starts = run, log_dir, None, 0

    def start(self) -> None:
        self.starts += 1
        log = open(self.log_dir / f"driver-{self.starts}.log", "wb")  # noqa: SIM115 - closed with the process
        env = {
            **fleet_env(),
            "DJANGO_SETTINGS_MODULE": "dataflow.settings",
            "DATAFLOW_TRANSFORM_LEASE_SECONDS": "2",
            "DATAFLOW_STREAM_SLICE_SECONDS": "3",
            "DATAFLOW_SPARK_LOG": str(self.log_dir / "spark.log"),
        }
        self.proc = subprocess.Popen(
            [sys.executable, "-c", DRIVER, str(self.run.pk)],
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip

    def kill(self) -> None:
        """SIGKILL of the driver and its JVM: nothing is cleaned up or released."""
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.kill()


KILLS = int(os.environ.get("STREAM_KILLS", "3"))


def kill_left(stream: Stream) -> str:
    """What a kill left: an epoch committed (between epochs), or planned, with its files
    already published or not."""
    planned = TransformEpoch.objects.filter(run=stream.run, status=EpochStatus.PLANNED).first()
    if planned is None:
        return "committed"
    published = any(stream.sink.rglob(f"part-{epoch_key(stream.run, planned.number)}*"))
    return "published, not committed" if published else "planned"


def committed(run: FlowRun) -> int:
    return TransformEpoch.objects.filter(run=run, status=EpochStatus.COMMITTED).count()


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    "sql",
    ["SELECT id, customer, amount FROM source", "SELECT * FROM source"],
    ids=["spark", "identity-without-spark"],
)
def test_sigkilled_drivers_leave_every_row_in_the_sink_exactly_once(dirs, tmp_path, sql):
    stream = Stream(dirs, sql, transform={"trigger_ms": 100})
    process = DriverProcess(stream.run, tmp_path)
    rng = random.Random(int(os.environ.get("STREAM_KILL_SEED", "7")))
    kills: list[str] = []
    try:
        process.start()
        for round_ in range(KILLS):
            target = committed(stream.run) + 3
            while committed(stream.run) < target:  # land small batches while epochs commit
                stream.land(
                    rng.choice(["s1", "s2", "s3"]), [rng.uniform(0, 100) for _ in range(rng.randint(1, 9))]
                )
                time.sleep(0.05)
                assert process.proc.poll() is None, (tmp_path / f"driver-{process.starts}.log").read_text()[
                    -3000:
                ]
            time.sleep(rng.uniform(0, 0.6))  # anywhere in an epoch: plan, Spark, publish, commit
            process.kill()
            kills.append(kill_left(stream))
            if round_ < KILLS - 1:
                stream.land("s1", [1, 2])  # landed while no driver runs
                process.start()
        process.start()
        for _ in range(5):
            stream.land("s2", [3])
        stream.end_input()
        wait_until(
            lambda: stream.refreshed().status != RunStatus.TRANSFORMING,
            120,
            lambda: f"run still {stream.run.status}: {stream.run.message}",
        )
    finally:
        process.stop()

    run = stream.refreshed()
    assert run.status == RunStatus.SUCCEEDED, run.message
    assert stream.sink_ids() == ids(stream.landed)
    assert Counter(pd.read_parquet(stream.sink)["id"]) == ids(stream.landed)
    assert run.rows_written == len(stream.landed)
    assert stream.hidden_beside_sink() == []
    assert committed(run) >= 10


# Windows


def window_rows(sink: Path) -> list[tuple]:
    """(window start in s after T0, customer, n, total) for each row of the sink."""
    frame = pd.read_parquet(sink)
    start = (frame["window_start"].dt.tz_localize(None) - T0.replace(tzinfo=None)).dt.total_seconds()
    return sorted(zip(start.astype(int), frame["customer"], frame["n"], frame["total"].round(6), strict=True))


def pandas_windows(rows: list[tuple]) -> list[tuple]:
    frame = pd.DataFrame(rows, columns=["id", "customer", "amount", "ts"])
    frame["start"] = ((frame["ts"] - T0).dt.total_seconds() // 10 * 10).astype(int)
    grouped = (
        frame.groupby(["start", "customer"]).agg(n=("id", "count"), total=("amount", "sum")).reset_index()
    )
    return sorted(
        zip(grouped["start"], grouped["customer"], grouped["n"], grouped["total"].round(6), strict=True)
    )


@pytest.mark.slow  # over 5 s on 2 cores: not in the fast lane
@pytest.mark.django_db(transaction=True)
def test_windows_are_emitted_once_each_as_the_slowest_split_passes_their_end(dirs):
    stream = Stream(dirs, WINDOW_SQL)
    fast, slow = stream.land("fast", [0, 3, 11, 19.5]), stream.land("slow", [1, 9.9])

    assert run_one_epoch(stream) is None  # the slow split holds the watermark at 9.9 s
    assert untransformed_records(stream.run) == 0  # taken into epoch 1, which waits
    slow += stream.land("slow", [12, 24])  # watermark 19.5 s: window [0, 10) closes
    epoch = run_one_epoch(stream)
    assert (epoch.window_from_ms, epoch.window_to_ms) == (
        None,
        int((T0 + timedelta(seconds=10)).timestamp() * 1000),
    )
    assert window_rows(stream.sink) == pandas_windows(
        [r for r in fast + slow if r[3] < T0 + timedelta(seconds=10)]
    )

    fast += stream.land("fast", [21, 33, 38])
    slow += stream.land("slow", [25, 29])  # watermark 29 s: [10, 20) closes
    run_one_epoch(stream)
    assert {r[0] for r in window_rows(stream.sink)} == {0, 10}

    late = stream.land("fast", [5, 8, 41])  # 5 s and 8 s: their window was emitted
    assert run_one_epoch(stream) is None  # watermark still 29 s: nothing closes
    slow += stream.land("slow", [44])  # watermark 41 s: [20, 30), [30, 40) close
    run_one_epoch(stream)
    assert stream.refreshed().stream_state["late_rows"] == 2
    assert {r[0] for r in window_rows(stream.sink)} == {0, 10, 20, 30}

    stream.end_input()
    final = run_one_epoch(stream)

    assert final.final and final.window_to_ms is None
    on_time = [r for r in fast + slow + late if not (r in late and r[3] < T0 + timedelta(seconds=20))]
    assert window_rows(stream.sink) == pandas_windows(on_time)
    run = stream.refreshed()
    assert run.status == RunStatus.SUCCEEDED
    assert "2 rows came after their window was emitted" in run.message
    assert run.rows_written == len(pandas_windows(on_time))
    assert not LandedBatch.objects.filter(split__run=run).exists()


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_window_results_equal_pandas_over_all_records_when_the_input_ends(dirs):
    stream = Stream(dirs, WINDOW_SQL, transform={"watermark_delay": "5 seconds"})
    rng = random.Random(3)
    for step in range(6):
        for split in ("a", "b"):
            base = step * 7 if split == "a" else step * 4
            stream.land(split, [base + rng.uniform(-3, 3) for _ in range(5)], customers="xyz")
        run_one_epoch(stream)
    stream.end_input()
    run_one_epoch(stream)

    late = stream.refreshed().stream_state["late_rows"]
    assert late == 0  # a 5 s delay covers the 3 s of disorder
    assert window_rows(stream.sink) == pandas_windows(stream.landed)
    assert len(window_rows(stream.sink)) == len(set((r[0], r[1]) for r in window_rows(stream.sink)))


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_an_idle_split_does_not_hold_the_watermark_back(dirs):
    stream = Stream(dirs, WINDOW_SQL)
    stream.land("busy", [1, 15, 27])
    stream.land("quiet", [2])

    assert driver(stream).plan() is None  # quiet's 2 s holds it
    quiet = Split.objects.get(run=stream.run, split_id="quiet")
    Split.objects.filter(pk=quiet.pk).update(updated_at=timezone.now() - timedelta(seconds=11))
    epoch = driver(stream).plan()

    assert epoch.window_to_ms == int((T0 + timedelta(seconds=20)).timestamp() * 1000)


# Queries that need the whole input


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_an_aggregation_without_window_writes_only_when_the_input_ends(dirs):
    stream = Stream(
        dirs, "SELECT customer, count(*) AS n, sum(amount) AS total FROM source GROUP BY customer"
    )
    stream.land("s1", [1, 2, 3])
    stream.land("s2", [4])

    assert driver(stream).trigger() == Step.IDLE  # the batches wait in epoch 1 while reading...
    assert not TransformEpoch.objects.filter(run=stream.run).exists()
    assert untransformed_records(stream.run) == 0  # ... so backpressure does not hold readers
    assert not stream.sink.exists()
    stream.land("s2", [5])
    stream.end_input()
    assert driver(stream).trigger() == Step.ENDED  # ... then one final epoch ends the run

    frame = pd.read_parquet(stream.sink).sort_values("customer")
    expected = pd.DataFrame(stream.landed, columns=["id", "customer", "amount", "ts"]).groupby("customer")
    assert list(frame["n"]) == list(expected["id"].count())
    assert list(frame["total"]) == list(expected["amount"].sum())
    assert stream.refreshed().status == RunStatus.SUCCEEDED


@pytest.fixture()
def stream_source(monkeypatch):
    """A source type whose every config reads without end, for validation."""
    files = SOURCES["files"]
    monkeypatch.setitem(
        SOURCES,
        "endless",
        SourceConnector(
            type="endless", config=files.config, build=files.build, unbounded=lambda config: True
        ),
    )


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("sql", "stop", "refused"),
    [
        ("SELECT customer, count(*) AS n FROM source GROUP BY customer", None, True),
        ("SELECT customer, count(*) AS n FROM source GROUP BY customer", {"after_records": 10}, False),
        ("SELECT * FROM source", None, False),
        (WINDOW_SQL, None, False),
    ],
)
def test_an_unbounded_flow_whose_query_needs_its_end_is_refused_without_a_stop_rule(
    dirs, stream_source, sql, stop, refused
):
    doc = spec("endless", str(dirs.data), str(dirs.out / "sink"))
    doc["source"]["type"] = "endless"
    doc["format"] = {"type": "csv", "schema": SCHEMA}
    doc["transform"] = {"sql": sql}
    if stop:
        doc["stop"] = stop

    if refused:
        with pytest.raises(ConfigError) as error:
            flow_apply(spec=doc)
        assert error.value.field == "transform.sql"
        assert "only when the input ends" in error.value.reason
    else:
        flow_apply(spec=doc)


def test_a_spark_plan_that_contradicts_the_querys_kind_is_named():
    with spark_job() as spark:
        spark.createDataFrame([], SCHEMA).createOrReplaceTempView("source")

        counted = plan_contradiction(spark.sql("SELECT count(*) AS n FROM source"), QueryKind.STATELESS)
        assert "Aggregate" in counted and "stateless" in counted
        assert plan_contradiction(spark.sql("SELECT * FROM source"), QueryKind.STATELESS) == ""
        assert plan_contradiction(spark.sql(WINDOW_SQL), QueryKind.WINDOW) == ""


# Failures


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_a_query_that_does_not_fit_the_data_fails_the_run_at_once(dirs):
    stream = Stream(dirs, "SELECT id FROM source")
    # A run keeps the spec it started with; the schema checks of its time may have passed it.
    stream.run.spec["transform_sql"] = "SELECT id, nope FROM source"
    stream.run.save(update_fields=["spec"])
    stream.land("s1", [1])

    assert driver(stream).trigger() == Step.ENDED

    run = stream.refreshed()
    assert run.status == RunStatus.FAILED
    assert run.message.startswith("transform failed: [UNRESOLVED_COLUMN"), run.message


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_a_run_that_cannot_stream_fails_with_the_reason_before_any_epoch(dirs):
    stream = Stream(dirs, WINDOW_SQL)
    # A window needs the run's schema: the driver refuses the run before it plans an epoch.
    FlowRun.objects.filter(pk=stream.run.pk).update(schema_ddl="")
    stream.land("s1", [1])

    assert driver(stream).trigger() == Step.ENDED

    run = stream.refreshed()
    assert run.status == RunStatus.FAILED
    assert "a window over a stream needs the run's schema" in run.message, run.message
    assert not TransformEpoch.objects.filter(run=stream.run).exists()


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_other_failures_are_retried_then_fail_the_run_after_the_limit(dirs, monkeypatch, settings):
    settings.DATAFLOW_STREAM_FAILURE_LIMIT = 2
    monkeypatch.setattr(stream_driver, "_backoff_s", lambda failures: 0)
    stream = Stream(dirs, "SELECT * FROM source")
    stream.land("s1", [1])
    crash_before_commit(monkeypatch)
    worker = driver(stream)

    assert worker.trigger() == Step.IDLE
    run = stream.refreshed()
    assert run.status == RunStatus.READING
    assert run.message.startswith("transform retrying: 1 of 2 tries failed"), run.message
    assert worker.trigger() == Step.ENDED
    run = stream.refreshed()
    assert run.status == RunStatus.FAILED
    assert "failed 2 times in a row" in run.message and "killed before the commit" in run.message


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_a_success_after_a_failure_clears_the_retry_note(dirs, monkeypatch):
    monkeypatch.setattr(stream_driver, "_backoff_s", lambda failures: 0)
    stream = Stream(dirs, "SELECT * FROM source")
    stream.land("s1", [1])
    with monkeypatch.context() as patch:
        crash_before_commit(patch)
        driver(stream).trigger()

    assert driver(stream).trigger() == Step.DONE

    run = stream.refreshed()
    assert run.message == "" and run.stream_state["failures"] == 0
    assert stream.sink_ids() == ids(stream.landed)


# The task


@pytest.mark.usefixtures("worker")
@pytest.mark.slow
def test_the_task_streams_landed_rows_and_ends_the_run_with_the_input(dirs, settings):
    settings.DATAFLOW_STREAM_SLICE_SECONDS = 2
    stream = Stream(dirs, "SELECT * FROM source", transform={"trigger_ms": 100})
    ensure_stream_transform(stream.run)
    for i in range(8):
        rows = stream.land("s1", [i])
        wait_until(lambda rows=rows: rows[0][0] in stream.sink_ids(), 60, lambda: stream.refreshed().message)
        ensure_stream_transform(stream.refreshed())  # as each tick does; never a second driver
    stream.end_input()
    ensure_stream_transform(stream.refreshed())
    wait_until(lambda: stream.refreshed().status == RunStatus.SUCCEEDED, 60, lambda: stream.run.message)

    assert stream.sink_ids() == ids(stream.landed)
    assert stream.run.rows_written == 8
    # Each epoch says how old its oldest input was when it committed (for metrics).
    assert all(
        e.latency_ms is not None and e.latency_ms >= 0 for e in TransformEpoch.objects.filter(run=stream.run)
    )


@pytest.mark.usefixtures("worker")
@pytest.mark.slow
def test_a_watched_directory_streams_into_the_sink_until_its_stop_rule(dirs):
    flow = DataFlowFactory(
        source={
            "type": "files",
            "path": str(dirs.data),
            "watch": True,
            "discovery_interval_ms": 200,
            "settle_ms": 0,
        },
        transform={"sql": "SELECT id, sensor FROM source WHERE temperature >= 0", "trigger_ms": 200},
        stop={"after_records": 300},
    )
    sink = dirs.out / flow.name

    with Beat():
        run = flow_start(flow=flow)
        write_csv(dirs.data / "first.csv", range(0, 100))
        wait_until(
            lambda: sink.exists() and any(sink.iterdir()) and len(pq.read_table(sink)) == 100,
            90,
            lambda: f"run {run.pk}: {FlowRun.objects.get(pk=run.pk).message}",
        )
        assert FlowRun.objects.get(pk=run.pk).status == RunStatus.READING  # streaming, not at the end
        write_csv(dirs.data / "second.csv", range(100, 300))
        run = wait_for_run(run, timeout=120)

    assert run.status == RunStatus.SUCCEEDED, run.message
    assert Counter(pq.read_table(sink).column("id").to_pylist()) == Counter(range(300))
    assert run.rows_written == 300
