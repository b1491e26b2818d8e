"""The share of the backlog an enumerator gives one request."""

from __future__ import annotations

import pytest

from source_support.api import MAX_SPLITS_PER_REQUEST, splits_per_request


@pytest.mark.parametrize(
    ("pending", "readers", "share"),
    [
        (1_000_000, 200, MAX_SPLITS_PER_REQUEST),
        (100_000, 200, 250),
        (4_000, 200, 10),
        (399, 200, 1),
        (1, 1, 1),
        (0, 4, 1),
        (20, 2, 5),
    ],
)
def test_a_request_gets_its_share_of_half_the_backlog(pending, readers, share):
    assert splits_per_request(pending, readers) == share


def test_no_reader_takes_more_than_half_a_fair_share_of_what_is_left():
    pending, readers = 50_000, 8
    while pending:
        share = splits_per_request(pending, readers)
        assert share == 1 or share <= pending / readers / 2
        pending -= share
