"""An object rewritten under its key while its split is read (a new ETag) fails that
split naming what changed, as a changed file does; a deleted object is a bad record; the
server going away mid-read loses and repeats nothing. Against a moto server (the
stand-in for S3; conftest.py), killed and started again where a test says so."""

from __future__ import annotations

import gzip

import pytest

from connectors.s3 import objects
from connectors.s3 import reader as reader_module
from connectors.s3.enumerator import object_splits
from connectors.s3.reader import S3SplitReader
from source_support import lines
from source_support.errors import SplitFailed
from tests.connectors.s3.conftest import source_table
from tests.connectors.s3.helpers import build_source

CSV = {"type": "csv", "schema": "id BIGINT, text STRING", "header": True}


def body(first: int, count: int) -> bytes:
    return b"id,text\n" + b"".join(b"%d,row-%d\n" % (n, n) for n in range(first, first + count))


def only_split(source, split_size: int | None = None):
    (info,) = list(source.listing.objects(source.client))
    splits = object_splits(
        source.listing.bucket, info, split_size=split_size or source.split_size, layout=source.layout
    )
    return splits


@pytest.mark.parametrize("key", ["orders.csv", "orders.csv.gz"])
@pytest.mark.slow
def test_an_object_rewritten_while_read_fails_its_split_naming_the_change(moto, s3, bucket, env, key):
    data = body(0, 20_000)
    s3.put_object(Bucket=bucket, Key=key, Body=gzip.compress(data) if key.endswith(".gz") else data)
    source = build_source(source_table(moto, bucket), CSV, env)
    (split,) = only_split(source)
    reader = S3SplitReader(source.fmt, lambda: source.client)
    reader.handle_splits_changes([split], [])
    first = reader.fetch(100, 0)[0]
    reader.close_split(split.split_id)  # the next read opens the object again, as after a slice
    s3.put_object(Bucket=bucket, Key=key, Body=body(0, 10))
    new_etag = s3.head_object(Bucket=bucket, Key=key)["ETag"]

    with pytest.raises(SplitFailed) as failed:
        reader.fetch(100, 0)

    assert first.records.num_rows == 100
    assert failed.value.split_id == split.split_id
    assert f"s3://{bucket}/{key} changed while it was read (ETag {split.etag} -> {new_etag})" in str(
        failed.value
    )


@pytest.mark.slow
def test_a_retried_split_takes_the_rewritten_whole_object(moto, s3, bucket, env):
    s3.put_object(Bucket=bucket, Key="a.csv", Body=body(0, 5))
    source = build_source(source_table(moto, bucket), CSV, env)
    (split,) = only_split(source)
    s3.put_object(Bucket=bucket, Key="a.csv", Body=body(0, 9))

    retried = source.split_to_retry(split)

    assert retried.etag != split.etag and retried.end == retried.size == len(body(0, 9))


def test_a_range_of_a_rewritten_object_is_not_retried(moto, s3, bucket, env):
    s3.put_object(Bucket=bucket, Key="a.csv", Body=body(0, 50_000))
    source = build_source(source_table(moto, bucket, split_size_mb=0.2), CSV, env)
    first = only_split(source)[0]
    s3.put_object(Bucket=bucket, Key="a.csv", Body=body(0, 9))

    with pytest.raises(ValueError, match="read in several ranges"):
        source.split_to_retry(first)


def test_a_deleted_object_is_a_bad_record_of_its_split(moto, s3, bucket, env):
    s3.put_object(Bucket=bucket, Key="a.csv", Body=body(0, 5))
    source = build_source(source_table(moto, bucket), CSV, env)
    (split,) = only_split(source)
    s3.delete_object(Bucket=bucket, Key="a.csv")

    reader = S3SplitReader(source.fmt, lambda: source.client)
    reader.handle_splits_changes([split], [])
    (batch,) = reader.fetch(100, 0)

    assert batch.finished and batch.records.num_rows == 0
    assert "deleted after it was discovered" in batch.bad_records[0].reason


@pytest.mark.slow
def test_an_object_deleted_while_read_fails_its_split_at_once(moto, s3, bucket, env, monkeypatch):
    monkeypatch.setattr(objects, "FIRST_RANGE_BYTES", 1 << 16)
    monkeypatch.setattr(objects, "RANGE_BYTES", 1 << 16)
    monkeypatch.setattr(objects, "BUFFER_BYTES", 1 << 12)
    monkeypatch.setattr(lines, "READ_BYTES", lines.MIN_CHUNK)
    s3.put_object(Bucket=bucket, Key="a.csv", Body=body(0, 250_000))  # 3.6 MB: reads of 1 MiB
    source = build_source(source_table(moto, bucket), CSV, env)
    (split,) = only_split(source)
    reader = S3SplitReader(source.fmt, lambda: source.client)
    reader.handle_splits_changes([split], [])
    (first,) = reader.fetch(100, 0)  # the first range is open
    s3.delete_object(Bucket=bucket, Key="a.csv")

    with pytest.raises(SplitFailed) as failed:  # no retries: a 404 is not transient
        for _ in range(1000):
            reader.fetch(100, 0)

    assert failed.value.split_id == split.split_id
    assert f"s3://{bucket}/a.csv: the object was deleted after it was discovered" in str(failed.value)
    assert first.records.num_rows == 100


