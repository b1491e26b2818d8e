"""The cases every source connector passes (Flink ``SourceTestSuiteBase``).

A connector's tests subclass ``SourceConformanceSuite`` and give it an ``ExternalContext``
through the ``external_context`` fixture::

    class TestFilesConformance(SourceConformanceSuite):
        @pytest.fixture()
        def external_context(self, tmp_path):
            context = FilesContext(tmp_path)
            yield context
            context.close()

Each case writes records through the context, runs the source in a ``SourceHarness`` and
asserts that what was committed is exactly what was written: every record once (as a
multiset), and in write order within each split where the context says the connector
promises it.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import pytest

from source_support.runtime import SliceOutcome
from source_support.testing.external import ExternalContext, NotApplicable, Record, SourceOptions
from source_support.testing.harness import SourceHarness
from source_support.testing.memory import ManualClock, json_round_trip

#: Rounds run after an unbounded run has read everything, so a late duplicate shows.
QUIET_ROUNDS = 5


#: A record as something a set or a Counter holds: its (column, value) pairs, sorted.
FrozenRecord = tuple[tuple[str, Any], ...]


def frozen(record: Mapping[str, Any]) -> FrozenRecord:
    return tuple(sorted(record.items()))


def assert_same_records(arrived: Iterable[Record], expected: Iterable[Record], what: str = "records") -> None:
    """The same records, each as many times (order aside); the message names a few of
    the missing and the extra ones."""
    got, wanted = Counter(map(frozen, arrived)), Counter(map(frozen, expected))
    if got == wanted:
        return
    missing, extra = wanted - got, got - wanted
    raise AssertionError(
        f"{what}: {sum(missing.values())} missing (e.g. {[dict(r) for r in list(missing)[:3]]}), "
        f"{sum(extra.values())} extra or repeated (e.g. {[dict(r) for r in list(extra)[:3]]})"
    )


def assert_in_write_order(harness: SourceHarness[Any], expected: list[Record]) -> None:
    """Within each split, committed records come in the order they were written."""
    order = {frozen(record): index for index, record in enumerate(expected)}
    for split_id, records in harness.records_by_split().items():
        indexes = [order.get(frozen(record), -1) for record in records]
        if indexes != sorted(indexes):
            raise AssertionError(f"split {split_id}: records out of write order: {records[:10]}")


def has_read(expected: list[Record]) -> Callable[[SourceHarness[Any]], bool]:
    """``until`` for a harness: every record in ``expected`` is committed."""
    wanted = Counter(map(frozen, expected))
    return lambda harness: not (wanted - Counter(map(frozen, harness.records())))


def applicable(hook: Callable[[], object]) -> None:
    """Calls an optional hook of the context; a case it does not apply to is skipped with
    the context's reason."""
    try:
        hook()
    except NotApplicable as reason:
        pytest.skip(str(reason))


def _acknowledged(context: ExternalContext) -> list[Record]:
    """What a connector that acknowledges upstream has acknowledged."""
    records = context.acknowledged()
    assert records is not None, "a connector that acknowledged before acknowledges still"
    return records


