"""Entry ids as positions, and the split's serialized form."""

from __future__ import annotations

import pytest

from connectors.redis_streams.split import (
    EntryIdOutOfRange,
    StreamSplit,
    StreamSplitSerializer,
    decode_position,
    encode_id,
)
from source_support.errors import SplitFailed


def test_positions_grow_with_entry_ids():
    ids = ["0-1", "1-0", "1-1", "1700000000000-0", "1700000000000-1048575", "1700000000001-0"]

    positions = [encode_id(i) for i in ids]

    assert positions == sorted(positions)
    assert [decode_position(p) for p in positions] == ids


def test_an_id_is_ms_times_two_to_the_twenty_plus_seq():
    assert encode_id(b"1700000000000-3") == 1700000000000 * 2**20 + 3


def test_a_bare_millisecond_is_its_first_or_last_entry():
    assert encode_id("5") == encode_id("5-0")
    assert encode_id("5", last_seq=True) == encode_id("5-1048575")


def test_a_sequence_of_two_to_the_twenty_is_out_of_range():
    with pytest.raises(EntryIdOutOfRange):
        encode_id("5-1048576")


def test_a_split_fails_on_an_id_it_cannot_hold_naming_the_stream():
    split = StreamSplit("orders:1", 0)

    with pytest.raises(SplitFailed) as caught:
        split.entry_position(b"5-2000000")

    assert caught.value.split_id == "orders:1"
    assert "orders:1" in str(caught.value) and "5-2000000" in str(caught.value)


def test_the_serializer_round_trips_a_split_at_its_position():
    serializer = StreamSplitSerializer()
    for split in (
        StreamSplit("orders:ü 1", 0),
        StreamSplit("k", encode_id("9-9"), stop_position=encode_id("10-0")),
    ):
        data = serializer.serialize(split.at(split.position + 7))

        assert serializer.deserialize(data) == split.at(split.position + 7)


def test_the_split_id_is_the_stream_key():
    split = StreamSplit("orders:1", 42)

    assert split.split_id == "orders:1"
    assert split.offset.key == "orders:1" and split.offset.position == 42
    assert not split.stopped
    assert StreamSplit("k", 10, stop_position=10).stopped
