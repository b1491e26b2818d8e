"""A reading run that no reader serves says so (this module runs no Celery worker)."""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time

import pytest
from django.db import connection
from django.db.models import Sum

from dataflow.celery import app as celery_app
from dataflow.models import Assignment, AssignmentOutcome, FlowRun, PendingSplit, Split, UserQuota
from dataflow.redis_client import redis_url
from dataflow.services.context import coordinator_for
from dataflow.services.flows import flow_start
from dataflow.services.runs.slices import read_slice
from dataflow.services.runs.tick import run_tick
from dataflow.services.stalls import run_stalled_for
from source_support.errors import ConfigError
from source_support.runtime import SliceOutcome
from tests.e2e.fleet import ROOT, fleet_env
from tests.factories import DataFlowFactory, UserFactory
from tests.helpers import write_csv

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.slow
def test_a_run_that_no_worker_reads_says_so(transactional_db, dirs, settings):
    # No Celery worker runs in this test: the readers' tasks wait in the queue.
    settings.DATAFLOW_STALL_SECONDS = 1
    write_csv(dirs.data / "a.csv", range(10))
    flow = DataFlowFactory(name="no-worker")
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


def _views_of(flow, run, client) -> dict[str, str]:
    """What each view says about ``run`` right now: ``flows``, the API's status and run,
    the admin's run page and the dashboard's flow page."""
    listing = subprocess.run(
        [sys.executable, "manage.py", "flows"], cwd=ROOT, env=fleet_env(), capture_output=True, text=True
    ).stdout
    return {
        "flows": listing,
        "api status": client.get(f"/api/flows/{flow.name}/status/").json()["run"]["message"],
        "api run": client.get(f"/api/runs/{run.pk}/").json()["message"],
        "admin": client.get(f"/admin/dataflow/flowrun/{run.pk}/change/").content.decode(),
        "dashboard": client.get(f"/flows/{flow.name}/").content.decode(),
    }


@pytest.mark.slow
def test_a_run_whose_reader_died_says_so_in_every_view_with_nothing_ticking(
    transactional_db, dirs, settings, client
):
    # No worker, no beat and no tick run here: as after runflow was killed (SIGKILL, a lost
    # machine), nothing is left to write a note on the run. Its reader's last heartbeat,
    # 120 s ago, stands in for the dead process's; its lease lapsed without a trace.
    write_csv(dirs.data / "a.csv", range(10))
    flow = DataFlowFactory(name="reader-died")
    run = flow_start(flow=flow)
    coordinator = coordinator_for(run)
    coordinator.note_reader_alive(at=coordinator.now() - 120)
    client.force_login(UserFactory(username="root", is_staff=True, is_superuser=True))

    views = _views_of(flow, run, client)

    run.refresh_from_db()
    assert run.message == "", "nothing wrote the note on the run"
    for name, shown in views.items():
        said = re.search(r"no reader has run for (\d+) s", shown)
        assert said and int(said[1]) >= 120, f"{name}: {shown[-2000:]}"
    celery_app.control.purge()


@pytest.mark.slow
def test_a_run_with_a_live_reader_is_not_said_to_stall(transactional_db, dirs, settings, client):
    write_csv(dirs.data / "a.csv", range(10))
    flow = DataFlowFactory(name="reader-alive")
    run = flow_start(flow=flow)
    coordinator = coordinator_for(run)
    coordinator.note_reader_alive(at=coordinator.now() - 120)
    coordinator.acquire_reader(0, None, "here:1")  # a reader takes its lease now
    # A note a tick wrote while no reader ran is not shown once one runs again.
    FlowRun.objects.filter(pk=run.pk).update(message="waiting: no reader has run for 61 s: ...")
    client.force_login(UserFactory(username="root", is_staff=True, is_superuser=True))

    views = _views_of(flow, run, client)

    for name, shown in views.items():
        assert "no reader has run" not in shown, f"{name}: {shown[-2000:]}"
    celery_app.control.purge()


# Issue 25, 2.2: a flow's split count has a ceiling, per user.


def _files_flow(dirs, name: str, files: int, *, watch: bool = False, **fields):
    """A flow over ``files`` small CSV files of its own, each a split (open_cost_kb 0);
    ``watch``: it lists its directory again every 100 ms for new files."""
    folder = dirs.data / name
    folder.mkdir()
    _add_files(folder, range(files))
    source = {"type": "files", "path": str(folder), "open_cost_kb": 0}
    if watch:
        source.update(watch=True, discovery_interval_ms=100, settle_ms=0)
    return DataFlowFactory(name=name, source=source, **fields)


def _add_files(folder, numbers) -> None:
    for i in numbers:
        write_csv(folder / f"part-{i}.csv", range(3))


