"""What real process managers send: SIGTERM to ``celery -A dataflow worker`` and ``beat``.

``docker stop``, systemd and Kubernetes send SIGTERM to the main process, then SIGKILL after
a grace period. A worker's warm shutdown must not keep a transform running to its end, nor
hold its run until the transform lease lapses.
"""

from __future__ import annotations

import signal

import pytest
from django_celery_beat.models import PeriodicTask

from dataflow.models import FlowRun
from dataflow.services.context import coordinator_for
from dataflow.services.flows import flow_start, flow_stop
from source_support.coordination import Mark
from tests.e2e.fleet import Fleet
from tests.factories import DataFlowFactory
from tests.helpers import wait_until, write_csv

pytestmark = pytest.mark.django_db(transaction=True)

#: Billions of rows: it runs far longer than any wait below (it is never let finish).
ENDLESS_SQL = "SELECT count(*) AS n FROM source a CROSS JOIN source b CROSS JOIN source c"


@pytest.mark.parametrize("pool", ["threads", "prefork"])
def test_sigterm_gives_a_running_transform_back_at_once(fleet: Fleet, dirs, settings, pool):
    # A lease of 10 minutes: a second worker can take the run within this test only if the
    # first gave it back, never because the lease lapsed.
    settings.DATAFLOW_TRANSFORM_LEASE_SECONDS = 600
    write_csv(dirs.data / "a.csv", range(2000))
    flow = DataFlowFactory(parallelism=1, sql=ENDLESS_SQL)
    fleet.beat()
    first = fleet.worker("w1", concurrency=2, pool=pool)
    run = flow_start(flow=flow)

    def spark_job_running() -> bool:
        run.refresh_from_db()
        assert run.status in ("reading", "transforming"), run.message
        return bool(run.spark_app_id)

    wait_until(spark_job_running, 180, lambda: fleet.log("w1")[-3000:])
    first.send_signal(signal.SIGTERM)  # to the main process only, as docker stop does
    first.wait(timeout=120)
    fleet.procs.pop("w1")

    run.refresh_from_db()
    assert first.returncode == 0, fleet.log("w1")[-3000:]
    assert run.status == "transforming" and run.transform_attempts == 1
    assert "given back" in run.message, run.message
    assert not coordinator_for(run).is_set(Mark.TRANSFORM_LEASE)
    fleet.worker("w2", concurrency=2, pool=pool)
    wait_until(
        lambda: FlowRun.objects.get(pk=run.pk).transform_attempts == 2,
        120,
        lambda: fleet.log("w2")[-3000:],
    )
    flow_stop(flow=flow)


def test_sigterm_ends_beat_cleanly(fleet: Fleet, dirs):
    beat = fleet.beat()
    # Once its scheduler has copied the settings' entries into the database, beat runs.
    started = PeriodicTask.objects.filter(name="dataflow-webhook-deliveries-resume")
    wait_until(lambda: started.exists() or beat.poll() is not None, 60, lambda: fleet.log("beat"))

    beat.send_signal(signal.SIGTERM)
    beat.wait(timeout=60)
    fleet.procs.pop("beat")

    assert beat.returncode == 0, fleet.log("beat")[-3000:]
    assert "Traceback" not in fleet.log("beat")
