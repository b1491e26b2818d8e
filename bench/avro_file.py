"""``bench/bounded.py --avro-rows N``: one Avro container file of N rows, ours against raw baselines.

The file (the bounded benchmark's columns: ``id`` long, ``ts`` timestamp-millis, ``sensor``
string, ``temperature`` double; deflate, fastavro's default blocks of about 16 KB) is made
once under ``bench/_work/data/avro-N/sensors.avro``, with the same rows as Parquet beside
it (``sensors-parquet/``). Then, in the same run:

(a) ours: ``manage.py runflow`` on the embedded defaults over the Avro file (cut into block
    ranges of 8 MB), the bounded benchmark's aggregate, into Parquet;
(b) raw: plain PySpark over the same rows as Parquet (Spark cannot read Avro here without
    the spark-avro package), the same aggregate; both outputs are compared row by row;
(c) decoding alone, in this process: ``fastavro.reader`` iterating the file's records, and
    our reader (``AvroFileSplitReader``: the same blocks decoded by fastavro, then Arrow
    columns of the run's types) over the same file.

The last line is ``avro_ratio=<ours/raw> reader_ratio=<our reader/fastavro> ours_s=<s>
raw_s=<s> fastavro_s=<s> reader_s=<s>``.
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
import sys
import time
from pathlib import Path

import bounded
import fastavro
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import raw_spark_bounded
import small_files

sys.path.insert(0, str(bounded.REPO))

from connectors.files.avro_reader import AvroFileSplitReader  # noqa: E402 - after the path
from connectors.files.split import FileSplit  # noqa: E402
from source_support.formats import AvroFormat  # noqa: E402

SCHEMA = {
    "type": "record",
    "name": "Reading",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "sensor", "type": "string"},
        {"name": "temperature", "type": "double"},
    ],
}
CHUNK_ROWS = 100_000
BATCH_SIZE = 100_000
SPLIT_MB = 8


def generate(rows: int) -> tuple[Path, Path]:
    """The Avro file of ``rows`` rows and the directory of the same rows as Parquet (made once)."""
    folder = bounded.WORK / "data" / f"avro-{rows}"
    path, parquet = folder / "sensors.avro", folder / "sensors-parquet"
    if path.exists() and parquet.exists():
        return path, parquet
    shutil.rmtree(folder, ignore_errors=True)
    parquet.mkdir(parents=True)
    rng = np.random.default_rng(20260104)
    start = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)

    def chunks():
        for first in range(0, rows, CHUNK_ROWS):
            n = min(CHUNK_ROWS, rows - first)
            ids = np.arange(first, first + n)
            sensors = rng.integers(0, bounded.SENSORS, n)
            temps = np.round(rng.normal(20.0, 5.0, n), 3)
            records = [
                {
                    "id": int(i),
                    "ts": start + dt.timedelta(seconds=int(i)),
                    "sensor": f"sensor-{s:02d}",
                    "temperature": float(t),
                }
                for i, s, t in zip(ids, sensors, temps, strict=True)
            ]
            pq.write_table(
                pa.Table.from_pylist(
                    records,
                    schema=pa.schema(
                        [
                            ("id", pa.int64()),
                            ("ts", pa.timestamp("us", tz="UTC")),
                            ("sensor", pa.string()),
                            ("temperature", pa.float64()),
                        ]
                    ),
                ),
                parquet / f"part-{first // CHUNK_ROWS:05d}.parquet",
            )
            yield from records

    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as f:
        fastavro.writer(f, fastavro.parse_schema(SCHEMA), chunks(), codec="deflate")
    os.replace(tmp, path)
    return path, parquet


def write_flow(path: Path, parallelism: int, batch_size: int) -> None:
    bounded.FLOW_TOML.write_text(
        f"""[flow]
name = "{bounded.FLOW_NAME}"
parallelism = {parallelism}
batch_size = {batch_size}
poll_interval_ms = 500

[source]
type = "files"
path = "{path}"
split_size_mb = {SPLIT_MB}

[format]
type = "avro"

[transform]
sql = "{bounded.SQL}"

