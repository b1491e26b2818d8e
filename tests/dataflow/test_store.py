"""DjangoRunStore on the real PostgreSQL: assignments, fenced commits of many splits at
once, and leases taken back. (SQLite runs the same statements in tests/e2e/test_quickstart.py.)"""

from __future__ import annotations

from dataclasses import replace

import pytest
from django.conf import settings
from django.db import connection, transaction

from connectors.files.split import FileSplit, FileSplitSerializer
from dataflow.models import Assignment, DeadLetter, LandedBatch, Split
from dataflow.services.flows import flow_start
from dataflow.store import DjangoRunStore
from source_support.api import BadRecord
from source_support.coordination import StoreBacklog
from source_support.runtime import BatchCommit
from tests.factories import DataFlowFactory, FlowRunFactory
from tests.helpers import write_csv

pytestmark = pytest.mark.django_db

TOKENS = {0: "token-a", 1: "token-b"}


@pytest.fixture()
def store(dirs) -> DjangoRunStore:
    return DjangoRunStore(FlowRunFactory(flow__sequence=True, running=True))


def row(index: int, position: int = 0) -> tuple[str, dict, int]:
    return (f"range-{index}", {"index": index, "start": index * 100, "end": index * 100 + 100}, position)


def done(split_id: str, start: int, end: int, **kw) -> BatchCommit:
    return BatchCommit(
        split_id, start, end, kw.get("path"), end - start, kw.get("bad", []), kw.get("finished", True)
    )


def test_new_splits_are_stored_with_one_active_assignment_each(store):
    assigned = store.record_assignments({0: [row(0), row(1)], 1: [row(2)]}, TOKENS, {0: "host:1"})

    assert assigned == {0: [row(0), row(1)], 1: [row(2)]}
    splits = {s.split_id: s for s in Split.objects.filter(run=store.run)}
    assert splits["range-0"].payload == row(0)[1]
    assert (splits["range-2"].owner_subtask, splits["range-2"].owner_token) == (1, "token-b")
    assert {
        (a.split.split_id, a.subtask, a.reader_location, a.outcome)
        for a in Assignment.objects.filter(split__run=store.run)
    } == {
        ("range-0", 0, "host:1", "active"),
        ("range-1", 0, "host:1", "active"),
        ("range-2", 1, "", "active"),
    }
    assert store.owned_splits(0, "token-a") == [row(0), row(1)]


def test_a_split_out_with_a_reader_is_not_assigned_again(store):
    store.record_assignments({0: [row(0)]}, TOKENS, {})

    assert store.record_assignments({1: [row(0), row(1)]}, TOKENS, {}) == {1: [row(1)]}
    assert Split.objects.get(run=store.run, split_id="range-0").owner_token == "token-a"
    assert Assignment.objects.filter(split__run=store.run, split__split_id="range-0").count() == 1


def test_a_returned_split_goes_on_from_the_stored_checkpoint(store):
    store.record_assignments({0: [row(0), row(1)]}, TOKENS, {})
    assert store.commit_batches("token-a", [done("range-0", 0, 70, finished=False)]) == {"range-0"}

    reclaimed = store.reclaim_expired({1: "token-b"})  # reader 0 is gone

    assert reclaimed == {0: [row(0, 70), row(1, 0)]}
    expired = Assignment.objects.get(split__run=store.run, split__split_id="range-0", outcome="expired")
    assert expired.end_position == 70
    # The enumerator's copy says 0; the stored checkpoint (70) wins.
    assert store.record_assignments({1: [row(0, 0)]}, TOKENS, {}) == {1: [row(0, 70)]}
    assert (
        Assignment.objects.get(
            split__run=store.run, split__split_id="range-0", outcome="active"
        ).start_position
        == 70
    )


def test_one_commit_moves_many_splits_and_merges_the_batches_of_one(store, tmp_path):
    store.record_assignments({0: [row(0), row(1), row(2)]}, TOKENS, {})
    bad = BadRecord(position=30, raw="x,y", reason="not a number")
    commits = [
        done("range-0", 0, 40, path="a-0", finished=False),
        done("range-0", 40, 100, path="a-40", bad=[bad]),
        done("range-1", 0, 100, path="b-0"),
        done("range-2", 0, 50, path="c-0", finished=False),
    ]

    assert store.commit_batches("token-a", commits) == {"range-0", "range-1", "range-2"}

    splits = {s.split_id: s for s in Split.objects.filter(run=store.run)}
    assert [
        (splits[i].status, splits[i].position, splits[i].records_read)
        for i in ("range-0", "range-1", "range-2")
    ] == [
        ("finished", 100, 100),
        ("finished", 100, 100),
        ("assigned", 50, 50),
    ]
    assert splits["range-0"].errors_count == 1
    assert sorted(LandedBatch.objects.filter(split__run=store.run).values_list("path", flat=True)) == [
        "a-0",
        "a-40",
        "b-0",
        "c-0",
    ]
    assert list(DeadLetter.objects.filter(run=store.run).values_list("split_id", "position")) == [
        ("range-0", 30)
    ]
    outcomes = dict(Assignment.objects.filter(split__run=store.run).values_list("split__split_id", "outcome"))
    assert outcomes == {"range-0": "finished", "range-1": "finished", "range-2": "active"}
    assert Assignment.objects.get(split__run=store.run, split__split_id="range-1").end_position == 100


