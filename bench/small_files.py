"""``bench/bounded.py --small-files N``: N one-row CSV files, ours against raw Spark.

The files (the bounded benchmark's columns, one row and its header each, in directories of
5,000) are made once under ``bench/_work/data/small-N`` and reused. Then, in the same run:

(a) ours: ``manage.py runflow`` on the embedded defaults over ``small-N/*/*.csv``, the
    same aggregate as the bounded benchmark, into Parquet;
(b) raw: ``bench/raw_spark_bounded.py`` over the same glob (Spark packs the files into
    partitions of ``maxPartitionBytes`` with ``openCostInBytes`` per file).

Both outputs are compared row by row and must count N rows. Each side's peak RSS (its
whole process tree) is printed, with our SQLite database's size and where our time went.
The last line is ``small_files_ratio=<ours/raw> ours_s=<s> raw_s=<s>``.
"""

from __future__ import annotations

import math
import os
import shutil
import sys
import time
from pathlib import Path

import bounded
import numpy as np
import pyarrow.parquet as pq

PER_DIR = 5_000


def generate(count: int) -> Path:
    """``count`` one-row CSV files in directories of 5,000 (made once, then reused)."""
    data = bounded.WORK / "data" / f"small-{count}"
    done = bounded.WORK / "data" / f"small-{count}.done"
    if done.exists():
        return data
    shutil.rmtree(data, ignore_errors=True)
    rng = np.random.default_rng(20260102)
    sensors = rng.integers(0, bounded.SENSORS, count)
    temperatures = np.round(rng.normal(20.0, 5.0, count), 3)
    start = np.datetime64("2026-01-01T00:00:00", "s")
    header = f"{bounded.HEADER}\n"
    for i in range(count):
        folder = data / f"d{i // PER_DIR:03d}"
        if i % PER_DIR == 0:
            folder.mkdir(parents=True)
        ts = str(start + np.timedelta64(i, "s")).replace("T", " ")
        row = f"{i},{ts},sensor-{sensors[i]:02d},{temperatures[i]}\n"
        with open(folder / f"f{i:07d}.csv", "w") as f:
            f.write(header + row)
    done.touch()
    return data


def run_ours(pattern: str, parallelism: int, batch_size: int) -> tuple[float, int, int, str]:
    """Our run's seconds, peak RSS of its process tree and of runflow's own process, output."""
    shutil.rmtree(bounded.VAR, ignore_errors=True)
    shutil.rmtree(bounded.OUT / "ours", ignore_errors=True)
    env = bounded.child_env()
    manage = [sys.executable, "manage.py"]
    bounded.write_flow(pattern, parallelism, batch_size)
    bounded.run_checked([*manage, "migrate", "-v0"], env)
    bounded.run_checked([*manage, "applyflows", str(bounded.FLOW_TOML)], env)
    elapsed, output, peak, own = bounded.timed(
        [*manage, "runflow", bounded.FLOW_NAME, "--until-done", "--no-progress", "-v", "2"], env, rss=True
    )
    return elapsed, peak, own, output


def run_raw(pattern: str) -> tuple[float, int]:
    shutil.rmtree(bounded.OUT / "raw", ignore_errors=True)
    cmd = [sys.executable, str(bounded.RAW_SCRIPT), pattern, str(bounded.OUT / "raw")]
    elapsed, _, peak, _ = bounded.timed(cmd, dict(os.environ), rss=True)
    return elapsed, peak


def verify(total_rows: int) -> None:
    """Both sinks hold the same groups (avg within 1e-9) and count every input row."""

    def rows(path: Path) -> list[tuple]:
        table = pq.read_table(path)
        cols = ["sensor", "n", "avg_t", "last_ts"]
        return sorted(zip(*(table.column(c).to_pylist() for c in cols), strict=True))

    ours, raw = rows(bounded.OUT / "ours"), rows(bounded.OUT / "raw")
    if len(ours) != len(raw):
        sys.exit(f"MISMATCH: ours has {len(ours)} groups, raw {len(raw)}")
    for a, b in zip(ours, raw, strict=True):
        if not (a[0] == b[0] and a[1] == b[1] and a[3] == b[3] and math.isclose(a[2], b[2], rel_tol=1e-9)):
            sys.exit(f"MISMATCH: ours {a} != raw {b}")
    if sum(r[1] for r in ours) != total_rows:
        sys.exit(f"MISMATCH: sum(n) = {sum(r[1] for r in ours)}, expected {total_rows}")


def main(count: int, *, parallelism: int, batch_size: int) -> None:
    t0 = time.perf_counter()
    data = generate(count)
    print(
        f"data: {count} one-row CSV files in directories of {PER_DIR} under {data} ({time.perf_counter() - t0:.1f}s)"
    )
    print(f"flow: parallelism={parallelism} batch_size={batch_size}", flush=True)
    print(f"load average before: {Path('/proc/loadavg').read_text().strip()}", flush=True)
    pattern = f"{data}/*/*.csv"
    ours_s, ours_peak, ours_own, output = run_ours(pattern, parallelism, batch_size)
    phases = bounded.run_phases(output)
    database = (bounded.VAR / "dataflow.sqlite3").stat().st_size
    raw_s, raw_peak = run_raw(pattern)
    verify(count)
    print(
        f"ours {ours_s:.2f}s (peak RSS {ours_peak / 2**20:.0f} MiB, runflow's own {ours_own / 2**20:.0f} MiB, SQLite {database / 2**20:.1f} MiB; {phases}) "
        f"raw {raw_s:.2f}s (peak RSS {raw_peak / 2**20:.0f} MiB); outputs equal"
    )
    print(f"small_files_ratio={ours_s / raw_s:.2f} ours_s={ours_s:.2f} raw_s={raw_s:.2f}")