[sink]
type = "parquet"
path = "{bounded.OUT / "ours"}"
"""
    )


def run_ours(path: Path, parallelism: int, batch_size: int) -> tuple[float, str]:
    shutil.rmtree(bounded.VAR, ignore_errors=True)
    shutil.rmtree(bounded.OUT / "ours", ignore_errors=True)
    env = bounded.child_env()
    manage = [sys.executable, "manage.py"]
    write_flow(path, parallelism, batch_size)
    bounded.run_checked([*manage, "migrate", "-v0"], env)
    bounded.run_checked([*manage, "applyflows", str(bounded.FLOW_TOML)], env)
    elapsed, output, _, _ = bounded.timed(
        [*manage, "runflow", bounded.FLOW_NAME, "--until-done", "--no-progress", "-v", "2"], env
    )
    return elapsed, output


def run_raw(parquet: Path) -> float:
    shutil.rmtree(bounded.OUT / "raw", ignore_errors=True)
    cmd = [sys.executable, __file__, "--raw-spark-parquet", str(parquet), str(bounded.OUT / "raw")]
    elapsed, _, _, _ = bounded.timed(cmd, dict(os.environ))
    return elapsed


def raw_spark_parquet(in_dir: str, out_dir: str) -> None:
    """The raw side: plain PySpark, the same settings as ``bench/raw_spark_bounded.py``."""
    spark = raw_spark_bounded.session("raw-spark-avro-baseline")
    spark.read.parquet(in_dir).createOrReplaceTempView("source")
    spark.sql(bounded.SQL).write.mode("overwrite").option("compression", "snappy").parquet(out_dir)
    spark.stop()


def decode_alone(path: Path) -> tuple[float, float, int]:
    """Seconds for fastavro alone and for our reader to decode the whole file, and its rows."""
    t0 = time.perf_counter()
    with open(path, "rb") as f:
        count = sum(1 for _ in fastavro.reader(f))
    fastavro_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    fmt = AvroFormat()
    fmt = fmt.with_schema(fmt.columns_of(SCHEMA, where=str(path)))
    reader = AvroFileSplitReader(fmt)
    split, rows, finished = FileSplit(str(path), 0, path.stat().st_size, 0), 0, False
    while not finished:
        batch = reader.read_batch(split, BATCH_SIZE)
        rows += batch.records.num_rows
        split, finished = split.at(batch.end.position), batch.finished
    reader.close()
    reader_s = time.perf_counter() - t0
    if rows != count:
        sys.exit(f"MISMATCH: our reader read {rows} rows, fastavro {count}")
    return fastavro_s, reader_s, count


def main(rows: int, *, parallelism: int, batch_size: int) -> None:
    t0 = time.perf_counter()
    path, parquet = generate(rows)
    print(f"data: {path} ({rows} rows, {path.stat().st_size / 1e6:.1f} MB; {time.perf_counter() - t0:.1f}s)")
    print(f"flow: parallelism={parallelism} batch_size={batch_size} split_size_mb={SPLIT_MB}", flush=True)
    print(f"load average before: {Path('/proc/loadavg').read_text().strip()}", flush=True)
    ours_s, output = run_ours(path, parallelism, batch_size)
    phases = bounded.run_phases(output)
    raw_s = run_raw(parquet)
    small_files.verify(rows)
    fastavro_s, reader_s, _ = decode_alone(path)
    print(f"ours {ours_s:.2f}s ({phases}) raw {raw_s:.2f}s; outputs equal")
    print(f"decoding alone: fastavro {fastavro_s:.2f}s, our reader (to Arrow) {reader_s:.2f}s")
    print(
        f"avro_ratio={ours_s / raw_s:.2f} reader_ratio={reader_s / fastavro_s:.2f} ours_s={ours_s:.2f} "
        f"raw_s={raw_s:.2f} fastavro_s={fastavro_s:.2f} reader_s={reader_s:.2f}"
    )


if __name__ == "__main__" and sys.argv[1:2] == ["--raw-spark-parquet"]:
    raw_spark_parquet(sys.argv[2], sys.argv[3])
