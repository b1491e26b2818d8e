"""Avro object container files (OCF), read block by block from a byte range.

An OCF is a header (magic ``Obj\\x01``, metadata with the schema and codec, a 16-byte sync
marker) and then blocks, each a record count, a byte size, the (compressed) records and the
sync marker again. Blocks are the split points, as in Hadoop's and Spark's Avro readers: a
range ``[start, end)`` of the file owns the blocks that *start* in it, where a block starts
right after the header or right after a sync marker. A range that begins mid-file finds its
first block by searching for the sync marker, so ranges cut anywhere give each block to
exactly one reader.

A position is the byte offset where a block starts, so a reader that stops after any block
resumes at the next one. Memory holds one block at a time (plus one search window), however
large the file.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any, Protocol, cast

import fastavro

from source_support.formats.avro_types import AvroSchema
from source_support.formats.record import ReadError

MAGIC = b"Obj\x01"
SYNC_SIZE = 16
#: How much is read at once while searching for a sync marker.
SEARCH_CHUNK = 1 << 20
#: The longest header read when a sample is asked for its schema.
MAX_HEADER_BYTES = 64 << 20


class BlockFile(Protocol):
    """What is read of a container file: a plain or gunzipped binary file."""

    def read(self, size: int = -1, /) -> bytes: ...

    def seek(self, offset: int, /) -> int: ...

    def tell(self) -> int: ...

    def fileno(self) -> int: ...

    def close(self) -> None: ...


class CorruptBlock(ValueError):
    """A block that cannot be read (bad framing, codec data or records); the message says why."""


@dataclass(frozen=True)
class ContainerHeader:
    """What a container file's header says."""

    schema: AvroSchema
    codec: str
    sync: bytes
    #: Where the first block starts.
    end: int


def read_header(f: BlockFile) -> ContainerHeader:
    """The header at the start of ``f`` (left positioned after it); ValueError if it is not
    an Avro container file."""
    f.seek(0)
    if f.read(len(MAGIC)) != MAGIC:
        raise ValueError("not an Avro object container file (it does not start with Obj\\x01)")
    f.seek(0)
    try:
        reader = fastavro.block_reader(cast(IO[bytes], f))
    except Exception as exc:  # noqa: BLE001 - fastavro raises many kinds on a bad header
        raise ValueError(f"the Avro header cannot be read: {exc}") from None
    meta = cast(dict[str, str], reader.metadata)  # pyright: ignore[reportUnknownMemberType]
    # The sync marker is kept only in the header fastavro read.
    header = cast(dict[str, Any], getattr(reader, "_header"))  # noqa: B009
    return ContainerHeader(
        schema=json.loads(meta["avro.schema"]),
        codec=meta.get("avro.codec", "null"),
        sync=header["sync"],
        end=f.tell(),
    )


@dataclass
class Block:
    """The decoded records of one block and where it lies."""

    start: int
    end: int
    records: list[dict[str, Any]]


class ContainerBlocks:
    """Reads the blocks of a container file that start in ``[start, end)``, from
    ``position`` (a block start) on, one at a time."""

    def __init__(self, f: BlockFile, *, start: int, end: int, position: int) -> None:
        self.file = f
        self.header = read_header(f)
        self.end = end
        if position <= self.header.end:
            position = self.header.end
        elif position == start:
            position = self.next_block_start(start)
        #: Where the next block starts (or the end of the data).
        self.position = position
        self._blocks: Iterator[Any] | None = None
        self.at_eof = False

    @property
    def finished(self) -> bool:
        """Whether every block of the range has been read."""
        return self.position >= self.end or self.at_eof

    def next_block_start(self, offset: int) -> int:
        """The first block start at or after ``offset`` (the file's size if there is none):
        the byte after the first sync marker that ends at or after ``offset + 16``."""
        sync = self.header.sync
        at = max(offset - SYNC_SIZE, self.header.end)
        self.file.seek(at)
        carried = b""
        while True:
            chunk = self.file.read(SEARCH_CHUNK)
            if not chunk:
                return at + len(carried)
            data = carried + chunk
            found = data.find(sync)
            if found >= 0:
                return at + found + SYNC_SIZE
            keep = SYNC_SIZE - 1
            at += len(data) - keep
            carried = data[-keep:]

    def read(self) -> Block | None:
        """The block at ``position``, decoded; None at the end of the file; ``CorruptBlock``
        if it cannot be read (then ``skip`` moves past it)."""
        start = self.position
        try:
            if self._blocks is None:
                self.file.seek(0)
                reader = fastavro.block_reader(
                    cast(IO[bytes], self.file), return_record_name=True, return_record_name_override=True
                )
                self.file.seek(start)
                self._blocks = iter(reader)
            block = next(self._blocks)
            records: list[dict[str, Any]] = list(block)
        except StopIteration:
            self._blocks, self.at_eof = None, True
            return None
        except Exception as exc:  # noqa: BLE001 - a damaged block fails in codec, framing or decoding
            self._blocks = None
            if "codec is supported but" in str(exc):  # fastavro's word for a codec package not installed
                raise ReadError(f"the file's codec {self.header.codec} cannot be read here: {exc}") from None
            raise CorruptBlock(_reason(exc)) from None
        self.position = start + block.size
        return Block(start, self.position, records)

    def skip(self) -> None:
        """Moves past a block that could not be read, to the next block start found."""
        self._blocks = None
        self.position = self.next_block_start(self.position + 1)


def _reason(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return f"a corrupt block ({type(exc).__name__}: {text})"
