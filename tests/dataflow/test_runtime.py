"""The reader and enumerator loops on real Redis and PostgreSQL, driven by hand: one reader
slice in a thread, enumerator ticks in the test's thread (no Celery)."""

from __future__ import annotations

import threading
from contextlib import contextmanager

import pytest
from django.db import connection, transaction

from connectors.sequence.enumerator import NumberSequenceEnumerator
from connectors.sequence.source import NumberRangeReader, NumberSequenceSource
from dataflow.models import Assignment, FlowRun, LandedBatch, Split
from dataflow.services.context import coordinator_for, landing_zone, source_for
from dataflow.services.flows import flow_start
from dataflow.services.runs.slices import read_slice
from dataflow.store import DjangoRunStore
from source_support.api import SourceEvent
from source_support.reader_base import SourceReaderBase
from source_support.runtime import ReaderSettings, SliceOutcome, enumerator_tick, reader_slice
from tests.factories import DataFlowFactory

pytestmark = pytest.mark.django_db(transaction=True)


class CountingStore(DjangoRunStore):
    def __init__(self, run: FlowRun) -> None:
        super().__init__(run)
        self.commits: list[int] = []  # batches per commit

    def commit_batches(self, token, commits):
        self.commits.append(len(commits))
        return super().commit_batches(token, commits)


def read_all(run: FlowRun, store: DjangoRunStore, source=None, **reader_settings) -> SliceOutcome:
    """Runs reader 0 until it is told there is no more, ticking while it reads."""
    coordinator, source = coordinator_for(run), source or source_for(run)
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
    flow = DataFlowFactory(sequence=True, count=count, splits=splits, parallelism=1, batch_size=batch_size)
    return flow_start(flow=flow)


@pytest.mark.slow
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


@pytest.mark.slow
def test_a_batch_in_the_middle_of_a_split_is_committed_at_once(dirs):
    run = sequence_run(dirs, count=1000, splits=1, batch_size=100)
    store = CountingStore(run)

    assert read_all(run, store, commit_interval_s=60) == SliceOutcome.DONE

    assert store.commits == [1] * 10  # each checkpoint as soon as its batch landed
    split = Split.objects.get(run=run)
    assert (split.status, split.position, split.records_read) == ("finished", 1000, 1000)


@pytest.mark.slow
def test_a_reader_serves_its_own_split_requests_when_no_tick_runs(dirs, settings):
    # No Celery worker runs here: the queued ticks are never taken, so every split this
    # reader reads was assigned by the enumerator it ran itself when it asked.
    settings.DATAFLOW_READER_SLICE_SECONDS = 60
    run = sequence_run(dirs, count=1000, splits=20, batch_size=100)

    report = read_slice(run_id=run.pk, subtask=0, token=None)

    assert report.outcome == SliceOutcome.DONE
    assert report.records == 1000
    assert Split.objects.filter(run=run, status="finished").count() == 20


# The reader contract for streams: source events both ways, and revoked splits.
#
# A sequence source whose enumerator talks to its readers: a test double of a connector
# (the sequence source itself has nothing to say), driven by the real runtime on Redis and
# PostgreSQL.


#: 400 batches in each split: the first is still being read when the reader's reply comes.
COUNT = 8000


class TalkingEnumerator(NumberSequenceEnumerator):
    """Greets a reader when it first asks and remembers the replies; with ``revoke``, the
    reply (which comes while the reader reads its first split) makes it take that split
    back and hand it out again."""

    def __init__(self, context, *, state, revoke: bool):
        super().__init__(context, count=COUNT, splits=2, state=state)
        self.replies = (state or {}).get("replies", [])
        self.greeted = (state or {}).get("greeted", False)
        self.revoked = (state or {}).get("revoked", False)
        self.revoke = revoke

    def handle_split_request(self, subtask, requester_location=""):
        if not self.greeted:
            self.context.send_event_to_source_reader(subtask, SourceEvent("hello", {"to": subtask}))
            self.greeted = True
        super().handle_split_request(subtask, requester_location)

    def handle_source_event(self, subtask, event):
        self.replies.append({"from": subtask, **event.payload})
        if self.revoke and not self.revoked:
            self.revoked = True
            moved = self.context.revoke_splits(["range-0"])
            self.context.assign_splits({subtask: moved})

    def snapshot_state(self):
        return super().snapshot_state() | {
            "replies": self.replies,
            "greeted": self.greeted,
            "revoked": self.revoked,
        }


