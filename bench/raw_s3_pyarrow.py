"""The raw side of ``bench/s3_objects.py``: plain pyarrow in one process.

``python bench/raw_s3_pyarrow.py ENDPOINT BUCKET PREFIX OUT [--threads N]`` lists the
``.csv.gz`` objects under PREFIX of BUCKET on the S3 endpoint ENDPOINT (credentials from
``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY``) with ``pyarrow.fs.S3FileSystem``, and
converts each to one Parquet file in the directory OUT: the object is streamed through a
gzip input stream into Arrow's streaming CSV reader (large blocks, its own parse threads)
and each block is written as a row group (snappy). N objects are converted at once by
threads of this one process (gzip inflates in one thread per stream; the CSV reader and the
Parquet writer release the GIL). Prints the rows written.
"""

from __future__ import annotations

import argparse
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.fs as pa_fs
import pyarrow.parquet as pq

#: The benchmark's columns. The timestamps are read naive and declared UTC afterwards (Arrow's
#: CSV reader wants a zone offset in the text for a zoned type); our flow declares TIMESTAMP.
COLUMNS = {"id": pa.int64(), "ts": pa.timestamp("us"), "sensor": pa.string(), "temperature": pa.float64()}
SCHEMA = pa.schema(
    [(name, pa.timestamp("us", tz="UTC") if name == "ts" else t) for name, t in COLUMNS.items()]
)
BLOCK_SIZE = 16 << 20


def convert(fs: pa_fs.S3FileSystem, key: str, out: Path) -> int:
    rows = 0
    with fs.open_input_stream(key, compression="gzip", buffer_size=4 << 20) as stream:
        reader = pa_csv.open_csv(
            stream,
            read_options=pa_csv.ReadOptions(block_size=BLOCK_SIZE),
            convert_options=pa_csv.ConvertOptions(column_types=COLUMNS),
        )
        with pq.ParquetWriter(out / f"{Path(key).name}.parquet", SCHEMA, compression="snappy") as writer:
            for batch in reader:
                table = pa.Table.from_batches([batch]).cast(SCHEMA)
                writer.write_table(table)
                rows += table.num_rows
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("endpoint")
    parser.add_argument("bucket")
    parser.add_argument("prefix")
    parser.add_argument("out", type=Path)
    parser.add_argument("--threads", type=int, default=2, help="objects converted at once")
    args = parser.parse_args()
    scheme, _, host = args.endpoint.partition("://")
    fs = pa_fs.S3FileSystem(
        access_key=os.environ["AWS_ACCESS_KEY_ID"],
        secret_key=os.environ["AWS_SECRET_ACCESS_KEY"],
        endpoint_override=host,
        scheme=scheme,
        region="us-east-1",
    )
    selector = pa_fs.FileSelector(f"{args.bucket}/{args.prefix}", recursive=True)
    keys = sorted(info.path for info in fs.get_file_info(selector) if info.path.endswith(".csv.gz"))
    args.out.mkdir(parents=True, exist_ok=True)
    with ThreadPoolExecutor(args.threads) as pool:
        rows = sum(pool.map(lambda key: convert(fs, key, args.out), keys))
    print(f"raw: {len(keys)} objects, {rows} rows")


if __name__ == "__main__":
    main()
