"""Bounded runs whose transform is the identity publish their landed Parquet files without
Spark (``dataflow.services.runs.landed``): through ``runflow`` on the embedded defaults
their sink holds, row by row, what the Spark path writes for the same input, and no JVM is
started; with a worker process SIGKILLed mid-run the sink still holds every row once."""

from __future__ import annotations

import gzip
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dataflow.services.flows import flow_start
from tests.e2e.test_crash_files import _kill_mid_split_and_finish
from tests.e2e.test_runflow import manage_env, run_manage
from tests.factories import DataFlowFactory
from tests.helpers import multiset, read_parquet_rows, write_csv

FLOW = """
[flow]
name = "{name}"
parallelism = 2
batch_size = 20000

[source]
type = "files"
path = "data/*.csv*"

[format]
type = "csv"
schema = "id BIGINT, ts TIMESTAMP, sensor STRING, temperature DOUBLE"

[transform]
sql = "{sql}"

[sink]
type = "parquet"
path = "out/{name}"
"""

START = datetime(2026, 1, 1, tzinfo=UTC)


def _source(data: Path) -> int:
    """Three CSV files (one gzipped) of 30,000 rows each, a null temperature now and then."""
    data.mkdir(parents=True)
    for part in range(3):
        lines = ["id,ts,sensor,temperature"]
        for i in range(part * 30_000, (part + 1) * 30_000):
            ts = (START + timedelta(seconds=i)).strftime("%Y-%m-%d %H:%M:%S")
            lines.append(f"{i},{ts},s{i % 7},{'' if i % 1000 == 7 else i % 997 / 10}")
        text = "\n".join(lines) + "\n"
        if part == 2:
            with gzip.open(data / f"part-{part}.csv.gz", "wt") as f:
                f.write(text)
        else:
            (data / f"part-{part}.csv").write_text(text)
    return 90_000


def _rows(path: Path) -> list[tuple]:
    """The sink's rows sorted by id; timestamps as UTC instants (Spark writes INT96, which
    Arrow reads naive, in nanoseconds; the landed files say UTC, in microseconds)."""
    table = pq.read_table(path)
    ts = table["ts"]
    if ts.type.tz is None:
        ts = ts.cast(pa.timestamp("us")).cast(pa.timestamp("us", tz="UTC"))
    table = table.set_column(table.schema.get_field_index("ts"), "ts", ts)
    columns = ["id", "ts", "sensor", "temperature"]
    return sorted(zip(*(table[c].to_pylist() for c in columns), strict=True))


@pytest.mark.slow
def test_an_identity_run_writes_what_spark_writes_without_starting_spark(tmp_path):
    sent = _source(tmp_path / "data")
    env = manage_env(tmp_path, DATAFLOW_ALLOWED_ROOTS=f"{tmp_path / 'data'}:{tmp_path / 'out'}")
    (tmp_path / "copied.toml").write_text(FLOW.format(name="copied", sql="SELECT * FROM source"))
    (tmp_path / "sparked.toml").write_text(
        FLOW.format(name="sparked", sql="SELECT id, ts, sensor, temperature FROM source")
    )
    run_manage(env, "migrate", "-v0")
    run_manage(env, "applyflows", str(tmp_path / "copied.toml"), str(tmp_path / "sparked.toml"))

    copied = run_manage(env, "runflow", "copied", "--until-done", "--no-progress", "-v", "2").stdout
    sparked = run_manage(env, "runflow", "sparked", "--until-done", "--no-progress", "-v", "2").stdout

    assert f"{sent} records read, 0 errors, {sent} rows written" in copied
    assert f"{sent} records read, 0 errors, {sent} rows written" in sparked
    timings = {name: out.split("timings:")[1] for name, out in (("copied", copied), ("sparked", sparked))}
    assert " jvm=" not in timings["copied"] and " session=" not in timings["copied"], timings
    assert " session=" in timings["sparked"], timings
    ours, spark = _rows(tmp_path / "out" / "copied"), _rows(tmp_path / "out" / "sparked")
    assert len(ours) == sent
    assert ours == spark


@pytest.mark.django_db(transaction=True)
def test_a_sigkilled_reader_loses_and_duplicates_nothing_of_an_identity_run(fleet, dirs):
    sent = []
    for i in range(40):
        sent += write_csv(dirs.data / f"part-{i:03d}.csv", range(i * 4000, (i + 1) * 4000))
    flow = DataFlowFactory(parallelism=2, batch_size=100, sink_path=str(dirs.out / "sink"))
    fleet.beat()
    fleet.worker("w1")
    fleet.worker("w2")
    run = flow_start(flow=flow)

    run = _kill_mid_split_and_finish(run, fleet, sent)

    assert multiset(read_parquet_rows(dirs.out / "sink")) == multiset(sent)
    assert run.records_read == len(sent) and run.rows_written == len(sent)
    assert run.spark_app_id == ""  # published without a Spark job
