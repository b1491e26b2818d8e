"""PostgreSQL change data capture benchmark: changes committed at a steady rate, read by a
cdc flow, timed from commit to visible in the sink.

``python bench/postgres_cdc.py [--rate R] [--seconds S] [--parallelism P]``:

1. A private cluster with ``wal_level = logical`` (``tests/postgres_server.py``: ``initdb``
   + ``pg_ctl`` on a free port under ``bench/_work``; the machine's server runs ``replica``),
   a table ``bench_cdc (id bigint PRIMARY KEY, customer text, amount numeric(12,2))``.
2. A flow (``postgres`` source, ``mode = "cdc"``, transform ``SELECT id, unix_micros(_ts)
   AS commit_us ...`` every second, Parquet sink) on a warm in-process fleet (Celery worker
   as ``runflow`` runs it, the Spark session started before); one row is inserted and waited
   for in the sink (the snapshot read and the change stream caught up).
3. A writer process commits R (5,000) inserted rows/s for S (60) seconds, ten transactions
   a second. Each row's ``_ts`` is its transaction's commit time (pgoutput's), so the
   latency of a row is the time its sink file was seen minus its commit time (same machine,
   same clock). ``cdc_rps`` is the rows of the steady phase over the time from the
   writer's start to the last of them visible in the sink.

The sink is checked: every id once. The last line is ``cdc_rps=<n> cdc_p50_s=<s>
cdc_p99_s=<s>``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import threading
import time

from procs import REPO, WORK, SinkWatcher, flow_beat, quantile, setup_django, start_fleet, watched

sys.path.insert(0, str(REPO))
from tests.postgres_server import PrivatePostgres  # noqa: E402 - the repository's root first

OUT = WORK / "postgres-cdc-out"
CLUSTER = WORK / "postgres-cdc-cluster"
TABLE = "bench_cdc"


def _writer(url: str, first_id: int, rate: int, seconds: float, done) -> None:
    """Commits ``rate`` rows/s for ``seconds``, ten transactions a second, paced on the
    clock; puts the next id in ``done``."""
    import psycopg

    per_tick = max(1, rate // 10)
    next_id, started = first_id, time.perf_counter()
    with psycopg.connect(url, autocommit=True) as conn:
        # Paced on the start, not on the last tick: a slow commit is caught up, not lost.
        for tick in range(round(seconds * 10)):
            time.sleep(max(0.0, started + tick / 10 - time.perf_counter()))
            conn.execute(
                f"INSERT INTO {TABLE} SELECT g, 'c' || (g %% 97), (g %% 100000) / 100.0 "
                "FROM generate_series(%s::bigint, %s::bigint) g",
                (next_id, next_id + per_tick - 1),
            )
            next_id += per_tick
    done.put(next_id)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=int, default=5_000)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--parallelism", type=int, default=2)
    args = parser.parse_args()
    shutil.rmtree(OUT, ignore_errors=True)
    shutil.rmtree(CLUSTER, ignore_errors=True)
    shutil.rmtree(WORK / "postgres-cdc-var", ignore_errors=True)
    OUT.mkdir(parents=True, exist_ok=True)
    server = PrivatePostgres(CLUSTER, logical=True)
    server.init()
    server.start()
    try:
        with server.connect() as conn:
            conn.execute(f"CREATE TABLE {TABLE} (id bigint PRIMARY KEY, customer text, amount numeric(12,2))")
        os.environ["DATAFLOW_ALLOWED_INTERNAL_ADDRESSES"] = "127.0.0.1"
        os.environ.setdefault("DATAFLOW_LANDING_FSYNC", "1")
        setup_django(var_dir=WORK / "postgres-cdc-var", allowed_roots=[OUT])
        rps, latencies = ours(server, args.rate, args.seconds, args.parallelism)
    finally:
        with_stop(server)
    p50, p99 = quantile(latencies, 0.5), quantile(latencies, 0.99)
    print(f"latency at {args.rate:,} rows/s over {args.seconds:.0f} s: p50 {p50:.3f} s, p99 {p99:.3f} s")
    print(f"cdc_rps={rps:.0f} cdc_p50_s={p50:.3f} cdc_p99_s={p99:.3f}")


def with_stop(server: PrivatePostgres) -> None:
    from connectors.postgres import snapshot

    snapshot.release_all()
    try:
        server.stop()
    except subprocess.CalledProcessError as exc:
        print(f"the private cluster did not stop: {exc}", file=sys.stderr)
    shutil.rmtree(CLUSTER, ignore_errors=True)


def ours(server: PrivatePostgres, rate: int, seconds: float, parallelism: int) -> tuple[float, list[float]]:
    from dataflow.models import FlowStatus
    from dataflow.services.flows import flow_apply, flow_delete, flow_start, flow_stop

    sink = OUT / "sink"
    flow, _ = flow_apply(
        spec={
            "flow": {"name": "bench-postgres-cdc", "parallelism": parallelism, "poll_interval_ms": 100},
            "source": {"type": "postgres", "url": server.url, "table": TABLE, "mode": "cdc"},
            "transform": {
                "sql": "SELECT id, CAST(unix_micros(_ts) AS BIGINT) AS commit_us FROM source WHERE _op = 'c'",
                "trigger_ms": 1000,
            },
            "sink": {"type": "parquet", "path": str(sink)},
        }
    )
    warm = start_fleet(parallelism, beat=False)
    stop = threading.Event()
    watcher = SinkWatcher(sink, written="commit_us", unit_s=1e-6)
    try:
        flow_start(flow=flow)
        threading.Thread(target=flow_beat, args=(flow.pk, stop), daemon=True).start()
        with server.connect() as conn:
            conn.execute(f"INSERT INTO {TABLE} VALUES (0, 'first', 0)")
        watcher.wait_for(1, timeout_s=300)
        print("ours: the snapshot read and the first change in the sink", flush=True)
        watcher.measure(1)
        began = time.perf_counter()
        next_id = watched(_writer, (server.url, 1, rate, seconds), watcher)
        done = watcher.wait_for(next_id, timeout_s=300)
        rows = next_id - 1
        rps = rows / (done - began)
        print(
            f"ours: {rows:,} rows committed in {seconds:.0f} s ({rows / seconds:,.0f}/s), "
            f"all in the sink after {done - began:.1f} s"
        )
    finally:
        stop.set()
        flow.refresh_from_db()
        if flow.status == FlowStatus.RUNNING:
            flow_stop(flow=flow)
        warm.stop()
        flow_delete(flow=flow)  # drops the slot
    watcher.check_exact(next_id)
    return rps, watcher.latencies


if __name__ == "__main__":
    main()
