"""Listing a bucket into splits: a listing of 10,000 keys (ten ListObjectsV2 pages), the
prefix and the pattern, byte ranges of large objects, and a backlog that stays capped.

Against moto (the stand-in for S3): the 10,000 keys are listed over HTTP from a moto
server, but put straight into its in-memory backend, for 10,000 PUTs over HTTP take about
a minute here; so that module's server runs in this process (``ThreadedMotoServer``),
on a free loopback port."""

from __future__ import annotations

import pytest
from moto.core import DEFAULT_ACCOUNT_ID
from moto.s3.models import s3_backends
from moto.server import ThreadedMotoServer

from connectors.s3 import enumerator
from source_support.testing.memory import json_round_trip
from tests.connectors.s3.conftest import source_table
from tests.connectors.s3.helpers import build_source
from tests.moto_server import PrivateMotoServer
from tests.source_support.fakes import RecordingContext

CSV = {"type": "csv", "schema": "id BIGINT", "header": False}
KEYS = 10_000


class InProcessMoto(PrivateMotoServer):
    """A moto server in this process (its backend reachable), on a free loopback port."""

    def start(self) -> None:
        self.server = ThreadedMotoServer(ip_address="127.0.0.1", port=self.port, verbose=False)
        self.server.start()

    def kill(self) -> None:
        self.server.stop()


@pytest.fixture(scope="module")
def moto():
    with InProcessMoto() as server:
        yield server


@pytest.fixture(scope="module")
def listed(moto):
    """A bucket of 10,000 keys (five days of 2,000 objects, half of them .csv.gz) and a few
    that no pattern below takes; put once for the module's tests."""
    bucket = "ten-thousand"
    moto.client("s3").create_bucket(Bucket=bucket)
    backend = s3_backends[DEFAULT_ACCOUNT_ID]["global"]
    keys = [
        f"2026/11/{day:02d}/part-{n:05d}.{'csv.gz' if n % 2 else 'csv'}"
        for day in range(1, 6)
        for n in range(2000)
    ]
    keys += [
        "2026/11/_SUCCESS",
        "2026/11/01/.hidden.csv",
        "2026/11/folder/",
        "2026/12/01/late.csv",
        "other.csv",
    ]
    for key in keys:
        backend.put_object(bucket, key, b"1\n")
    return bucket


def enumerate_all(moto, env, bucket: str, **options) -> list:
    source = build_source(source_table(moto, bucket, **options), CSV, env, infer=False)
    context = RecordingContext()
    enum = source.create_enumerator(context)
    enum.start()
    while not enum.is_exhausted():
        enum = source.restore_enumerator(context, json_round_trip(enum.snapshot_state()))
        enum.start()
        enum.handle_split_request(0)
    return [split for _, split in context.assigned]


@pytest.mark.slow
def test_ten_thousand_keys_are_listed_across_pages_each_once(moto, env, listed):
    splits = enumerate_all(moto, env, listed, prefix="2026/11/")

    keys = [split.key for split in splits]
    assert len(keys) == len(set(keys)) == KEYS
    assert sum(split.compressed for split in splits) == KEYS // 2


@pytest.mark.slow
@pytest.mark.parametrize(
    ("prefix", "pattern", "count"),
    [
        ("2026/11/", "**/*.csv.gz", KEYS // 2),
        ("2026/11/03/", "*.csv", 1000),
        ("2026/11/", "0[12]/part-0000?.csv*", 20),
        ("2026/", "12/**", 1),
        ("", "*.csv", 1),
    ],
)
def test_prefix_and_pattern_choose_the_keys(moto, env, listed, prefix, pattern, count):
    splits = enumerate_all(moto, env, listed, prefix=prefix, pattern=pattern)

    assert len(splits) == count
    assert all(split.key.startswith(prefix) for split in splits)
    assert not any(split.key.rsplit("/", 1)[-1].startswith(("_", ".")) for split in splits)


@pytest.mark.slow
def test_the_backlog_stays_capped_and_the_listing_goes_on_where_it_stopped(moto, env, listed, monkeypatch):
    monkeypatch.setattr(enumerator, "MAX_PENDING_SPLITS", 1500)
    source = build_source(source_table(moto, listed, prefix="2026/11/"), CSV, env, infer=False)
    context = RecordingContext()
    enum = source.create_enumerator(context)
    enum.start()

    # Two pages listed (a hidden key left out): the cap is reached within the second.
    assert 1500 <= enum.pending_count() < 2000
    assert not enum.is_exhausted()
    state = json_round_trip(enum.snapshot_state())
    assert state["listed_to"] == "2026/11/01/part-01998.csv" and not state["listed_all"]


def test_a_large_uncompressed_object_is_cut_into_ranges_and_gzip_is_not(moto, s3, bucket, env):
    s3.put_object(Bucket=bucket, Key="big.csv", Body=b"".join(b"%07d\n" % n for n in range(100_000)))
    s3.put_object(Bucket=bucket, Key="big.csv.gz", Body=b"\x1f\x8b" + b"0" * 800_000)
    s3.put_object(Bucket=bucket, Key="empty.csv", Body=b"")

    splits = enumerate_all(moto, env, bucket, split_size_mb=0.25)

    ranges = [(s.start, s.end) for s in splits if s.key == "big.csv"]
    assert ranges == [(0, 262144), (262144, 524288), (524288, 786432), (786432, 800000)]
    (gz,) = [s for s in splits if s.key == "big.csv.gz"]
    assert gz.compressed and gz.start == 0
    assert all(s.etag.strip('"') and s.size in (800_000, 800_002) for s in splits)
    assert "empty.csv" not in {s.key for s in splits}
    assert splits[0].offset.key.endswith(splits[0].etag)
