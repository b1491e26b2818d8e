"""Runs that cannot make progress say why, on the run, in ``flows`` and in ``runflow``."""

from __future__ import annotations

import subprocess
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from dataflow.models import FlowRun
from tests.e2e.fleet import fleet_env
from tests.e2e.netcut import TcpProxy
from tests.e2e.test_runflow import runflow_once_landed
from tests.factories import DataFlowFactory
from tests.helpers import multiset, read_parquet_rows, run_to_end, wait_until, write_csv

pytestmark = pytest.mark.django_db(transaction=True)


def test_an_unusable_landing_zone_fails_the_run_saying_why(worker, dirs, settings):
    (dirs.root / "not-a-dir").write_text("a file where the landing zone should be")
    settings.DATAFLOW_LANDING_ROOT = dirs.root / "not-a-dir" / "landing"
    settings.DATAFLOW_READER_FAILURE_LIMIT = 3
    write_csv(dirs.data / "a.csv", range(100))

    run = run_to_end(DataFlowFactory(parallelism=1, sink_path=str(dirs.out / "sink")))

    assert run.status == "failed"
    assert "readers failed 3 times" in run.message and "NotADirectoryError" in run.message, run.message
    assert run.reader_failures == 3
    assert not (dirs.out / "sink").exists()


@contextmanager
def tmpfs(mountpoint: Path, options: str):
    """A tmpfs of its own at ``mountpoint`` (the test runs as root), unmounted at the end:
    a real filesystem that fills up, or is read-only, without touching the machine's disk."""
    mountpoint.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(mountpoint)], check=True)
    try:
        yield mountpoint
    finally:
        subprocess.run(["umount", "-l", str(mountpoint)], check=True)


@pytest.mark.parametrize(
    ("options", "reason"),
    [("size=1m", "No space left on device"), ("ro,size=1m", "Read-only file system")],
    ids=["disk_full", "read_only"],
)
def test_a_full_or_read_only_landing_zone_fails_the_run_at_once_and_frees_it(
    worker, dirs, settings, options, reason
):
    # A 1 MB tmpfs stands in for a full disk (ENOSPC once 1 MB is landed); mounted read-only
    # it stands in for a disk remounted ro after an error (EROFS). The source lands ~3 MB.
    for i in range(4):
        write_csv(dirs.data / f"part-{i}.csv", range(i * 100_000, (i + 1) * 100_000))
    with tmpfs(dirs.root / "small-disk", options) as landing:
        settings.DATAFLOW_LANDING_ROOT = landing
        run = run_to_end(DataFlowFactory(parallelism=2, sink_path=str(dirs.out / "sink")))
        # A reader that was landing as the run failed leaves once it sees its lease gone,
        # removing what it landed meanwhile.
        wait_until(lambda: not any(landing.iterdir()), 60, lambda: f"left: {list(landing.rglob('*'))[:5]}")

    assert run.status == "failed"
    assert f"landing zone {landing}: {reason}" in run.message, run.message
    assert run.reader_failures == 0, "failed at the first refusal, not after reader retries"
    assert not (dirs.out / "sink").exists()


def test_runflow_rides_out_a_database_outage(dirs):
    sent = []
    for i in range(6):
        sent += write_csv(dirs.data / f"part-{i}.csv", range(i * 20_000, (i + 1) * 20_000))
    DataFlowFactory(name="outage", batch_size=200, parallelism=2, sink_path=str(dirs.out / "sink"))
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