def test_a_commit_moves_only_splits_the_token_owns_at_their_checkpoint(store):
    store.record_assignments({0: [row(0), row(1)], 1: [row(2)]}, TOKENS, {})
    store.commit_batches("token-a", [done("range-0", 0, 50, finished=False)])

    moved = store.commit_batches(
        "token-a",
        [
            done("range-0", 0, 50, path="replayed", finished=False),  # replay of a committed batch
            done("range-1", 0, 100, path="mine"),
            done("range-2", 0, 100, path="not-mine"),  # owned by token-b
        ],
    )

    assert moved == {"range-1"}
    assert list(LandedBatch.objects.filter(split__run=store.run).values_list("path", flat=True)) == ["mine"]
    assert Split.objects.get(run=store.run, split_id="range-2").position == 0
    assert Split.objects.get(run=store.run, split_id="range-0").records_read == 50


def test_batches_of_a_split_that_do_not_follow_each_other_are_refused(store):
    store.record_assignments({0: [row(0)]}, TOKENS, {})

    with pytest.raises(ValueError, match="does not follow"):
        store.commit_batches("token-a", [done("range-0", 0, 40, finished=False), done("range-0", 50, 100)])


def test_reclaim_takes_back_only_splits_of_readers_that_are_gone(store):
    store.record_assignments({0: [row(0)], 1: [row(1)]}, TOKENS, {})
    store.commit_batches("token-a", [done("range-0", 0, 100)])

    assert store.reclaim_expired(TOKENS) == {}
    assert store.reclaim_expired({0: "token-a"}) == {1: [row(1)]}
    assert Split.objects.get(run=store.run, split_id="range-0").status == "finished"
    assert Split.objects.get(run=store.run, split_id="range-1").status == "unassigned"


def test_the_backlog_keeps_splits_in_order_with_returned_ones_first(store):
    store.backlog_add([{"n": 1}, {"n": 2}], front=False)
    store.backlog_add([{"n": 3}], front=False)
    head = store.backlog_head(1)
    store.backlog_remove([key for key, _ in head])

    store.backlog_add([{"n": "back-a"}, {"n": "back-b"}], front=True)

    assert [payload for _, payload in head] == [{"n": 1}]
    assert [payload for _, payload in store.backlog_head(10)] == [
        {"n": "back-a"},
        {"n": "back-b"},
        {"n": 2},
        {"n": 3},
    ]


def test_a_pass_takes_from_the_backlog_in_two_statements_however_many_requests(
    store, django_assert_num_queries
):
    backlog = StoreBacklog(store, FileSplitSerializer())
    backlog.append([FileSplit(f"/d/{i}.csv", 0, 10, 0) for i in range(100)])

    with django_assert_num_queries(2):
        taken = [backlog.take(3) for _ in range(30)]
        backlog.flush()

    assert [s.path for given in taken for s in given] == [f"/d/{i}.csv" for i in range(90)]
    assert [payload["path"] for _, payload in store.backlog_head(100)] == [
        f"/d/{i}.csv" for i in range(90, 100)
    ]


def test_a_committed_batchs_note_is_on_its_split_and_in_the_run_message(store):
    """A connector's note (a stream replaced, its server reset) reaches the operator where
    the run's state is shown; a commit that is refused says nothing."""
    store.record_assignments({0: [row(0)], 1: [row(1)]}, TOKENS, {})
    note = "stream orders: the source was reset (its Redis server restarted without the stream)"
    base = done("range-0", 0, 0)

    store.commit_batches("token-b", [replace(base, note="refused")])
    store.commit_batches("token-a", [replace(base, note=note)])

    store.run.refresh_from_db()
    assert store.run.message == note
    assert Split.objects.get(run=store.run, split_id="range-0").error == note


def _idle_timeout() -> int:
    """The session's idle_in_transaction_session_timeout, in milliseconds (0: none)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT (extract(epoch FROM current_setting('idle_in_transaction_session_timeout')::interval)"
            " * 1000)::int"
        )
        return cursor.fetchone()[0]


def test_a_run_started_inside_a_callers_transaction_leaves_its_idle_time_alone(dirs):
    # The test's transaction is the caller's (an admin view's, say): the start's enumeration
    # runs in an atomic block within it, and must not end the caller's session after two
    # reader leases of idleness (it did: tests/dataflow/admin/test_runs.py reset it by hand).
    write_csv(dirs.data / "orders.csv", range(10))
    flow_start(flow=DataFlowFactory(source_path=str(dirs.data / "orders.csv")))

    assert _idle_timeout() == 0


@pytest.mark.django_db(transaction=True)
def test_a_transaction_of_the_stores_own_is_bounded_while_it_lasts(store):
    # A tick's enumeration, in a transaction of its own: bounded to two reader leases, as the
    # server then ends a frozen process's session and its locks go.
    with transaction.atomic():
        store.load_enumerator_state()
        bounded = _idle_timeout()
    assert bounded == int(settings.DATAFLOW_READER_LEASE_SECONDS * 2000)
    assert _idle_timeout() == 0