def test_a_source_past_the_split_ceiling_at_start_fails_its_run_naming_the_limit(
    transactional_db, dirs, settings
):
    settings.DATAFLOW_MAX_SPLITS_PER_FLOW = 5
    flow = _files_flow(dirs, "too-many", 8)

    with pytest.raises(ConfigError) as refused:
        flow_start(flow=flow)

    assert refused.value.field == "source"
    assert refused.value.reason.startswith(
        "the source has more than 5 splits (8 found so far), the most one flow may have "
        "(DATAFLOW_MAX_SPLITS_PER_FLOW); discovery stopped"
    ), refused.value.reason
    run = flow.runs.get()  # recorded, as a run that could not start
    assert run.status == "failed" and "DATAFLOW_MAX_SPLITS_PER_FLOW" in run.message
    assert not Split.objects.exists() and not PendingSplit.objects.exists()


@pytest.mark.slow
def test_splits_discovered_past_the_ceiling_fail_the_run_at_the_tick(transactional_db, dirs, settings):
    settings.DATAFLOW_MAX_SPLITS_PER_FLOW = 5
    flow = _files_flow(dirs, "growing", 3, watch=True)
    run = flow_start(flow=flow)
    _add_files(dirs.data / "growing", range(3, 7))
    time.sleep(0.2)  # the next listing is due (discovery_interval_ms)

    run_tick(run_id=run.pk)
    celery_app.control.purge()  # the readers' tasks must not run in a later test's worker

    run.refresh_from_db()
    assert run.status == "failed"
    assert run.message.startswith("the source has more than 5 splits (7 found so far)"), run.message
    assert run.backlog.count() + run.splits.count() == 3  # the pass that found too many was rolled back


@pytest.mark.slow
def test_a_users_own_split_ceiling_overrides_the_sites(transactional_db, dirs, settings):
    settings.DATAFLOW_MAX_SPLITS_PER_FLOW = 5
    roomy, tight = UserFactory(username="roomy"), UserFactory(username="tight")
    UserQuota.objects.create(user=roomy, max_splits_per_flow=8)
    UserQuota.objects.create(user=tight, max_splits_per_flow=2)

    allowed = flow_start(flow=_files_flow(dirs, "roomy-flow", 8, owner=roomy))
    celery_app.control.purge()
    with pytest.raises(ConfigError) as refused:
        flow_start(flow=_files_flow(dirs, "tight-flow", 3, owner=tight))

    assert allowed.status == "reading", allowed.message
    assert allowed.backlog.count() == 8
    assert "more than 2 splits (3 found so far)" in refused.value.reason
    assert "(max_splits_per_flow of user tight)" in refused.value.reason


@pytest.mark.slow
def test_readers_whose_clock_is_skewed_keep_their_leases_and_raise_no_false_stall(
    transactional_db, dirs, settings, monkeypatch, rds, prefix
):
    # Two readers run on a machine whose clock is 5 minutes behind (time.time in their
    # threads; this thread, the tick's and the views', keeps the true time). Leases and
    # stalls are measured on Redis's clock: the readers keep their leases slice after slice,
    # and once their leases lapse (the next slice late in a queue) the run is not said to
    # have had no reader for 300 s.
    true_time = time.time
    skewed = threading.local()
    monkeypatch.setattr(time, "time", lambda: true_time() - getattr(skewed, "by_s", 0))
    for stream in ("a", "b"):
        for i in range(50):
            rds.xadd(f"{prefix}{stream}", {"id": i, "name": f"n{i}", "amount": i})
    flow = DataFlowFactory(
        name="skewed", stream=True, streams=f"{prefix}*", stream_url=redis_url(), parallelism=2
    )
    run = flow_start(flow=flow)
    tokens: dict[int, list[str | None]] = {0: [], 1: []}

    def reader(subtask: int) -> None:
        skewed.by_s = 300
        token = None
        try:
            for _ in range(4):  # four slices, each going on with the token of the last
                report = read_slice(run_id=run.pk, subtask=subtask, token=token)
                token = report.token
                tokens[subtask].append(token if report.outcome == SliceOutcome.CONTINUE else None)
        finally:
            connection.close()

    threads = [threading.Thread(target=reader, args=(s,), name=f"skewed-{s}") for s in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert Split.objects.filter(run=run).aggregate(n=Sum("records_read"))["n"] == 100
    for subtask, held in tokens.items():
        assert None not in held and len(set(held)) == 1, f"reader {subtask} lost its lease: {held}"
    assert not Assignment.objects.filter(split__run=run, outcome=AssignmentOutcome.EXPIRED).exists()
    coordinator = coordinator_for(run)
    for subtask in (0, 1):  # their leases lapse: no reader runs now
        coordinator.redis.delete(coordinator.keys.reader(subtask))
    assert run_stalled_for(run) is None
    run_tick(run_id=run.pk)
    run.refresh_from_db()
    assert "no reader has run" not in run.message
    celery_app.control.purge()
