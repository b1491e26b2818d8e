"""A reading run that no reader serves says so (this module runs no Celery worker)."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from dataflow.celery import app as celery_app
from dataflow.services.flows import flow_apply, flow_start
from dataflow.services.runs import run_tick
from tests.e2e.fleet import ROOT, fleet_env
from tests.helpers import spec, write_csv

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_run_that_no_worker_reads_says_so(transactional_db, dirs, settings):
    # No Celery worker runs in this test: the readers' tasks wait in the queue.
    settings.DATAFLOW_STALL_SECONDS = 1
    write_csv(dirs.data / "a.csv", range(10))
    flow, _ = flow_apply(spec=spec("no-worker", str(dirs.data), str(dirs.out / "sink")))
    run = flow_start(flow=flow)

    run_tick(run_id=run.pk)
    time.sleep(1.2)
    run_tick(run_id=run.pk)

    run.refresh_from_db()
    assert run.status == "reading"
    assert run.message.startswith("waiting: no reader has run for"), run.message
    assert "queue 'dataflow'" in run.message
    listing = subprocess.run(
        [sys.executable, "manage.py", "flows"], cwd=ROOT, env=fleet_env(), capture_output=True, text=True
    ).stdout
    assert "no reader has run" in listing
    celery_app.control.purge()  # the readers' tasks must not run in a later test's worker
