"""The conformance kit over the s3 source, bounded and watched, against a moto server
(the stand-in for S3, started by conftest.py on a loopback port).

The external system going away is real here: the kit's ``stop_system`` kills the moto
server, and ``start_system`` starts one on the same port and puts the same objects back
(moto keeps nothing once stopped; the same bytes give the same ETag, an MD5), as an S3
that was away for a while and came back with what it held."""

from __future__ import annotations

from collections import Counter

import pytest

from connectors.s3 import enumerator
from source_support.testing import ExternalContext, NotApplicable, Record, SourceOptions
from source_support.testing.suite import SourceConformanceSuite
from tests.connectors.s3.conftest import source_table
from tests.connectors.s3.helpers import build_source
from tests.moto_server import PrivateMotoServer

COLUMNS = ("id", "split", "text")
FORMAT = {"type": "csv", "schema": "id BIGINT, split BIGINT, text STRING", "header": True}


class S3Context(ExternalContext):
    """Split i is an object of CSV records (each further write to it, another object)."""

    def __init__(self, moto: PrivateMotoServer, bucket: str, env, *, watch: bool = False) -> None:
        self.moto, self.bucket, self.env, self.watch = moto, bucket, env, watch
        self.writes_while_running = watch
        self.written: list[Record] = []
        self.objects: dict[str, bytes] = {}
        self.count = Counter()

    def splits_wanted(self, count: int) -> None:
        """Objects are made as they are written."""

    def write(self, split_index: int, records: list[Record]) -> list[Record]:
        lines = [",".join(COLUMNS)] + [",".join(str(r[c]) for c in COLUMNS) for r in records]
        self._put(split_index, ("\n".join(lines) + "\n").encode())
        self.written += records
        return records

    def write_bad_record(self, split_index: int) -> None:
        self._put(split_index, f"{','.join(COLUMNS)}\nnot-a-number,{split_index},bad\n".encode())

    def _put(self, split_index: int, body: bytes) -> None:
        key = f"in/part-{split_index:04d}-{self.count[split_index]:04d}.csv"
        self.count[split_index] += 1
        self.objects[key] = body
        self.moto.client("s3").put_object(Bucket=self.bucket, Key=key, Body=body)

    def append(self, split_index: int, records: list[Record]) -> list[Record]:
        raise NotApplicable(
            "an object is written whole, never appended to; one rewritten while read fails its split "
            "(test_changed_object.py)"
        )

    def stop_system(self) -> None:
        self.moto.kill()

    def start_system(self) -> None:
        self.moto.start()
        s3 = self.moto.client("s3")
        s3.create_bucket(Bucket=self.bucket)
        for key, body in self.objects.items():
            s3.put_object(Bucket=self.bucket, Key=key, Body=body)

    def source(self, options: SourceOptions):
        table = source_table(self.moto, self.bucket, prefix="in/", watch=self.watch)
        source = build_source(table, FORMAT, self.env, batch_size=options.batch_size, infer=False)
        source.clock = options.clock
        source.stop = options.stop
        return source

    def expected(self) -> list[Record]:
        return list(self.written)


class TestS3Conformance(SourceConformanceSuite):
    @pytest.fixture()
    def external_context(self, moto, bucket, env, quick_retries):
        return S3Context(moto, bucket, env)


@pytest.mark.slow  # about 15 s over the cases: the bounded class above runs in the fast lane
class TestWatchedS3Conformance(SourceConformanceSuite):
    """``watch = true``: an unbounded source, which also reads objects put while it runs."""

    @pytest.fixture()
    def external_context(self, moto, bucket, env, quick_retries, monkeypatch):
        monkeypatch.setattr(enumerator, "DISCOVERY_INTERVAL_MS", 1000)  # the kit's tick
        return S3Context(moto, bucket, env, watch=True)
