"""The heaviest test files go to the pytest-xdist workers first (tests/xdist_order.py)."""

from __future__ import annotations

from tests.xdist_order import heaviest_files_first


class Item:
    """What the ordering reads of a pytest item: its node id and its markers."""

    def __init__(self, nodeid: str, *markers: str) -> None:
        self.nodeid, self.markers = nodeid, set(markers)

    def get_closest_marker(self, name: str):
        return name if name in self.markers else None


def test_files_go_heaviest_first_and_keep_their_tests_order():
    items = [
        Item("tests/test_a.py::test_1"),
        Item("tests/test_a.py::test_2"),
        Item("tests/dataflow/test_b.py::test_1", "slow"),
        Item("tests/e2e/test_c.py::test_1", "e2e"),
        Item("tests/test_a.py::test_3"),
        Item("tests/e2e/test_d.py::test_1", "e2e"),
        Item("tests/e2e/test_d.py::test_2", "e2e"),
    ]

    ordered = [item.nodeid for item in heaviest_files_first(items)]  # type: ignore[arg-type]

    assert ordered == [
        "tests/e2e/test_d.py::test_1",
        "tests/e2e/test_d.py::test_2",
        "tests/e2e/test_c.py::test_1",
        "tests/dataflow/test_b.py::test_1",
        "tests/test_a.py::test_1",
        "tests/test_a.py::test_2",
        "tests/test_a.py::test_3",
    ]
