"""Loaded with ``-p tests.xdist_order`` (pyproject's addopts): under pytest-xdist with
``--dist loadfile``, the test files that take longest go to the workers first.

A worker takes a whole file at a time (its module-scoped brokers and Celery worker stay with
it), in the order the files are collected, once xdist's own reordering by test count is off.
When a file of end-to-end flows that takes minutes came last, the other workers sat idle
while one ran it; sent first, the heavy files run side by side and the many short files fill
the workers' time at the end (longest processing time first).

A file's weight is a rough cost from its tests' markers, not a measure: what matters is the
order of magnitude (an e2e flow ~20 s, a browser test ~10 s, a test marked slow ~6 s, any
other well under one).
"""

from __future__ import annotations

import pytest

from tests.worker_env import worker_number

#: Rough seconds a test costs by its marker (the first of these it carries), else ``OTHER``.
WEIGHTS = {"e2e": 20.0, "browser": 10.0, "slow": 6.0}
OTHER = 0.3


def test_weight(item: pytest.Item) -> float:
    for marker, weight in WEIGHTS.items():
        if item.get_closest_marker(marker) is not None:
            return weight
    return OTHER


def heaviest_files_first(items: list[pytest.Item]) -> list[pytest.Item]:
    """``items`` with their files in order of weight, heaviest first; a file's tests keep
    their order, and files of equal weight keep theirs."""
    weight: dict[str, float] = {}
    for item in items:
        weight[_file(item)] = weight.get(_file(item), 0.0) + test_weight(item)
    return sorted(items, key=lambda item: -weight[_file(item)])


def _file(item: pytest.Item) -> str:
    return item.nodeid.split("::")[0]


def pytest_configure(config: pytest.Config) -> None:
    # xdist orders loadfile's files by test count unless told not to: keep the order below.
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


@pytest.hookimpl(trylast=True)  # after tests/conftest.py has marked the e2e and browser tests
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if worker_number() is not None:  # without xdist, the order a reader expects
        items[:] = heaviest_files_first(items)
