"""The pgoutput decoder on real bytes: messages that a PostgreSQL 15 server's
``pg_logical_slot_peek_binary_changes(..., 'proto_version', '1', ...)`` returned for
``CREATE TABLE t (id int PRIMARY KEY, v text, n numeric(5,2), ts timestamptz, a int[])``,
an insert, an update and a delete (copied from a run; no server needed)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from connectors.postgres.pgoutput import (
    UNCHANGED,
    Begin,
    Column,
    Commit,
    DecodeError,
    Delete,
    Insert,
    Relation,
    Update,
    decode,
    format_lsn,
    parse_lsn,
)

BEGIN = b"B\x00\x00\x00\x00\x01S\xb8\x10\x00\x03\x04V\xfa}\xe0\xbe\x00\x00\x02\xd7"
RELATION = (
    b"R\x00\x00@\x00public\x00t\x00d\x00\x05\x01id\x00\x00\x00\x00\x17\xff\xff\xff\xff\x00v\x00\x00\x00\x00"
    b"\x19\xff\xff\xff\xff\x00n\x00\x00\x00\x06\xa4\x00\x05\x00\x06\x00ts\x00\x00\x00\x04\xa0\xff\xff\xff\xff"
    b"\x00a\x00\x00\x00\x03\xef\xff\xff\xff\xff"
)
INSERT = (
    b"I\x00\x00@\x00N\x00\x05t\x00\x00\x00\x012t\x00\x00\x00\x01bt\x00\x00\x00\x042.50t\x00\x00\x00\x1d"
    b"2026-11-28 15:55:46.383719+00t\x00\x00\x00\x03{3}"
)
UPDATE = (
    b"U\x00\x00@\x00N\x00\x05t\x00\x00\x00\x012t\x00\x00\x00\x02bbt\x00\x00\x00\x042.50t\x00\x00\x00\x1d"
    b"2026-11-28 15:55:46.383719+00t\x00\x00\x00\x03{3}"
)
COMMIT = b"C\x00\x00\x00\x00\x00\x01S\xb8\x10\x00\x00\x00\x00\x01S\xb8@\x00\x03\x04V\xfa}\xe0\xbe"
DELETE = b"D\x00\x00@\x00K\x00\x05t\x00\x00\x00\x011nnnn"


def test_begin_and_commit_carry_the_commit_lsn_and_time() -> None:
    begin, commit = decode(BEGIN), decode(COMMIT)
    assert isinstance(begin, Begin) and isinstance(commit, Commit)
    assert format_lsn(begin.final_lsn) == "0/153B810" == format_lsn(commit.commit_lsn)
    assert format_lsn(commit.end_lsn) == "0/153B840"
    assert begin.xid == 727
    assert begin.commit_time == commit.commit_time
    assert datetime(2026, 11, 28, tzinfo=UTC) < begin.commit_time < datetime(2026, 11, 29, tzinfo=UTC)


def test_relation_names_its_columns_types_and_key() -> None:
    relation = decode(RELATION)
    assert isinstance(relation, Relation)
    assert (relation.oid, relation.schema, relation.name, relation.replica_identity) == (
        16384,
        "public",
        "t",
        "d",
    )
    assert relation.columns[0] == Column("id", 23, -1, True)
    assert [c.name for c in relation.columns] == ["id", "v", "n", "ts", "a"]
    assert [c.type_oid for c in relation.columns] == [23, 25, 1700, 1184, 1007]
    assert relation.columns[2].type_modifier == (5 << 16 | 2) + 4  # numeric(5,2)
    assert not any(c.key for c in relation.columns[1:])


def test_insert_update_and_delete_tuples() -> None:
    insert, update, delete = decode(INSERT), decode(UPDATE), decode(DELETE)
    assert isinstance(insert, Insert) and isinstance(update, Update) and isinstance(delete, Delete)
    assert insert.new == ("2", "b", "2.50", "2026-11-28 15:55:46.383719+00", "{3}")
    assert update.new[1] == "bb" and update.old is None  # the key did not change: no old tuple
    assert (delete.old, delete.old_kind) == (("1", None, None, None, None), "K")


def test_an_unchanged_toasted_value_and_a_cut_message() -> None:
    unchanged = decode(b"U\x00\x00@\x00N\x00\x02t\x00\x00\x00\x011u")
    assert isinstance(unchanged, Update) and unchanged.new == ("1", UNCHANGED)
    with pytest.raises(DecodeError):
        decode(INSERT[:-3])


def test_lsn_text_round_trip() -> None:
    assert parse_lsn("16/B374D848") == (0x16 << 32) | 0xB374D848
    assert format_lsn(parse_lsn("16/B374D848")) == "16/B374D848"
