"""A stream of the topic: the unit of work of the redis_streams source.

Positions are entry ids as integers that only grow: ``ms-seq`` is ``ms * 2**20 + seq``.
A position is the last entry id read (reading goes on with the entries after it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from source_support.api import OffsetEntry, SplitSerializer
from source_support.errors import SplitFailed
from source_support.streams.split import PositionedSplit, generation_split_id

SEQ_BITS = 20
SEQ_LIMIT = 1 << SEQ_BITS
MAX_SEQ = SEQ_LIMIT - 1
#: Positions are stored as 64-bit integers.
MAX_POSITION = 2**63 - 1
ENTRY_ID_RE = re.compile(r"(\d+)(?:-(\d+))?")


class EntryIdOutOfRange(ValueError):
    """An entry id that a position cannot hold (a sequence of 2**20 or more)."""


def encode_id(entry_id: bytes | str, *, last_seq: bool = False) -> int:
    """The position of an entry id (``ms-seq``; a bare ``ms`` means its first entry, or
    its last with ``last_seq``)."""
    text = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
    match = ENTRY_ID_RE.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"{text!r} is not an entry id such as 1700000000000-0")
    ms = int(match.group(1))
    seq = int(match.group(2)) if match.group(2) is not None else (MAX_SEQ if last_seq else 0)
    if seq > MAX_SEQ:
        raise EntryIdOutOfRange(f"entry id {text} has a sequence number of {SEQ_LIMIT} or more")
    position = ms * SEQ_LIMIT + seq
    if position > MAX_POSITION:
        raise EntryIdOutOfRange(f"entry id {text} is beyond the largest millisecond time a position holds")
    return position


def decode_position(position: int) -> str:
    """The entry id of a position (``ms-seq``)."""
    return f"{position >> SEQ_BITS}-{position & MAX_SEQ}"


def position_ms(position: int) -> int:
    return position >> SEQ_BITS


def last_position_before_ms(ms: int) -> int:
    """The position just before the first entry of millisecond ``ms``."""
    return max(0, ms * SEQ_LIMIT - 1)


def last_position_of_ms(ms: int) -> int:
    """The position of the last possible entry of millisecond ``ms``."""
    return ms * SEQ_LIMIT + MAX_SEQ


@dataclass(frozen=True)
class StreamSplit(PositionedSplit):
    """The entries of stream ``key`` after ``position``, up to ``stop_position`` if set.

    ``generation`` counts the streams that held ``key`` while the run read it: a stream
    deleted and created again, or lost with its server (restarted empty), is a new
    generation, read from its start as a split of its own (positions start over, so its
    landed files and checkpoint must not mix with the old one's). ``start`` is where the
    split began (a checkpoint past it means this source read the stream, and so made
    its consumer group).
    """

    key: str
    position: int
    stop_position: int | None = None
    generation: int = 0
    start: int | None = None

    def __post_init__(self) -> None:
        if self.start is None:
            object.__setattr__(self, "start", self.position)

    @property
    def split_id(self) -> str:
        return generation_split_id(self.key, self.generation)

    @property
    def progressed(self) -> bool:
        """Whether the split was read past its start (its consumer group was made then)."""
        return self.position > (self.start or 0)

    @property
    def offset(self) -> OffsetEntry:
        """Kept under the stream's key, whatever its generation (the split id names that)."""
        return OffsetEntry(key=self.key, position=self.position)

    @property
    def stopped(self) -> bool:
        """Whether the split has read everything up to its stop."""
        return self.stop_position is not None and self.position >= self.stop_position

    def entry_position(self, entry_id: bytes) -> int:
        """The position of an entry read from this stream; fails the split if it has none."""
        try:
            return encode_id(entry_id)
        except EntryIdOutOfRange as exc:
            raise SplitFailed(
                f"stream {self.key}: {exc}; this source reads ids up to sequence {MAX_SEQ}",
                split_id=self.key,
            ) from None


class StreamSplitSerializer(SplitSerializer[StreamSplit]):
    """A split as stored: its key, start position and stop, and its generation when it is
    not the first (payloads stored before generations existed read as the first). The
    stored position is the split's start: the checkpoint is kept beside it."""

    def serialize(self, split: StreamSplit) -> dict[str, Any]:
        data: dict[str, Any] = {
            "key": split.key,
            "position": split.position,
            "stop_position": split.stop_position,
        }
        if split.start != split.position:
            data["start"] = split.start
        if split.generation:
            data["generation"] = split.generation
        return data

    def deserialize(self, data: dict[str, Any]) -> StreamSplit:
        return StreamSplit(
            data["key"],
            data["position"],
            data.get("stop_position"),
            generation=data.get("generation", 0),
            start=data.get("start", data["position"]),
        )
