"""A bounded files flow end to end: real Redis, PostgreSQL, Celery worker and Spark.

Modeled on Flink's file source tests: one split, many splits, an idle reader.
"""

from __future__ import annotations

import gzip

import pytest
from celery.signals import task_prerun

from dataflow.models import Assignment, LandedBatch, Split
from dataflow.services.flows import flow_apply, flow_start
from dataflow.services.queues import FAIR_NEXT, RUN_TRANSFORM, TICK_FLOW, TRANSFORM_CHECK
from tests.helpers import multiset, read_parquet_rows, run_flow, spec, wait_for_run, write_csv


def test_single_split_lands_every_row_in_order(worker, dirs, settings):
    settings.DATAFLOW_KEEP_LANDED = True
    sent = write_csv(dirs.data / "only.csv", range(5000))
    doc = spec("single", str(dirs.data / "only.csv"), str(dirs.out / "sink"), parallelism=1, batch_size=700)

    run = run_flow(doc)

    assert run.status == "succeeded", run.message
    batches = LandedBatch.objects.filter(split__run=run).order_by("start_position")
    assert batches.count() == 8  # 5000 rows in batches of at most 700
    landed = [row for batch in batches for row in read_parquet_rows(batch.path)]
    assert landed == sent
    assert sorted(read_parquet_rows(dirs.out / "sink")) == sent
    assert (run.records_read, run.rows_written, run.errors_count) == (5000, 5000, 0)


def test_many_splits_at_parallelism_4_arrive_exactly_once(worker, dirs):
    sent = []
    for i in range(12):
        sent += write_csv(dirs.data / f"part-{i:02d}.csv", range(i * 1000, i * 1000 + 1000))
    with gzip.open(dirs.data / "extra.csv.gz", "wt") as f:
        f.write("id,sensor,temperature\n" + "".join(f"{i},gz,1.0\n" for i in range(20000, 21000)))
    sent += [(i, "gz", 1.0) for i in range(20000, 21000)]
    # split_size_mb small enough that each plain file is cut into several byte ranges
    doc = spec("many", str(dirs.data / "*.csv*"), str(dirs.out / "sink"), batch_size=300)
    doc["source"]["split_size_mb"] = 0.005

    run = run_flow(doc)

    assert run.status == "succeeded", run.message
    assert multiset(read_parquet_rows(dirs.out / "sink")) == multiset(sent)
    splits = Split.objects.filter(run=run)
    assert splits.count() > 13  # plain files were cut into ranges; the gzip file was not
    assert splits.filter(split_id__endswith="extra.csv.gz@0").count() == 1
    readers = set(Assignment.objects.filter(split__run=run).values_list("subtask", flat=True))
    assert len(readers) > 1


def test_idle_reader_does_not_hold_the_flow_open(worker, dirs):
    sent = []
    for i in range(4):
        sent += write_csv(dirs.data / f"f{i}.csv", range(i * 100, i * 100 + 100))
    doc = spec("idle", str(dirs.data), str(dirs.out / "sink"), parallelism=5)

    run = run_flow(doc)

    assert run.status == "succeeded", run.message
    assert multiset(read_parquet_rows(dirs.out / "sink")) == multiset(sent)
    assert Split.objects.filter(run=run).count() == 4


def test_transform_runs_spark_sql_and_writes_csv(worker, dirs):
    write_csv(dirs.data / "a.csv", range(700))
    doc = spec("agg", str(dirs.data), str(dirs.out / "sink"))
    doc["transform"]["sql"] = "SELECT sensor, count(*) AS n FROM source GROUP BY sensor"
    doc["sink"] = {"type": "csv", "path": str(dirs.out / "sink")}

    run = run_flow(doc)

    assert run.status == "succeeded", run.message
    lines = [ln for p in sorted((dirs.out / "sink").glob("*.csv")) for ln in p.read_text().splitlines()]
    rows = sorted(ln for ln in lines if ln != "sensor,n")
    assert rows == sorted(f"s{k},100" for k in range(7))
    assert run.rows_written == 7


