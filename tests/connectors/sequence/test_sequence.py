"""The sequence source: exact ranges, O(1) state, returned splits first."""

from __future__ import annotations

import pytest

from connectors.sequence.config import SequenceSourceConfig
from connectors.sequence.enumerator import NumberSequenceEnumerator
from connectors.sequence.source import NumberRangeReader
from source_support.api import MAX_SPLITS_PER_REQUEST
from source_support.errors import ConfigError
from tests.source_support.fakes import RecordingContext


def test_ranges_cover_every_number_once_and_then_no_more_splits():
    context = RecordingContext()
    enumerator = NumberSequenceEnumerator(context, count=1003, splits=7, state=None)

    for _ in range(8):
        enumerator.handle_split_request(0)

    ranges = [(s.start, s.end) for _, s in context.assigned]
    assert [n for start, end in ranges for n in range(start, end)] == list(range(1003))
    assert context.no_more == [0] and enumerator.is_exhausted()


def test_state_stays_small_and_returned_splits_come_first():
    context = RecordingContext()
    enumerator = NumberSequenceEnumerator(context, count=10**9, splits=100_000, state=None)
    enumerator.handle_split_request(0)
    first = context.assigned[0][1]
    enumerator.add_splits_back([first.at(first.start + 5)], 0)

    restored = NumberSequenceEnumerator(
        context, count=10**9, splits=100_000, state=enumerator.snapshot_state()
    )
    restored.handle_split_request(1)

    assert len(str(enumerator.snapshot_state())) < 200
    second = context.requests[1]
    assert second[0] == first.at(first.start + 5)
    assert restored.pending_count() == 100_000 - len(context.assigned) + 1


def test_a_large_backlog_goes_out_in_shares_and_every_split_exactly_once():
    context = RecordingContext(parallelism=4)
    enumerator = NumberSequenceEnumerator(context, count=100_000, splits=10_000, state=None)

    while not enumerator.is_exhausted():
        enumerator.handle_split_request(len(context.requests) % 4)

    sizes = [len(given) for given in context.requests]
    assert sizes[0] == MAX_SPLITS_PER_REQUEST and sizes[-1] == 1
    assert sizes == sorted(sizes, reverse=True)
    assert sorted(s.index for _, s in context.assigned) == list(range(10_000))


def test_reader_emits_the_range_from_the_position_in_batches():
    context = RecordingContext()
    NumberSequenceEnumerator(context, count=10, splits=1, state=None).handle_split_request(0)
    split = context.assigned[0][1].at(3)

    batch = NumberRangeReader().read_batch(split, 4)

    assert batch.records.column("value").to_pylist() == [3, 4, 5, 6]
    assert (batch.start.position, batch.end.position, batch.finished) == (3, 7, False)


@pytest.mark.parametrize(
    ("config", "field"),
    [({}, "source.count"), ({"count": 5, "splits": 6}, "source.splits"), ({"count": 5, "x": 1}, "source.x")],
)
def test_bad_sequence_config_names_the_field(config, field):
    with pytest.raises(ConfigError) as caught:
        SequenceSourceConfig.parse(config, None)
    assert caught.value.field == field
