"""The balanced, sticky assignment policy of unbounded splits."""

from __future__ import annotations

from collections import Counter

from source_support.assignment import balance


def apply(owners: dict[str, int | None], readers: list[int]) -> dict[str, int]:
    moves = balance(owners, readers)
    return {**owners, **moves}


def loads(owners: dict[str, int], readers: list[int]) -> list[int]:
    count = Counter(owners.values())
    return sorted(count[r] for r in readers)


def test_unowned_splits_are_spread_evenly_over_the_readers():
    owners = {f"s{i}": None for i in range(7)}

    result = apply(owners, [0, 1, 2])

    assert set(result.values()) <= {0, 1, 2}
    assert loads(result, [0, 1, 2]) == [2, 2, 3]


def test_a_balanced_assignment_moves_nothing():
    owners = {"a": 0, "b": 1, "c": 0, "d": 1}

    assert balance(owners, [0, 1]) == {}


def test_no_readers_no_moves():
    assert balance({"a": None, "b": 3}, []) == {}


def test_a_new_reader_takes_only_its_share_from_the_others():
    owners = {f"s{i}": i % 2 for i in range(6)}

    moves = balance(owners, [0, 1, 2])

    assert len(moves) == 2  # the least that gives reader 2 its share
    assert set(moves.values()) == {2}
    assert loads(apply(owners, [0, 1, 2]), [0, 1, 2]) == [2, 2, 2]


def test_the_splits_of_a_gone_reader_go_to_the_others_and_nothing_else_moves():
    owners = {f"s{i}": i % 3 for i in range(9)}

    moves = balance(owners, [0, 1])

    assert set(moves) == {f"s{i}" for i in range(9) if i % 3 == 2}
    assert loads(apply(owners, [0, 1]), [0, 1]) == [4, 5]


def test_new_splits_go_to_the_least_loaded_readers():
    owners = {"a": 0, "b": 0, "c": 1, "new": None}

    moves = balance(owners, [0, 1])

    assert moves == {"new": 1}


def test_an_overloaded_reader_sheds_only_its_excess():
    owners = {f"s{i}": 0 for i in range(5)} | {"t": 1}

    moves = balance(owners, [0, 1])

    assert len(moves) == 2
    assert set(moves.values()) == {1}


def test_the_moves_are_deterministic():
    owners = {f"s{i}": (i * 7) % 4 if i % 5 else None for i in range(40)}

    assert balance(owners, [3, 1, 2]) == balance(dict(reversed(owners.items())), [1, 2, 3])


def test_loads_differ_by_at_most_one_whatever_the_start():
    owners = {f"s{i}": (i * i) % 5 for i in range(23)}

    result = apply(owners, [0, 2, 4, 6])

    counts = loads(result, [0, 2, 4, 6])
    assert max(counts) - min(counts) <= 1
    assert set(result.values()) <= {0, 2, 4, 6}
