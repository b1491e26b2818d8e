"""Objects read through the files connector's formats over ranged GETs: public datasets
uploaded to a moto server (the stand-in for S3; conftest.py), plain, gzipped and cut in
byte ranges, compared with pandas reading the package's own file; JSON lines, another
encoding, and what a read costs in GETs."""

from __future__ import annotations

import gzip
import json

import pandas as pd
import pytest

from connectors.s3 import objects
from connectors.s3.objects import open_object
from tests.connectors.files.public_data import NYCFLIGHTS, PENGUINS, assert_same_as_pandas
from tests.connectors.files.test_public_datasets import pandas_csv
from tests.connectors.s3.conftest import source_table
from tests.connectors.s3.helpers import build_source, read_all


@pytest.mark.parametrize("gzipped", [False, True])
@pytest.mark.slow
def test_penguins_from_an_object_equal_pandas(moto, s3, bucket, env, gzipped):
    body = PENGUINS.read_bytes()
    key = "data/penguins.csv" + (".gz" if gzipped else "")
    s3.put_object(Bucket=bucket, Key=key, Body=gzip.compress(body) if gzipped else body)
    source = build_source(
        source_table(moto, bucket, prefix="data/"), {"type": "csv", "null_values": ["", "NA"]}, env
    )

    table, bad = read_all(source)

    assert bad == []
    assert_same_as_pandas(table, pandas_csv(PENGUINS, na_values=["", "NA"]))


@pytest.mark.slow
def test_nycflights_weather_in_byte_ranges_equals_pandas(moto, s3, bucket, env):
    path = NYCFLIGHTS / "weather.csv"
    s3.put_object(Bucket=bucket, Key="weather.csv", Body=path.read_bytes())
    table_options = source_table(moto, bucket, split_size_mb=0.3)
    source = build_source(table_options, {"type": "csv", "null_values": ["", "NA"]}, env)

    table, bad = read_all(source, batch_size=700)

    assert bad == []
    frame = pandas_csv(path, na_values=["", "NA"])
    frame["time_hour"] = pd.to_datetime(frame["time_hour"])
    assert_same_as_pandas(table, frame)


@pytest.mark.slow
def test_json_lines_and_latin1_csv_objects_are_read(moto, s3, bucket, env):
    rows = [{"id": n, "name": f"n{n}", "amount": n / 4} for n in range(2500)]
    s3.put_object(
        Bucket=bucket, Key="j/a.jsonl", Body="\n".join(json.dumps(r) for r in rows).encode() + b"\n"
    )
    s3.put_object(Bucket=bucket, Key="l/a.csv", Body="id,name\n1,Zoë\n2,José\n".encode("latin-1"))

    jsonl = build_source(source_table(moto, bucket, prefix="j/"), {"type": "jsonl"}, env)
    latin = build_source(source_table(moto, bucket, prefix="l/"), {"type": "csv", "encoding": "latin-1"}, env)

    assert read_all(jsonl)[0].to_pylist() == rows
    assert read_all(latin)[0].to_pylist() == [{"id": 1, "name": "Zoë"}, {"id": 2, "name": "José"}]


def test_an_object_streams_through_large_ranged_gets(moto, s3, bucket, monkeypatch):
    monkeypatch.setattr(objects, "RANGE_BYTES", 1 << 20)
    body = b"".join(b"%09d\n" % n for n in range(500_000))  # 5 MB
    s3.put_object(Bucket=bucket, Key="big.csv", Body=body)
    etag = s3.head_object(Bucket=bucket, Key="big.csv")["ETag"]

    with open_object(s3, bucket, "big.csv", etag=etag, size=len(body)) as f:
        lines = sum(1 for _ in iter(lambda: f.readline(), b""))
        gets = f.raw.gets
        f.seek(len(body) - 10)
        tail = f.read()

    assert lines == 500_000
    assert gets == 5  # a first GET of 1 MiB, then ranges of RANGE_BYTES, never one per line
    assert tail == body[-10:]