def test_a_transform_that_does_not_fit_the_data_fails_the_run_before_reading_all(worker, dirs, settings):
    # No schema given: it is inferred when the run starts, so only Spark, at run start,
    # can tell that the column does not exist (with a schema, saving the flow refuses it).
    for i in range(20):
        write_csv(dirs.data / f"part-{i}.csv", range(i * 20_000, (i + 1) * 20_000))
    doc = spec("bad-sql", str(dirs.data), str(dirs.out / "sink"), batch_size=100, parallelism=1)
    del doc["format"]["schema"]
    doc["transform"]["sql"] = "SELECT sensor, count(*) AS n FROM source GROUP BY sensr"

    run = run_flow(doc)

    assert run.status == "failed"
    assert run.message.startswith("transform refused while reading: transform.sql: [UNRESOLVED_COLUMN")
    assert "`sensr`" in run.message and "`sensor`" in run.message and "\n" not in run.message
    assert run.transform_attempts == 0
    assert run.records_read < 400_000, "the run failed before the whole source was read"
    assert LandedBatch.objects.filter(split__run=run).exists()  # what was read is kept
    assert not (dirs.out / "sink").exists()


def test_a_transform_that_fails_at_run_time_is_not_retried(worker, dirs, settings):
    write_csv(dirs.data / "a.csv", range(100))
    doc = spec("bad-cast", str(dirs.data), str(dirs.out / "sink"))
    # Analysis passes; the ANSI cast fails only once rows flow.
    doc["transform"]["sql"] = "SELECT CAST(sensor AS INT) AS n FROM source"

    run = run_flow(doc)

    assert run.status == "failed"
    assert run.message.startswith("transform failed:") and "CAST" in run.message.upper()
    assert run.transform_attempts == 1  # a deterministic error is not retried
    assert not (dirs.out / "sink").exists()


def test_spark_sql_cannot_read_files_directly(dirs):
    from pyspark.errors import AnalysisException

    from dataflow.spark.session import get_spark

    write_csv(dirs.data / "secret.csv", range(3))
    spark = get_spark()

    assert spark.conf.get("spark.sql.runSQLOnFiles") == "false"
    with pytest.raises(AnalysisException):
        spark.sql(f"SELECT * FROM csv.`{dirs.data / 'secret.csv'}`").collect()


def test_sequence_source_flow_writes_every_number_once(worker, dirs):
    doc = spec("numbers", "unused", str(dirs.out / "sink"), parallelism=3, batch_size=700)
    doc["source"] = {"type": "sequence", "count": 10_000, "splits": 9}
    doc["format"] = {"type": "csv"}

    run = run_flow(doc)

    assert run.status == "succeeded", run.message
    assert sorted(r[0] for r in read_parquet_rows(dirs.out / "sink")) == list(range(10_000))
    assert Split.objects.filter(run=run).count() == 9


def test_a_run_on_a_running_worker_is_read_and_published_without_a_beat_tick(worker, dirs):
    sent = []
    for i in range(6):
        sent += write_csv(dirs.data / f"part-{i:02d}.csv", range(i * 500, (i + 1) * 500))
    flow, _ = flow_apply(spec=spec("no-beat", str(dirs.data), str(dirs.out / "sink"), parallelism=2))
    tasks: list[str] = []

    def record(sender=None, **kwargs) -> None:
        tasks.append(sender.name)

    task_prerun.connect(record, weak=False)
    try:
        run = wait_for_run(flow_start(flow=flow), timeout=120)  # no beat runs in this test
    finally:
        task_prerun.disconnect(record)

    assert run.status == "succeeded", run.message
    assert multiset(read_parquet_rows(dirs.out / "sink")) == multiset(sent)
    assert TICK_FLOW not in tasks, "beat's periodic tick never ran: nothing waited for it"
    assert {FAIR_NEXT, TRANSFORM_CHECK, RUN_TRANSFORM} <= set(tasks)  # reader slices run as fair_next
    assert Assignment.objects.filter(split__run=run).exists()
