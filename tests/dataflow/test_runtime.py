"""The reader and enumerator loops on real Redis and PostgreSQL, driven by hand: one reader
slice in a thread, enumerator ticks in the test's thread (no Celery)."""

from __future__ import annotations

import threading

import pytest
from django.db import connection, transaction

from dataflow.models import FlowRun, LandedBatch, Split
from dataflow.services.flows import flow_apply, flow_start
from dataflow.services.runs import coordinator_for, landing_zone, read_slice, source_for
from dataflow.store import DjangoRunStore
from source_support.runtime import ReaderSettings, SliceOutcome, enumerator_tick, reader_slice

pytestmark = pytest.mark.django_db(transaction=True)


class CountingStore(DjangoRunStore):
    def __init__(self, run: FlowRun) -> None:
        super().__init__(run)
        self.commits: list[int] = []  # batches per commit

    def commit_batches(self, token, commits):
        self.commits.append(len(commits))
        return super().commit_batches(token, commits)


def read_all(run: FlowRun, store: DjangoRunStore, **reader_settings) -> SliceOutcome:
    """Runs reader 0 until it is told there is no more, ticking while it reads."""
    coordinator, source = coordinator_for(run), source_for(run)
    outcome: list[SliceOutcome] = []

    def reader() -> None:
        try:
            report = reader_slice(
                source=source,
                coordinator=coordinator,
                store=store,
                landing=landing_zone(),
                run_key=str(run.pk),
                subtask=0,
                token=None,
                settings=ReaderSettings(
                    slice_seconds=60, poll_interval_s=0.01, skip_errors=False, **reader_settings
                ),
                on_split_request=lambda: None,
            )
            outcome.append(report.outcome)
        finally:
            connection.close()

    thread = threading.Thread(target=reader)
    thread.start()
    while thread.is_alive():
        enumerator_tick(
            source=source,
            coordinator=coordinator,
            store=DjangoRunStore(run),
            parallelism=1,
            atomic=transaction.atomic,
        )
        thread.join(0.02)
    return outcome[0]


def sequence_run(dirs, *, count: int, splits: int, batch_size: int) -> FlowRun:
    flow, _ = flow_apply(
        spec={
            "flow": {"name": "runtime", "parallelism": 1, "batch_size": batch_size},
            "source": {"type": "sequence", "count": count, "splits": splits},
            "transform": {"sql": "SELECT * FROM source"},
            "sink": {"type": "parquet", "path": str(dirs.out / "sink")},
        }
    )
    return flow_start(flow=flow)


def test_small_splits_that_end_together_are_committed_together(dirs):
    run = sequence_run(dirs, count=3000, splits=300, batch_size=100)
    store = CountingStore(run)

    assert read_all(run, store, commit_interval_s=60, max_batches_per_commit=50) == SliceOutcome.DONE

    assert Split.objects.filter(run=run, status="finished").count() == 300
    assert LandedBatch.objects.filter(split__run=run).count() == 300
    assert sum(store.commits) == 300
    # Committed when the reader ran out of splits or 50 batches waited, not one by one.
    assert len(store.commits) < 300 / 4
    assert max(store.commits) == 50


def test_a_batch_in_the_middle_of_a_split_is_committed_at_once(dirs):
    run = sequence_run(dirs, count=1000, splits=1, batch_size=100)
    store = CountingStore(run)

    assert read_all(run, store, commit_interval_s=60) == SliceOutcome.DONE

    assert store.commits == [1] * 10  # each checkpoint as soon as its batch landed
    split = Split.objects.get(run=run)
    assert (split.status, split.position, split.records_read) == ("finished", 1000, 1000)


def test_a_reader_serves_its_own_split_requests_when_no_tick_runs(dirs, settings):
    # No Celery worker runs here: the queued ticks are never taken, so every split this
    # reader reads was assigned by the enumerator it ran itself when it asked.
    settings.DATAFLOW_READER_SLICE_SECONDS = 60
    run = sequence_run(dirs, count=1000, splits=20, batch_size=100)

    report = read_slice(run_id=run.pk, subtask=0, token=None)

    assert report.outcome == SliceOutcome.DONE
    assert report.records == 1000
    assert Split.objects.filter(run=run, status="finished").count() == 20
