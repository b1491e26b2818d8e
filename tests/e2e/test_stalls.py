"""Runs that cannot make progress say why, on the run, in ``flows`` and in ``runflow``."""

from __future__ import annotations

import time

import pytest

from dataflow.models import FlowRun
from dataflow.services.flows import flow_apply
from tests.e2e.fleet import fleet_env
from tests.e2e.netcut import TcpProxy
from tests.e2e.test_runflow import runflow_once_landed
from tests.helpers import multiset, read_parquet_rows, run_flow, spec, write_csv

pytestmark = pytest.mark.django_db(transaction=True)


def test_an_unusable_landing_zone_fails_the_run_saying_why(worker, dirs, settings):
    (dirs.root / "not-a-dir").write_text("a file where the landing zone should be")
    settings.DATAFLOW_LANDING_ROOT = dirs.root / "not-a-dir" / "landing"
    settings.DATAFLOW_READER_FAILURE_LIMIT = 3
    write_csv(dirs.data / "a.csv", range(100))

    run = run_flow(spec("no-landing", str(dirs.data), str(dirs.out / "sink"), parallelism=1))

    assert run.status == "failed"
    assert "readers failed 3 times" in run.message and "NotADirectoryError" in run.message, run.message
    assert run.reader_failures == 3
    assert not (dirs.out / "sink").exists()


def test_runflow_rides_out_a_database_outage(dirs):
    sent = []
    for i in range(6):
        sent += write_csv(dirs.data / f"part-{i}.csv", range(i * 20_000, (i + 1) * 20_000))
    flow_apply(spec=spec("outage", str(dirs.data), str(dirs.out / "sink"), batch_size=200, parallelism=2))
    env = fleet_env()
    proxy = TcpProxy.for_url(env["DATABASE_URL"])
    env["DATABASE_URL"] = proxy.url(env["DATABASE_URL"]) + "?connect_timeout=2"
    try:
        proc = runflow_once_landed(env, "outage", dirs.landing, args=["--until-done"])
        proxy.cut()
        time.sleep(8)
        assert proc.poll() is None, "runflow gave up during a short outage: " + proc.communicate()[1][-3000:]
        proxy.restore()
        out, err = proc.communicate(timeout=300)
    finally:
        proxy.close()

    assert proc.returncode == 0, out + err[-3000:]
    assert f"succeeded: {len(sent)} records read" in out
    assert multiset(read_parquet_rows(dirs.out / "sink")) == multiset(sent)
    assert FlowRun.objects.get(flow__name="outage").records_read == len(sent)
