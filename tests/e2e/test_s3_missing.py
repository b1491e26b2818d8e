"""Objects deleted between the listing and the reading of an S3 flow: the run fails at once
(a 404 is not transient: no retries, no lease expiries), and its message names every key
that is gone, not only the first. Objects on a moto server (the stand-in for S3, started
by this module on a free loopback port and stopped by its pid), read by the in-process
worker; real Redis and PostgreSQL."""

from __future__ import annotations

import pytest

from connectors.s3 import enumerator
from dataflow.models import SplitStatus
from tests.e2e.test_s3 import put_csv, s3_source
from tests.factories import DataFlowFactory
from tests.helpers import run_to_end
from tests.moto_server import PrivateMotoServer

pytestmark = [pytest.mark.django_db(transaction=True)]


@pytest.fixture(scope="module")
def moto():
    with PrivateMotoServer() as server:
        yield server


def test_objects_deleted_after_the_listing_fail_the_run_naming_every_key(worker, quick, moto, monkeypatch):
    s3 = moto.client("s3")
    s3.create_bucket(Bucket="vanishing")
    for n in range(12):
        put_csv(moto, quick, "vanishing", f"in/part-{n:02}.csv", range(n * 100, n * 100 + 100))
    gone = [f"in/part-{n:02}.csv" for n in range(2, 12)]
    queued = enumerator.S3Enumerator._queue

    def queue_then_delete(self, objects):
        """The enumerator queues the objects it listed; then 10 of them are deleted."""
        queued(self, objects)
        for key in gone:
            s3.delete_object(Bucket="vanishing", Key=key)

    monkeypatch.setattr(enumerator.S3Enumerator, "_queue", queue_then_delete)
    flow = DataFlowFactory(
        source=s3_source(moto, "vanishing", prefix="in/"), sink_path=str(quick.out / "sink")
    )

    run = run_to_end(flow, timeout=60)

    assert run.status == "failed", run.message
    for key in gone:
        assert f"s3://vanishing/{key}" in run.message, run.message
    assert run.reader_failures == 0, "a missing object is no reader failure to retry"
    failed = run.splits.filter(status=SplitStatus.FAILED)
    assert failed.exists()
