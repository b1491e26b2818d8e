"""A prefix and pattern that match no object: the run fails naming them (a typo must not
replace the last good sink with an empty one), unless ``allow_empty`` is set. Against the
moto server (the S3 stand-in, see conftest.py) and a real worker."""

from __future__ import annotations

import pytest

from tests.helpers import read_parquet_rows, run_flow
from tests.moto_server import PrivateMotoServer

from .conftest import source_table


@pytest.fixture()
def loopback_allowed(settings):
    """The moto server is on loopback: the deployment allows it on purpose here."""
    settings.DATAFLOW_ALLOWED_INTERNAL_ADDRESSES = ["127.0.0.1"]


def flow(moto: PrivateMotoServer, bucket: str, sink: str, **source) -> dict:
    return {
        "flow": {"name": "s3-empty", "parallelism": 1, "poll_interval_ms": 50},
        "source": source_table(moto, bucket, prefix="2026/11/", pattern="*.csv", **source),
        "format": {"type": "csv", "schema": "id BIGINT"},
        "transform": {"sql": "SELECT * FROM source"},
        "sink": {"type": "parquet", "path": sink},
    }


@pytest.mark.slow
@pytest.mark.usefixtures("loopback_allowed")
def test_a_listing_that_matches_nothing_fails_naming_prefix_and_pattern(worker, dirs, moto, s3, bucket):
    s3.put_object(Bucket=bucket, Key="2026/11/a.csv", Body=b"id\n1\n2\n")
    sink = str(dirs.out / "sink")
    good = run_flow(flow(moto, bucket, sink))
    assert good.status == "succeeded", good.message

    doc = flow(moto, bucket, sink)
    doc["source"]["prefix"] = "2026/12/"  # nothing there yet
    refused = run_flow(doc)
    doc["source"]["allow_empty"] = True
    allowed = run_flow(doc)

    assert refused.status == "failed"
    assert f"s3://{bucket}/2026/12/" in refused.message and "matched no object" in refused.message
    assert "allow_empty" in refused.message
    assert allowed.status == "succeeded", allowed.message
    assert read_parquet_rows(dirs.out / "sink") == []