class AnsweringReader(NumberRangeReader):
    def __init__(self, context, heard):
        super().__init__()
        self.context, self.heard = context, heard

    def handle_source_event(self, event):
        self.heard.append(event)
        self.context.send_source_event_to_coordinator(SourceEvent("reply", {"heard": event.kind}))


class TalkingSource(NumberSequenceSource):
    def __init__(self, *, revoke: bool = False):
        super().__init__(count=COUNT, splits=2, batch_size=10)
        self.heard: list[SourceEvent] = []
        self.revoke = revoke

    def create_enumerator(self, context):
        return TalkingEnumerator(context, state=None, revoke=self.revoke)

    def restore_enumerator(self, context, state):
        return TalkingEnumerator(context, state=state, revoke=self.revoke)

    def create_reader(self, context):
        return SourceReaderBase(context, AnsweringReader(context, self.heard), batch_size=10)


@pytest.mark.slow  # over 5 s on 2 cores: not in the fast lane
def test_source_events_reach_the_reader_and_its_reply_the_enumerator(dirs):
    run = sequence_run(dirs, count=COUNT, splits=2, batch_size=10)
    source = TalkingSource()

    assert read_all(run, DjangoRunStore(run), source=source) == SliceOutcome.DONE

    assert source.heard == [SourceEvent("hello", {"to": 0})]
    assert FlowRun.objects.get(pk=run.pk).enumerator_state["replies"] == [{"from": 0, "heard": "hello"}]


@pytest.mark.slow
def test_a_revoked_split_goes_on_from_its_checkpoint_under_its_new_owner(dirs):
    run = sequence_run(dirs, count=COUNT, splits=2, batch_size=10)

    assert read_all(run, DjangoRunStore(run), source=TalkingSource(revoke=True)) == SliceOutcome.DONE

    outcomes = list(
        Assignment.objects.filter(split__run=run, split__split_id="range-0").values_list("outcome", flat=True)
    )
    assert outcomes == ["revoked", "finished"]
    # The revocation is the runtime's to handle: the connector never hears of it.
    assert FlowRun.objects.get(pk=run.pk).enumerator_state["replies"] == [{"from": 0, "heard": "hello"}]
    landed = LandedBatch.objects.filter(split__run=run).order_by("split_id", "start_position")
    numbers = sorted(n for path in landed.values_list("path", flat=True) for n in _values(path))
    assert numbers == list(range(COUNT))  # each once: nothing lost or read twice across the move


def test_what_a_pass_tells_readers_reaches_them_only_once_it_commits(dirs):
    run = sequence_run(dirs, count=COUNT, splits=2, batch_size=10)
    coordinator = coordinator_for(run)
    coordinator.acquire_reader(0, None, "here")
    coordinator.request_split(0)
    events, notices = coordinator.keys.reader_events(0), coordinator.keys.assigned(0)
    before_commit: list[tuple[int, int]] = []

    @contextmanager
    def atomic():
        with transaction.atomic():
            yield
            before_commit.append((coordinator.redis.llen(events), coordinator.redis.llen(notices)))

    enumerator_tick(
        source=TalkingSource(),
        coordinator=coordinator,
        store=DjangoRunStore(run),
        parallelism=1,
        atomic=atomic,
    )

    assert before_commit[0] == (0, 0)  # the greeting and the new split wait for the commit
    assert (coordinator.redis.llen(events), coordinator.redis.llen(notices)) == (1, 1)


def _values(path: str) -> list[int]:
    import pyarrow.parquet as pq

    return pq.read_table(path).column("value").to_pylist()
