"""The conformance kit itself: it passes a sound stream connector, and each of its cases
fails for a connector broken the way that case guards against."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest

from connectors.sequence.enumerator import NumberSequenceEnumerator
from connectors.sequence.source import NumberSequenceSource
from source_support.testing import ContractViolation, SourceHarness, SourceOptions
from source_support.testing.suite import SourceConformanceSuite, assert_same_records, has_read
from tests.connectors.sequence.test_conformance import SequenceContext
from tests.source_support.memory_stream import (
    MemoryStreamContext,
    MemoryStreamSource,
    StreamEnumerator,
    StreamSplit,
    StreamSplitReader,
    StreamSplitSerializer,
)


class TestMemoryStreamConformance(SourceConformanceSuite):
    @pytest.fixture()
    def external_context(self):
        return MemoryStreamContext()


# Connectors broken on purpose, each the way one case guards against.


class AcksOnFetch(StreamSplitReader):
    def fetch(self, max_records, timeout_s):
        batches = super().fetch(max_records, timeout_s)
        for batch in batches:
            self.streams.ack(batch.split_id, batch.end.position)
        return batches


class AcksWholeStreams(StreamSplitReader):
    def notify_checkpoint_complete(self, positions):
        for name in positions:
            self.streams.ack(name, len(self.streams.entries[name]))


class ForgetsPosition(StreamSplitSerializer):
    def deserialize(self, data):
        return StreamSplit(data["name"])


class AtKeepsItsPosition(StreamSplit):
    def at(self, position):
        return self


class ForgetsPositionAcrossSlices(StreamSplitSerializer):
    def deserialize(self, data):
        return AtKeepsItsPosition(data["name"])


class LagFromTheStart(MemoryStreamSource):
    def split_lags(self, splits):
        return {name: len(self.streams.entries[name]) for name in splits}


class LosesReturnedSplits(StreamEnumerator):
    def add_splits_back(self, splits, subtask):
        """Forgets them."""


class FindsEveryStreamAgain(StreamEnumerator):
    def start(self):
        self.known = []
        super().start()


class ReversesBatches(StreamSplitReader):
    def fetch(self, max_records, timeout_s):
        return [
            replace(batch, records=batch.records.take(list(reversed(range(batch.records.num_rows)))))
            for batch in super().fetch(max_records, timeout_s)
        ]


class SkipsLastRecordOfABatch(StreamSplitReader):
    def fetch(self, max_records, timeout_s):
        return [
            replace(batch, records=batch.records.slice(0, batch.records.num_rows - 1))
            for batch in super().fetch(max_records, timeout_s)
        ]


class StopsAtTheEndOfAStream(StreamSplitReader):
    def fetch(self, max_records, timeout_s):
        batches = super().fetch(max_records, timeout_s)
        for name, position in list(self.held.items()):
            if position >= len(self.streams.entries[name]):
                del self.held[name]
        return batches


def stream_context(**broken: type) -> Callable[[], MemoryStreamContext]:
    """A factory of contexts whose source has the broken parts given."""
    name = "".join(part.__name__ for part in broken.values())
    source_class = type(f"Source{name}", (MemoryStreamSource,), broken)

    def context() -> MemoryStreamContext:
        return MemoryStreamContext(source_class)

    context.__name__ = f"Stream{name}"
    return context


class NeverSaysNoMore(NumberSequenceEnumerator):
    def handle_split_request(self, subtask, requester_location=""):
        if not self.is_exhausted():
            super().handle_split_request(subtask, requester_location)


class ServesReturnedSplitsLast(NumberSequenceEnumerator):
    def handle_split_request(self, subtask, requester_location=""):
        returned, self.returned = (
            (self.returned, []) if self.next_index < self.splits else ([], self.returned)
        )
        super().handle_split_request(subtask, requester_location)
        self.returned += returned


def sequence_context(enumerator_class: type[NumberSequenceEnumerator]) -> type[SequenceContext]:
    class BrokenSequenceContext(SequenceContext):
        def source(self, options: SourceOptions) -> NumberSequenceSource:
            source = super().source(options)

            def enumerator(context, state=None):
                return enumerator_class(context, count=source.count, splits=source.splits, state=state)

            source.create_enumerator, source.restore_enumerator = enumerator, enumerator
            return source

    BrokenSequenceContext.__name__ = f"Sequence{enumerator_class.__name__}"
    return BrokenSequenceContext


BREAKAGES = [
    ("test_single_split_is_read_whole_in_order", stream_context(reader_class=ReversesBatches)),
    ("test_many_splits_are_read_exactly_once", stream_context(reader_class=SkipsLastRecordOfABatch)),
    ("test_idle_readers_do_not_hold_the_run", sequence_context(NeverSaysNoMore)),
    ("test_many_splits_are_read_exactly_once", stream_context(enumerator_class=FindsEveryStreamAgain)),
    ("test_restore_mid_split_from_a_checkpoint", stream_context(serializer_class=ForgetsPosition)),
    (
        "test_splits_returned_after_a_failure_are_read_first",
        sequence_context(ServesReturnedSplitsLast),
    ),
    (
        "test_a_split_survives_the_serializer_at_its_position",
        stream_context(serializer_class=ForgetsPosition),
    ),
    ("test_acknowledges_only_what_a_commit_made_durable", stream_context(reader_class=AcksOnFetch)),
    ("test_acknowledges_only_what_a_commit_made_durable", stream_context(reader_class=AcksWholeStreams)),
    (
        "test_readers_added_and_removed_mid_run_read_every_record_once",
        stream_context(enumerator_class=LosesReturnedSplits),
    ),
    (
        "test_a_killed_readers_uncommitted_batches_are_read_again_once",
        stream_context(enumerator_class=LosesReturnedSplits),
    ),
    ("test_records_written_while_reading_are_read", stream_context(reader_class=StopsAtTheEndOfAStream)),
    ("test_a_reader_goes_on_in_its_next_slice", stream_context(serializer_class=ForgetsPositionAcrossSlices)),
    (
        "test_commits_count_records_and_bytes_and_lag_is_reported",
        lambda: MemoryStreamContext(LagFromTheStart),
    ),
    (
        "test_the_external_system_going_away_and_coming_back_loses_nothing",
        stream_context(enumerator_class=LosesReturnedSplits),
    ),
    (
        "test_a_split_that_grows_while_read_is_read_to_its_new_end",
        stream_context(reader_class=StopsAtTheEndOfAStream),
    ),
]


@pytest.mark.parametrize(
    ("case", "broken_context"), BREAKAGES, ids=[f"{case}-{i}" for i, (case, _) in enumerate(BREAKAGES)]
)
def test_each_case_fails_for_the_breakage_it_guards_against(case, broken_context):
    suite = SourceConformanceSuite()
    suite.max_rounds = 300

    with pytest.raises(AssertionError):
        getattr(suite, case)(broken_context())


def test_a_batch_that_does_not_start_at_the_checkpoint_is_a_contract_violation():
    context = stream_context(serializer_class=ForgetsPosition)()
    context.splits_wanted(1)
    context.write(0, [{"id": n} for n in range(20)])
    harness = SourceHarness(context.source(SourceOptions(batch_size=5, clock=lambda: 0.0)), readers=1)
    harness.read(0, batches=2)

    serializer = harness.serializer
    snapshot = [
        serializer.deserialize(serializer.serialize(s)) for s in harness.readers[0].reader.snapshot_state()
    ]
    harness.restore_reader(0, snapshot)  # the serializer lost the position
    with pytest.raises(ContractViolation, match="starts at 0, but the split was at 10"):
        harness.read(0, batches=1)


def test_a_revoked_split_moves_at_its_checkpoint_and_its_old_reader_commits_none_of_it():
    context = MemoryStreamContext()
    context.splits_wanted(2)
    context.write(0, [{"id": n} for n in range(20)])
    context.write(1, [{"id": n} for n in range(20, 40)])
    harness = SourceHarness(context.source(SourceOptions(batch_size=5, clock=lambda: 0.0)), readers=1)
    harness.read(0, batches=2)  # reader 0 holds both streams
    checkpoints = {split_id: harness.checkpoint(split_id) for split_id in ("s0", "s1")}
    harness.read(0, batches=2, commit=False)

    harness.add_reader(1)  # the enumerator moves one stream to it
    harness.run(until=has_read(context.expected()))

    moved = [a for a in harness.assignments if a.subtask == 1]
    assert len(moved) == 1 and moved[0].position == checkpoints[moved[0].split_id]
    assert_same_records(harness.records(), context.expected())
