"""The reader loop of ``source_support.runtime`` over a stream written an entry at a time:
what it lands (``ReaderSettings.linger_s``), stepped under a manual clock by the kit's
harness (no timing here: the clock moves only when a round says so)."""

from __future__ import annotations

from source_support.testing import SourceHarness, SourceOptions
from source_support.testing.memory import ManualClock
from tests.source_support.memory_stream import MemoryStreamContext

#: Each round moves the clock this far: ten rounds a second.
TICK_S = 0.1


def trickle(*, linger_s: float, batch_size: int = 1000, slice_s: float = 600.0, rounds: int = 40):
    """Two streams, each written one entry per round while one reader steps once a round;
    returns the harness and what was written to each stream."""
    context = MemoryStreamContext()
    context.splits_wanted(2)
    clock = ManualClock()
    harness = SourceHarness(
        context.source(SourceOptions(batch_size=batch_size, clock=clock)),
        clock=clock,
        tick_s=TICK_S,
        slice_s=slice_s,
        linger_s=linger_s,
        max_batch_records=batch_size,
    )
    written: dict[str, list[dict]] = {"s0": [], "s1": []}
    for n in range(rounds):
        for index, name in enumerate(written):
            written[name] += context.write(index, [{"id": 2 * n + index}])
        harness.round()
    return harness, written


def settle(harness: SourceHarness, rounds: int = 30) -> None:
    """Rounds with nothing written, then a commit: what lingers is landed and committed."""
    harness.run(rounds=rounds)
    harness.commit(0)


def test_a_stream_read_an_entry_at_a_time_lands_a_file_per_linger_not_per_entry():
    """40 entries per stream over 4 s of the clock, lingering 1 s: each stream's entries
    land in a handful of files (without the linger: one per fetch, 13 or more), every
    entry once."""
    harness, written = trickle(linger_s=1.0)
    settle(harness)
    assert harness.records_by_split() == written
    for name in written:
        files = [b for b in harness.landed if b.split_id == name and b.records]
        assert len(files) <= 6, f"{name}: {[len(b.records) for b in files]}"


def test_lingering_batches_are_merged_up_to_the_batch_size_and_no_further():
    harness, written = trickle(linger_s=60.0, batch_size=7)
    settle(harness)
    assert harness.records_by_split() == written
    for name in written:
        sizes = [len(b.records) for b in harness.landed if b.split_id == name and b.records]
        assert max(sizes) == 7, sizes
        assert sizes[:-1] == [7] * (len(sizes) - 1), sizes  # full files, the last one what was left


def test_a_slice_that_ends_lands_and_commits_what_lingers():
    """Slices of 1 s with a linger of a minute: each slice's end lands its streams' entries."""
    harness, written = trickle(linger_s=60.0, slice_s=1.0, rounds=35)
    committed = harness.records_by_split()
    for name in written:  # read up to the last slice's end, less what its successor holds
        assert committed[name] == written[name][: len(committed[name])]
        assert len(committed[name]) >= 30
    settle(harness)
    assert harness.records_by_split() == written


def test_a_reader_killed_while_batches_linger_loses_none_and_repeats_none():
    harness, written = trickle(linger_s=60.0, rounds=15)
    harness.commit(0)  # what lingers now lands and commits
    committed = {name: len(records) for name, records in harness.records_by_split().items()}
    more = {"s0": [], "s1": []}
    context = harness.source.streams
    for n in range(15, 25):  # read, lingering, never landed: the reader dies
        for index, name in enumerate(more):
            record = {"id": 2 * n + index}
            context.add(name, [record])
            more[name].append(record)
        harness.round()
    assert {name: len(r) for name, r in harness.records_by_split().items()} == committed
    harness.kill_reader(0)
    harness.add_reader(0)
    settle(harness)
    assert harness.records_by_split() == {name: written[name] + more[name] for name in written}


def test_a_reader_lands_what_lingers_once_the_transform_asks_for_input():
    """Lingering a minute, a reader lands and commits what it holds at its next step after
    the stream's transform asks (``want_input``, as an epoch ends), and only then."""
    harness, written = trickle(linger_s=60.0, rounds=10)
    assert harness.records_by_split() == {}
    harness.coordinator.want_input()
    harness.round()
    committed = harness.records_by_split()
    for name in written:  # all it had polled; the last entry or two may not be yet
        assert committed[name] == written[name][: len(committed[name])]
        assert len(committed[name]) >= len(written[name]) - 2


def test_a_reader_commits_once_the_bad_records_waiting_pass_max_errors():
    """Lingering a minute under ``skip_errors``, a reader holds its good and bad records
    until the linger ends, unless the bad ones waiting pass the run's ``max_errors``: then it
    commits at once (the store fails the split past the limit), so a wrong schema costs
    about ``max_errors`` dead letters, not one per record of a long linger."""
    context = MemoryStreamContext()
    context.splits_wanted(1)
    clock = ManualClock()
    harness = SourceHarness(
        context.source(SourceOptions(batch_size=1000, clock=clock)),
        clock=clock,
        tick_s=TICK_S,
        linger_s=60.0,
        skip_errors=True,
        max_errors=3,
    )
    good = []
    for n in range(3):
        good += context.write(0, [{"id": n}, {"bad": f"unparseable {n}"}])[:1]
        harness.round()
        harness.round()
    assert harness.records_by_split() == {}  # three bad records wait: not past the limit
    assert harness.store.state.dead_letters == []

    good += context.write(0, [{"id": 3}, {"bad": "unparseable 3"}])[:1]
    harness.round()

    assert harness.records_by_split() == {"s0": good}
    assert [d.record.reason for d in harness.store.state.dead_letters] == [
        f"unparseable {n}" for n in range(4)
    ]
