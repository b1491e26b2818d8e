"""Records carried one per message body (``LineMessages``): a batch of good bodies is parsed
as one block; a batch with a bad, missing, empty or multi-line body names each bad one by
its index and keeps the others, in order."""

from __future__ import annotations

import json

from source_support.formats import validate_format
from source_support.formats.messages import message_decoder


def decoder(fmt: dict):
    return message_decoder(validate_format(fmt).build(), what="the body")


JSON = {"type": "json", "schema": "id BIGINT, name STRING"}


def bodies(ids) -> list[bytes]:
    return [json.dumps({"id": i, "name": f"n{i}"}).encode() for i in ids]


def test_a_batch_of_good_bodies_is_every_record_in_order():
    table, bad = decoder(JSON).decode(bodies(range(1000)), first_only=False)

    assert bad == {}
    assert table.column("id").to_pylist() == list(range(1000))


def test_bad_missing_empty_and_blank_bodies_are_named_by_index_and_the_rest_kept():
    batch: list[bytes | None] = [*bodies([0]), b"{not json", None, b"", b"  ", *bodies([5])]
    batch.append(b'{"id": 6,\n "name": "n6"}')  # a line break in JSON is white space

    table, bad = decoder(JSON).decode(batch, first_only=False)

    assert table.column("id").to_pylist() == [0, 5, 6]
    assert sorted(bad) == [1, 2, 3, 4]
    assert bad[2] == "the body is missing"
    assert bad[3] == bad[4] == "the body is empty"
    assert bad[1].startswith("not valid JSON")


def test_with_first_only_the_first_bad_body_and_no_records():
    table, bad = decoder(JSON).decode([*bodies([0]), b"[1]", b"{bad"], first_only=True)

    assert table.num_rows == 0
    assert list(bad) == [1]


def test_a_blank_csv_body_is_empty_not_a_record():
    csv = decoder({"type": "csv", "schema": "name STRING"})

    table, bad = csv.decode([b"a", b" ", b"b", b"c\nd"], first_only=False)

    assert table.column("name").to_pylist() == ["a", "b"]
    assert bad[1] == "the body is empty"
    assert "line break" in bad[3]