class SourceConformanceSuite:
    """The conformance cases; a subclass provides the ``external_context`` fixture."""

    #: Records per batch (``BuildContext.batch_size``); splits hold several batches.
    batch_size = 5
    records_per_split = 40
    #: How far the clock moves in a round: past a watched source's discovery interval.
    tick_s = 1.0
    #: How long a poll may wait for data (a stream's block); 0: never.
    poll_timeout_s = 0.0
    max_rounds = 2_000
    #: The ids of the records ``write`` makes, made on its first call.
    _ids: itertools.count[int]

    @pytest.fixture()
    def external_context(self) -> ExternalContext:
        raise NotImplementedError("a SourceConformanceSuite subclass provides the external_context fixture")

    # What the cases are made of.

    def write_splits(self, context: ExternalContext, splits: int, records: int | None = None) -> list[Record]:
        context.splits_wanted(splits)
        written: list[Record] = []
        for index in range(splits):
            written += self.write(context, index, records or self.records_per_split)
        return written

    def write(self, context: ExternalContext, split_index: int, count: int) -> list[Record]:
        if not hasattr(self, "_ids"):
            self._ids = itertools.count()
        records = [
            {"id": n, "split": split_index, "text": f"r{n}"} for n in itertools.islice(self._ids, count)
        ]
        return context.write(split_index, records)

    def harness(self, context: ExternalContext, *, readers: int, **options: Any) -> SourceHarness[Any]:
        clock = ManualClock()
        source = context.source(SourceOptions(batch_size=self.batch_size, clock=clock))
        return SourceHarness(
            source,
            readers=readers,
            clock=clock,
            tick_s=self.tick_s,
            poll_timeout_s=self.poll_timeout_s,
            max_rounds=self.max_rounds,
            **options,
        )

    def run_to_end(self, harness: SourceHarness[Any], context: ExternalContext) -> None:
        """A bounded run to its end; an unbounded one until all written is read, and a
        few rounds more."""
        if harness.bounded:
            harness.run()
            assert harness.exhausted, "a bounded source's enumerator ends exhausted"
        else:
            harness.run(until=has_read(context.expected()))
            harness.run(rounds=QUIET_ROUNDS)

    def assert_counted(self, harness: SourceHarness[Any]) -> None:
        """Each split's counts in the store are those of the batches its commits landed."""
        landed: dict[str, list[Record]] = harness.records_by_split()
        for split_id, stored in harness.store.state.splits.items():
            records = len(landed.get(split_id, []))
            assert stored.records_read == records, (
                f"split {split_id}: {stored.records_read} records counted, {records} committed"
            )
            nbytes = sum(
                harness.landing.tables[c.landed_path].nbytes
                for _, c in harness.store.state.committed
                if c.split_id == split_id and c.landed_path
            )
            assert stored.bytes_read == nbytes and (nbytes > 0) == (records > 0), (
                f"split {split_id}: {stored.bytes_read} bytes counted, {nbytes} landed"
            )

    def assert_exactly_once(self, harness: SourceHarness[Any], context: ExternalContext) -> None:
        refused = harness.store.state.refused
        assert not refused, (
            f"the enumerator assigned splits that were out with a reader or finished: {refused[:5]} "
            "(the store refuses them; the runtime logs an error)"
        )
        expected = context.expected()
        assert_same_records(harness.records(), expected)
        if context.ordered_within_split:
            assert_in_write_order(harness, expected)

    # The cases.

    def test_single_split_is_read_whole_in_order(self, external_context: ExternalContext) -> None:
        self.write_splits(external_context, 1)
        harness = self.harness(external_context, readers=1)

        self.run_to_end(harness, external_context)

        self.assert_exactly_once(harness, external_context)
        if external_context.ordered_within_split:
            assert harness.records() == external_context.expected()

    def test_many_splits_are_read_exactly_once(self, external_context: ExternalContext) -> None:
        self.write_splits(external_context, 7, records=13)
        harness = self.harness(external_context, readers=3)

        self.run_to_end(harness, external_context)

        self.assert_exactly_once(harness, external_context)

    def test_idle_readers_do_not_hold_the_run(self, external_context: ExternalContext) -> None:
        self.write_splits(external_context, 2)
        harness = self.harness(external_context, readers=5)

        self.run_to_end(harness, external_context)

        self.assert_exactly_once(harness, external_context)
        if harness.bounded:
            idle = [s for s, slot in harness.readers.items() if slot.batches_read == 0]
            assert idle, "more readers than splits leaves some idle"
            assert set(harness.no_more_signals) >= set(idle), "an idle reader is told no more splits"
        else:
            assert harness.no_more_signals == [], "an unbounded source never says no more splits"

    def test_restore_mid_split_from_a_checkpoint(self, external_context: ExternalContext) -> None:
        self.write_splits(external_context, 1)
        harness = self.harness(external_context, readers=1)
        harness.read(0, batches=3)
        serializer = harness.serializer

        snapshot = harness.readers[0].reader.snapshot_state()
        assert snapshot, "a reader in the middle of a split holds it"
        for split in snapshot:
            assert split.offset.position == harness.checkpoint(split.split_id), (
                f"the reader's snapshot of {split.split_id} is where its last committed batch ended"
            )
        restored = [serializer.deserialize(json_round_trip(serializer.serialize(s))) for s in snapshot]
        harness.restore_reader(0, restored)
        self.run_to_end(harness, external_context)

        self.assert_exactly_once(harness, external_context)

    def test_splits_returned_after_a_failure_are_read_first(self, external_context: ExternalContext) -> None:
        self.write_splits(external_context, 4)
        harness = self.harness(external_context, readers=1)
        harness.read(0, batches=1)
        assigned_before = {a.split_id for a in harness.assignments}
        harness.kill_reader(0)
        harness.add_reader(1)
        start = len(harness.assignments)

        self.run_to_end(harness, external_context)

        returned = {split_id: position for _, split_id, position in harness.returned}
        assert returned, "the killed reader's splits come back"
        after = harness.assignments[start:]
        again = [i for i, a in enumerate(after) if a.split_id in returned]
        fresh = [i for i, a in enumerate(after) if a.split_id not in assigned_before]
        assert {after[i].split_id for i in again} == set(returned), "every returned split is assigned again"
        assert max(again) < min(fresh, default=len(after)), (
            f"returned splits {sorted(returned)} go out before new ones: {[a.split_id for a in after]}"
        )
        assert {after[i].split_id: after[i].position for i in again} == returned, "at their checkpoints"
        self.assert_exactly_once(harness, external_context)

    def test_a_split_survives_the_serializer_at_its_position(self, external_context: ExternalContext) -> None:
        self.write_splits(external_context, 3)
        harness = self.harness(external_context, readers=1)
        batch = harness.read(0, batches=1)[0]
        serializer = harness.serializer
        held = harness.readers[0].reader.snapshot_state()
        waiting = harness.waiting_splits()

        read_from = [s for s in held if s.split_id == batch.split_id]
        assert read_from and read_from[0].offset.position == batch.end
        for split in held + waiting + [read_from[0].at(batch.start)]:
            data = json_round_trip(serializer.serialize(split))
            back = serializer.deserialize(data)
            assert (back.split_id, back.offset) == (split.split_id, split.offset), (
                f"{split} came back as {back}"
            )
            assert json_round_trip(serializer.serialize(back)) == data
            assert back.at(batch.end).offset.position == batch.end

    def test_acknowledges_only_what_a_commit_made_durable(self, external_context: ExternalContext) -> None:
        if external_context.acknowledged() is None:
            pytest.skip("the connector acknowledges nothing upstream")
        self.write_splits(external_context, 2)
        harness = self.harness(external_context, readers=1)

        harness.read(0, batches=3, commit=False)
        assert external_context.acknowledged() == [], "nothing is acknowledged before a commit"
        harness.commit(0)
        assert harness.records(), "the commit made records durable"
        assert_same_records(_acknowledged(external_context), harness.records(), "acknowledged after a commit")
        harness.read(0, batches=2, commit=False)
        assert_same_records(
            _acknowledged(external_context), harness.records(), "acknowledged between commits"
        )
        self.run_to_end(harness, external_context)

        assert_same_records(
            _acknowledged(external_context), external_context.expected(), "acknowledged at the end"
        )
        self.assert_exactly_once(harness, external_context)

    def test_readers_added_and_removed_mid_run_read_every_record_once(
        self, external_context: ExternalContext
    ) -> None:
        self.write_splits(external_context, 8)
        harness = self.harness(external_context, readers=2)

        harness.run(rounds=4)
        harness.add_reader()
        harness.add_reader()
        harness.run(rounds=4)
        harness.remove_reader(0)
        harness.kill_reader(2)
        harness.run(rounds=4)
        harness.add_reader()
        self.run_to_end(harness, external_context)

        self.assert_exactly_once(harness, external_context)

    def test_a_killed_readers_uncommitted_batches_are_read_again_once(
        self, external_context: ExternalContext
    ) -> None:
        self.write_splits(external_context, 2)
        harness = self.harness(external_context, readers=2)
        harness.read(0, batches=2)
        killed = harness.readers[0].token
        lost = harness.read(0, batches=2, commit=False)

        harness.kill_reader(0)
        self.run_to_end(harness, external_context)

        lost_records = [r for batch in lost for r in batch.records]
        assert lost_records, "the killed reader had read records it did not commit"
        committed_by = {frozen(r): batch.token for batch in harness.landed for r in batch.records}
        assert all(committed_by[frozen(r)] != killed for r in lost_records), (
            "what the killed reader did not commit is committed by another reader"
        )
        self.assert_exactly_once(harness, external_context)

    def test_records_written_while_reading_are_read(self, external_context: ExternalContext) -> None:
        if not external_context.writes_while_running:
            pytest.skip("the source reads what was there when it was built")
        self.write_splits(external_context, 2)
        harness = self.harness(external_context, readers=2)
        harness.run(until=has_read(external_context.expected()))

        self.write(external_context, 0, 7)
        self.write(external_context, 1, 9)
        self.run_to_end(harness, external_context)

        self.assert_exactly_once(harness, external_context)

    def test_a_reader_goes_on_in_its_next_slice(self, external_context: ExternalContext) -> None:
        self.write_splits(external_context, 3)
        harness = self.harness(external_context, readers=2, slice_s=3 * self.tick_s)

        self.run_to_end(harness, external_context)

        self.assert_exactly_once(harness, external_context)

    def test_commits_count_records_and_bytes_and_lag_is_reported(
        self, external_context: ExternalContext
    ) -> None:
        self.write_splits(external_context, 2)
        harness = self.harness(external_context, readers=1)
        harness.read(0, batches=3)

        self.assert_counted(harness)
        lags = harness.lags()
        assert all(lag is None or lag >= 0 for lag in lags.values()), f"a lag is never negative: {lags}"
        if len(lags) == 2 and None not in lags.values():  # the source reports the lag of every split
            behind = len(external_context.expected()) - len(harness.records())
            assert sum(v or 0 for v in lags.values()) == behind, (
                f"lags {lags}, {behind} records not committed"
            )
        self.run_to_end(harness, external_context)

        self.assert_counted(harness)
        assert all(not lag for lag in harness.lags().values()), f"nothing waits at the end: {harness.lags()}"
        self.assert_exactly_once(harness, external_context)

    def test_a_bad_record_is_dead_lettered_with_its_position_in_the_sources_words(
        self, external_context: ExternalContext
    ) -> None:
        self.write_splits(external_context, 2, records=12)
        applicable(lambda: external_context.write_bad_record(1))
        harness = self.harness(external_context, readers=2, skip_errors=True)

        if harness.bounded:
            harness.run()
        else:
            harness.run(
                until=lambda h: bool(h.store.state.dead_letters) and has_read(external_context.expected())(h)
            )

        letters = harness.store.state.dead_letters
        assert len(letters) == 1, f"one dead letter: {letters}"
        bad = letters[0].record
        assert bad.offset == harness.source.format_position(bad.position) != "", (
            f"the dead letter's offset {bad.offset!r} is its position {bad.position} in the source's words"
        )
        assert harness.source.parse_position(bad.offset) == bad.position
        assert bad.reason, "the dead letter says why the record was refused"
        self.assert_exactly_once(harness, external_context)

    def test_a_bad_record_fails_its_split_and_stops_the_run_without_skip_errors(
        self, external_context: ExternalContext
    ) -> None:
        self.write_splits(external_context, 1, records=12)
        applicable(lambda: external_context.write_bad_record(0))
        harness = self.harness(external_context, readers=2)

        harness.run(until=lambda h: all(slot.done for slot in h.readers.values()))

        failed = {i: s.failed for i, s in harness.store.state.splits.items() if s.failed}
        assert len(failed) == 1, f"the split of the bad record fails: {failed}"
        assert harness.coordinator.stopped, "a failed split stops the run"
        assert SliceOutcome.STOPPED in {slot.outcome for slot in harness.readers.values()}
        assert harness.store.state.dead_letters == []

    def test_the_external_system_going_away_and_coming_back_loses_nothing(
        self, external_context: ExternalContext
    ) -> None:
        self.write_splits(external_context, 2)
        harness = self.harness(external_context, readers=2)
        harness.run(rounds=4)

        applicable(external_context.stop_system)
        harness.run(rounds=4)
        external_context.start_system()
        if external_context.writes_while_running:
            self.write(external_context, 0, 6)
        self.run_to_end(harness, external_context)

        self.assert_exactly_once(harness, external_context)
        if external_context.acknowledged() is not None:
            assert_same_records(_acknowledged(external_context), external_context.expected(), "acknowledged")

    def test_a_split_that_grows_while_read_is_read_to_its_new_end(
        self, external_context: ExternalContext
    ) -> None:
        self.write_splits(external_context, 1)
        harness = self.harness(external_context, readers=1)
        harness.read(0, batches=2)

        more = [{"id": -n, "split": 0, "text": f"grown{n}"} for n in range(1, 15)]
        applicable(lambda: external_context.append(0, more[:7]))  # in the middle of reading
        harness.run(until=has_read(external_context.expected()))
        external_context.append(0, more[7:])  # once all of it was read
        self.run_to_end(harness, external_context)

        self.assert_exactly_once(harness, external_context)
