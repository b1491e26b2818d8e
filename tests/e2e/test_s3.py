"""S3 flows end to end: objects on a moto server (the stand-in for S3, started by this
module on a free loopback port and stopped by its pid) read by real ``celery -A dataflow
worker`` processes into a Parquet sink, every row compared, through a worker SIGKILLed
mid-split; and a watched bucket whose new objects are read as they come.

Real Redis, PostgreSQL and Spark (``tests/e2e/test_crash_files.py`` does the same with files).
"""

from __future__ import annotations

import gzip
from collections import Counter

import pytest

from connectors.s3 import enumerator
from dataflow.models import Assignment
from dataflow.services.flows import flow_start, flow_stop
from tests.e2e.streams_helpers import arrived, sink_ids, what_differs
from tests.e2e.test_crash_files import _kill_mid_split_and_finish
from tests.factories import DataFlowFactory
from tests.helpers import committed_overlaps_and_gaps, multiset, read_parquet_rows, wait_until, write_csv
from tests.moto_server import ACCESS_KEY_ID, SECRET_ACCESS_KEY, PrivateMotoServer

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


@pytest.fixture(scope="module")
def moto():
    with PrivateMotoServer() as server:
        yield server


def s3_source(moto: PrivateMotoServer, bucket: str, **options) -> dict:
    return {
        "type": "s3",
        "endpoint_url": moto.endpoint_url,
        "bucket": bucket,
        "access_key_id": ACCESS_KEY_ID,
        "secret_access_key": SECRET_ACCESS_KEY,
        **options,
    }


def put_csv(moto, dirs, bucket: str, key: str, ids: range) -> list[tuple]:
    """Puts the CSV of rows ``ids`` (gzipped when the key ends in .gz); returns the rows."""
    path = dirs.root / "upload.csv"
    rows = write_csv(path, ids)
    body = path.read_bytes()
    moto.client("s3").put_object(
        Bucket=bucket, Key=key, Body=gzip.compress(body) if key.endswith(".gz") else body
    )
    return rows


def test_a_sigkilled_worker_reading_objects_loses_and_duplicates_nothing(fleet, dirs, moto):
    moto.client("s3").create_bucket(Bucket="crash")
    sent = []
    sent += put_csv(moto, dirs, "crash", "in/day-1/big.csv.gz", range(0, 150_000))
    sent += put_csv(moto, dirs, "crash", "in/day-1/ranges.csv", range(150_000, 300_000))
    for n in range(4):
        sent += put_csv(
            moto, dirs, "crash", f"in/day-2/small-{n}.csv", range(300_000 + n * 500, 300_500 + n * 500)
        )
    moto.client("s3").put_object(Bucket="crash", Key="in/_SUCCESS", Body=b"")
    flow = DataFlowFactory(
        source=s3_source(moto, "crash", prefix="in/", pattern="**/*.csv*", split_size_mb=1),
        parallelism=2,
        batch_size=1000,
        sink_path=str(dirs.out / "sink"),
    )
    fleet.beat()
    fleet.worker("w1")
    fleet.worker("w2")
    run = flow_start(flow=flow)

    run = _kill_mid_split_and_finish(run, fleet, sent)

    assert multiset(read_parquet_rows(dirs.out / "sink")) == multiset(sent)
    assert run.records_read == len(sent)
    assert committed_overlaps_and_gaps(run) == []
    assert Assignment.objects.filter(split__run=run, outcome="expired").exists(), "the victim held a split"


def test_a_watched_bucket_reads_objects_put_while_the_flow_runs(worker, quick, moto, monkeypatch):
    monkeypatch.setattr(enumerator, "DISCOVERY_INTERVAL_MS", 200)  # the in-process worker's enumerator
    moto.client("s3").create_bucket(Bucket="watched")
    sent = [row[0] for row in put_csv(moto, quick, "watched", "a.csv", range(0, 500))]
    sink = quick.out / "sink"
    flow = DataFlowFactory(source=s3_source(moto, "watched", watch=True), sink_path=str(sink))
    run = flow_start(flow=flow)
    wait_until(lambda: arrived(sink, sent), 120, lambda: what_differs(sink, sent, run))

    sent += [row[0] for row in put_csv(moto, quick, "watched", "b.csv.gz", range(500, 1500))]
    wait_until(lambda: arrived(sink, sent), 120, lambda: what_differs(sink, sent, run))
    flow_stop(flow=flow)

    assert sink_ids(sink) == Counter(sent), what_differs(sink, sent, run)
