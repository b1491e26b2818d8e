"""A decoder of ``pgoutput``'s binary messages, protocol version 1 (PostgreSQL's "Logical
Replication Message Formats"), as ``pg_logical_slot_peek_binary_changes`` returns them.

Only what a change stream needs: Begin, Commit, Relation, Insert, Update, Delete and
Truncate (Origin and Type are decoded to ``Other`` and skipped). Integers are big-endian;
an LSN is an Int64; a timestamp counts microseconds since 2000-01-01 UTC; strings end with
a zero byte. A tuple's column is ``n`` (NULL), ``u`` (an unchanged TOASTed value: not
sent) or ``t`` (its text form, which ``UNCHANGED`` and None stand for the first two).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

#: The epoch of PostgreSQL's timestamps.
PG_EPOCH = datetime(2000, 1, 1, tzinfo=UTC)


class Unchanged:
    """A TOASTed column an Update did not change: its value is not in the message."""

    def __repr__(self) -> str:
        return "UNCHANGED"


UNCHANGED = Unchanged()
#: One column of a tuple: its text form, None (NULL) or ``UNCHANGED``.
Value = str | None | Unchanged


@dataclass(frozen=True)
class Begin:
    final_lsn: int  # the LSN of the transaction's commit record
    commit_time: datetime
    xid: int


@dataclass(frozen=True)
class Commit:
    commit_lsn: int
    end_lsn: int  # the end of the commit record: where the next transaction may start
    commit_time: datetime


@dataclass(frozen=True)
class Column:
    name: str
    type_oid: int
    type_modifier: int
    key: bool  # part of the replica identity


@dataclass(frozen=True)
class Relation:
    oid: int
    schema: str
    name: str
    replica_identity: str  # d default, n nothing, f full, i index
    columns: tuple[Column, ...]


@dataclass(frozen=True)
class Insert:
    relation: int
    new: tuple[Value, ...]


@dataclass(frozen=True)
class Update:
    relation: int
    new: tuple[Value, ...]
    #: The old key (``K``) or whole old row (``O``, REPLICA IDENTITY FULL); None when not sent.
    old: tuple[Value, ...] | None
    old_kind: str | None


@dataclass(frozen=True)
class Delete:
    relation: int
    old: tuple[Value, ...]
    old_kind: str


@dataclass(frozen=True)
class Truncate:
    relations: tuple[int, ...]
    options: int


@dataclass(frozen=True)
class Other:
    kind: str


Message = Begin | Commit | Relation | Insert | Update | Delete | Truncate | Other


class DecodeError(ValueError):
    """A message that is not pgoutput protocol 1."""


class _Buffer:
    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 0

    def take(self, size: int) -> bytes:
        if self.at + size > len(self.data):
            raise DecodeError(f"message ends after {len(self.data)} bytes, {self.at + size} needed")
        chunk = self.data[self.at : self.at + size]
        self.at += size
        return chunk

    def byte(self) -> str:
        return chr(self.take(1)[0])

    def int8(self) -> int:
        return self.take(1)[0]

    def int16(self) -> int:
        return struct.unpack(">h", self.take(2))[0]

    def int32(self) -> int:
        return struct.unpack(">i", self.take(4))[0]

    def uint32(self) -> int:
        return struct.unpack(">I", self.take(4))[0]

    def int64(self) -> int:
        return struct.unpack(">q", self.take(8))[0]

    def lsn(self) -> int:
        return struct.unpack(">Q", self.take(8))[0]

    def time(self) -> datetime:
        return PG_EPOCH + timedelta(microseconds=self.int64())

    def string(self) -> str:
        end = self.data.find(b"\0", self.at)
        if end < 0:
            raise DecodeError("a string is not terminated")
        text = self.data[self.at : end].decode()
        self.at = end + 1
        return text

    def tuple(self) -> tuple[Value, ...]:
        values: list[Value] = []
        for _ in range(self.int16()):
            kind = self.byte()
            if kind == "n":
                values.append(None)
            elif kind == "u":
                values.append(UNCHANGED)
            elif kind in "tb":
                values.append(self.take(self.int32()).decode())
            else:
                raise DecodeError(f"unknown tuple column kind {kind!r}")
        return tuple(values)


def decode(data: bytes) -> Message:
    """One pgoutput message."""
    buf = _Buffer(bytes(data))
    kind = buf.byte()
    if kind == "B":
        return Begin(buf.lsn(), buf.time(), buf.uint32())
    if kind == "C":
        buf.int8()  # flags, unused
        return Commit(buf.lsn(), buf.lsn(), buf.time())
    if kind == "R":
        oid, schema, name, identity = buf.uint32(), buf.string(), buf.string(), buf.byte()
        columns: list[Column] = []
        for _ in range(buf.int16()):
            flags = buf.int8()
            columns.append(Column(buf.string(), buf.uint32(), buf.int32(), bool(flags & 1)))
        return Relation(oid, schema, name, identity, tuple(columns))
    if kind == "I":
        oid = buf.uint32()
        if buf.byte() != "N":
            raise DecodeError("an Insert without its new tuple")
        return Insert(oid, buf.tuple())
    if kind == "U":
        oid = buf.uint32()
        marker = buf.byte()
        old: tuple[Value, ...] | None = None
        old_kind: str | None = None
        if marker in "KO":
            old, old_kind = buf.tuple(), marker
            marker = buf.byte()
        if marker != "N":
            raise DecodeError("an Update without its new tuple")
        return Update(oid, buf.tuple(), old, old_kind)
    if kind == "D":
        oid = buf.uint32()
        marker = buf.byte()
        if marker not in "KO":
            raise DecodeError("a Delete without its old key or row")
        return Delete(oid, buf.tuple(), marker)
    if kind == "T":
        count, options = buf.int32(), buf.int8()
        return Truncate(tuple(buf.uint32() for _ in range(count)), options)
    return Other(kind)


def format_lsn(lsn: int) -> str:
    """``lsn`` as PostgreSQL writes it (``0/153B768``)."""
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


def parse_lsn(text: str) -> int:
    high, _, low = text.partition("/")
    return (int(high, 16) << 32) | int(low, 16)