@pytest.mark.slow
def test_the_server_going_away_mid_read_loses_and_repeats_nothing(moto, env, quick_retries):
    """Killed between two batches, the server is away: the reader returns nothing (its
    object's GETs tried again with backoff first), then, the server back with the same
    objects, goes on from the last position it handed out."""
    s3 = moto.client("s3")
    s3.create_bucket(Bucket="away")
    objects = {"a.csv": body(0, 300_000), "b.csv.gz": gzip.compress(body(300_000, 300_000))}
    for key, data in objects.items():
        s3.put_object(Bucket="away", Key=key, Body=data)
    source = build_source(source_table(moto, "away"), CSV, env)
    splits = [
        s
        for info in source.listing.objects(source.client)
        for s in object_splits("away", info, split_size=source.split_size, layout=source.layout)
    ]
    reader = S3SplitReader(source.fmt, lambda: source.client)
    reader.handle_splits_changes(splits, [])
    ids: list[int] = []  # batches of 10,000 rows: 1 MB of an object a batch
    fetches = 0
    while reader.splits:
        if fetches == 3:
            moto.kill()
            # What is buffered is handed out; then nothing, while the server is away.
            for _ in range(100):
                batches = reader.fetch(10_000, 0.01)
                if not batches:
                    break
                ids += [i for b in batches for i in b.records.column("id").to_pylist()]
            assert batches == [] and reader.fetch(10_000, 0.01) == []
            moto.start()
            again = moto.client("s3")
            again.create_bucket(Bucket="away")
            for key, data in objects.items():
                again.put_object(Bucket="away", Key=key, Body=data)
        for batch in reader.fetch(10_000, 0):
            ids += batch.records.column("id").to_pylist()
        fetches += 1

    assert sorted(ids) == list(range(600_000))


def next_slice_reader(source, split) -> S3SplitReader:
    """A reader of a later time slice in the same process, holding ``split`` again."""
    reader = S3SplitReader(source.fmt, lambda: source.client)
    reader.handle_splits_changes([split], [])
    return reader


@pytest.mark.slow
def test_a_gzip_object_is_not_inflated_again_at_each_slice(moto, s3, bucket, env, monkeypatch):
    s3.put_object(Bucket=bucket, Key="orders.csv.gz", Body=gzip.compress(body(0, 20_000)))
    source = build_source(source_table(moto, bucket), CSV, env)
    (split,) = only_split(source)
    opened = []
    real_open = objects.open_object
    monkeypatch.setattr(
        reader_module, "open_object", lambda *a, **k: opened.append(a[2]) or real_open(*a, **k)
    )
    ids: list[int] = []

    while True:
        reader = next_slice_reader(source, split)
        (batch,) = reader.fetch(5_000, 0)
        reader.close()  # the slice ends: its open object is parked for the next one
        ids += batch.records.column("id").to_pylist()
        split = split.at(batch.end.position)
        if batch.finished:
            break

    assert ids == list(range(20_000))
    assert opened == ["orders.csv.gz"]  # opened once, taken back by each later slice


@pytest.mark.slow
def test_an_object_rewritten_while_parked_fails_its_split(moto, s3, bucket, env, monkeypatch):
    monkeypatch.setattr(objects, "RANGE_BYTES", 64 << 10)
    monkeypatch.setattr(objects, "FIRST_RANGE_BYTES", 64 << 10)
    s3.put_object(Bucket=bucket, Key="orders.csv", Body=body(0, 200_000))
    source = build_source(source_table(moto, bucket), CSV, env)
    (split,) = only_split(source, split_size=1 << 30)
    reader = next_slice_reader(source, split)
    (first,) = reader.fetch(100, 0)
    reader.close()
    s3.put_object(Bucket=bucket, Key="orders.csv", Body=body(0, 10))

    later = next_slice_reader(source, split.at(first.end.position))
    with pytest.raises(SplitFailed) as failed:
        while not later.fetch(50_000, 0)[0].finished:
            pass

    assert "changed while it was read" in str(failed.value)
