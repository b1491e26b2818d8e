"""``bench/bounded.py --gzip-gb G``: one ``.csv.gz`` of G GB uncompressed, ours against raw Spark.

The file (the bounded benchmark's columns and rows, compressed by ``gzip -6``) is made once
under ``bench/_work/data/gzip-G/sensors.csv.gz`` and reused. Then, in the same run:

(a) ours: ``manage.py runflow`` on the embedded defaults, the same aggregate as the bounded
    benchmark, into Parquet;
(b) raw: ``bench/raw_spark_bounded.py`` over the same file (Spark cannot split a gzip
    file either: one task reads it).

Both outputs are compared row by row and must count every row. Each side's peak RSS (its
whole process tree) is printed, with where our time went. The last line is
``gzip_ratio=<ours/raw> ours_s=<s> raw_s=<s>``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import bounded
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv
import small_files

CHUNK_ROWS = 1_000_000
#: Records per landed file: 17 files for 1 GB (under Spark's parallelPartitionDiscovery
#: threshold of 32 paths), and a reader holds one block of 1M rows, whatever the file's size.
BATCH_SIZE = 1_000_000


def generate(gigabytes: float) -> tuple[Path, int]:
    """The file of ``gigabytes`` GB of CSV, gzip -6, and its row count (made once)."""
    folder = bounded.WORK / "data" / f"gzip-{gigabytes:g}"
    path = folder / "sensors.csv.gz"
    rows_file = folder.with_name(f"gzip-{gigabytes:g}.rows")
    if rows_file.exists():
        return path, int(rows_file.read_text())
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(20260103)
    names = pa.array([f"sensor-{k:02d}" for k in range(bounded.SENSORS)])
    start = np.datetime64("2026-01-01T00:00:00", "s")
    tmp = path.with_name(f".{path.name}.tmp")
    target, written, rows = int(gigabytes * 1e9), 0, 0
    with open(tmp, "wb") as out:
        gzip = subprocess.Popen(["gzip", "-6", "-c"], stdin=subprocess.PIPE, stdout=out)
        assert gzip.stdin is not None
        header = f"{bounded.HEADER}\n".encode()
        gzip.stdin.write(header)
        written += len(header)
        while written < target:
            ids = np.arange(rows, rows + CHUNK_ROWS, dtype=np.int64)
            table = pa.table(
                {
                    "id": ids,
                    "ts": pc.strftime(
                        pa.array(start + ids.astype("timedelta64[s]")), format="%Y-%m-%d %H:%M:%S"
                    ),
                    "sensor": names.take(pa.array(rng.integers(0, bounded.SENSORS, CHUNK_ROWS))),
                    "temperature": np.round(rng.normal(20.0, 5.0, CHUNK_ROWS), 3),
                }
            )
            sink = pa.BufferOutputStream()
            pa_csv.write_csv(
                table, sink, write_options=pa_csv.WriteOptions(include_header=False, quoting_style="none")
            )
            chunk = sink.getvalue().to_pybytes()
            gzip.stdin.write(chunk)
            written += len(chunk)
            rows += CHUNK_ROWS
        gzip.stdin.close()
        if gzip.wait() != 0:
            sys.exit("gzip failed")
    os.replace(tmp, path)
    rows_file.write_text(str(rows))
    return path, rows


def main(gigabytes: float, *, parallelism: int, batch_size: int) -> None:
    t0 = time.perf_counter()
    path, rows = generate(gigabytes)
    print(
        f"data: {path} ({rows} rows, {path.stat().st_size / 1e9:.2f} GB compressed; "
        f"{time.perf_counter() - t0:.1f}s)"
    )
    print(f"flow: parallelism={parallelism} batch_size={batch_size}", flush=True)
    print(f"load average before: {Path('/proc/loadavg').read_text().strip()}", flush=True)
    ours_s, ours_peak, ours_own, output = small_files.run_ours(str(path), parallelism, batch_size)
    phases = bounded.run_phases(output)
    raw_s, raw_peak = small_files.run_raw(str(path))
    small_files.verify(rows)
    print(
        f"ours {ours_s:.2f}s (peak RSS {ours_peak / 2**20:.0f} MiB, runflow's own {ours_own / 2**20:.0f} MiB; "
        f"{phases}) "
        f"raw {raw_s:.2f}s (peak RSS {raw_peak / 2**20:.0f} MiB); outputs equal"
    )
    print(f"gzip_ratio={ours_s / raw_s:.2f} ours_s={ours_s:.2f} raw_s={raw_s:.2f}")
