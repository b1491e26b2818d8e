"""The raw side of ``bench/postgres.py``: one process reads a table with one binary COPY
(``adbc-driver-postgresql`` runs the SELECT as ``COPY (...) TO STDOUT (FORMAT binary)``
and decodes it into Arrow) and writes it to one Parquet file as it streams.

``python bench/raw_pg_copy.py URL schema.table OUT.parquet``
"""

from __future__ import annotations

import sys

import adbc_driver_postgresql.dbapi as adbc
import pyarrow as pa
import pyarrow.parquet as pq


def main() -> None:
    url, table, out = sys.argv[1:4]
    schema = pa.schema(
        [
            ("id", pa.int64()),
            ("customer", pa.string()),
            ("amount", pa.decimal128(12, 2)),
            ("ts", pa.timestamp("us", tz="UTC")),
        ]
    )
    with adbc.connect(url) as conn, conn.cursor() as cur, pq.ParquetWriter(out, schema) as writer:
        cur.execute(f"SELECT id, customer, amount, ts FROM {table}")  # noqa: S608 - the bench's own table
        for batch in cur.fetch_record_batch():
            amount = batch.column(2)
            if isinstance(amount.type, pa.ExtensionType):
                amount = amount.storage
            columns = [batch.column(0), batch.column(1), amount.cast(schema.field(2).type), batch.column(3)]
            writer.write_batch(pa.RecordBatch.from_arrays(columns, schema=schema))


if __name__ == "__main__":
    main()
