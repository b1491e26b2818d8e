"""A bounded flow into ``s3://`` Parquet with real ``celery -A dataflow worker`` and ``beat``
processes: a worker SIGKILLed mid-run, then a re-run that replaces the output.

S3 itself cannot be reached here: the store is a moto server (``python -m moto.server``, a
real S3-protocol HTTP endpoint) this module starts on a free loopback port and stops by pid.
"""

from __future__ import annotations

import json

import pytest

from dataflow.models import Assignment
from dataflow.services.flows import flow_start
from tests.connectors.files.s3_sink_support import (
    BUCKET,
    data_keys,
    moto_with_bucket,
    read_objects,
    s3_client,
    s3_config,
)
from tests.e2e.test_crash import _source
from tests.e2e.test_crash_files import _kill_mid_split_and_finish
from tests.factories import DataFlowFactory
from tests.helpers import multiset, wait_for_run

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]
PREFIX = "flows/orders"


@pytest.fixture(scope="module")
def moto():
    yield from moto_with_bucket()


def _rows_in_s3(server) -> list[tuple]:
    table = read_objects(server, PREFIX, "parquet")
    return list(zip(*[table.column(c).to_pylist() for c in table.column_names], strict=True))


def _success(server) -> dict:
    return json.loads(s3_client(server).get_object(Bucket=BUCKET, Key=f"{PREFIX}/_SUCCESS")["Body"].read())


def test_a_sigkilled_worker_and_a_rerun_leave_exactly_the_rows_sent_in_s3(fleet, dirs, moto):
    sent = _source(dirs, files=40, rows=3000)
    flow = DataFlowFactory(batch_size=100, sink={"type": "parquet", **s3_config(moto, PREFIX)})
    fleet.beat()
    fleet.worker("w1")
    fleet.worker("w2")
    run = flow_start(flow=flow)

    run = _kill_mid_split_and_finish(run, fleet, sent)

    assert Assignment.objects.filter(split__run=run, outcome="expired").exists()
    assert multiset(_rows_in_s3(moto)) == multiset(sent)
    first = _success(moto)
    assert first["rows"] == len(sent) and first["files"] == data_keys(moto, PREFIX)

    rerun = wait_for_run(flow_start(flow=flow), timeout=240)

    assert rerun.status == "succeeded", rerun.message
    assert multiset(_rows_in_s3(moto)) == multiset(sent), "the re-run replaced the output, not added to it"
    second = _success(moto)
    assert second["attempt"] != first["attempt"] and second["files"] == data_keys(moto, PREFIX)
    assert not set(first["files"]) & set(second["files"])
    assert "Uploads" not in s3_client(moto).list_multipart_uploads(Bucket=BUCKET)
