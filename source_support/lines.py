"""Streaming reads of whole records from a byte range of a file (plain or gzip).

A byte range ``[start, end)`` owns every record whose first byte lies in it, so ranges
cut anywhere still give each record to exactly one reader (Hadoop's ``LineRecordReader``
rule). Memory is bounded by one block, whatever the size of the file.
"""

from __future__ import annotations

import gzip
from typing import BinaryIO

import numpy as np

from source_support.formats import RecordFormat

MIN_CHUNK = 1 << 20
MAX_CHUNK = 64 << 20


class RecordBlockReader:
    """Reads blocks of at most ``max_records`` whole records, advancing ``position``.

    ``position`` is a byte offset in the (uncompressed) data and always sits at a record
    start once reading has begun, so it is a valid checkpoint after every block.
    """

    def __init__(
        self,
        path: str,
        fmt: RecordFormat,
        *,
        start: int,
        end: int,
        position: int,
        compressed: bool,
    ) -> None:
        self.fmt = fmt
        self.end = end
        self.file: BinaryIO = gzip.open(path, "rb") if compressed else open(path, "rb")  # noqa: SIM115
        self.buffer = b""
        self.eof = False
        self.avg_record = 128.0
        if position == start and start > 0:
            # A fresh range starting mid-file: its first record begins after the next newline.
            self.file.seek(start - 1)
            position = start - 1 + len(self.file.readline())
        elif position > 0:
            self.file.seek(position)
        if position == 0 and fmt.has_header:
            position = len(self.file.readline())
        self.position = position

    def read_block(self, max_records: int) -> tuple[int, bytes, bool]:
        """Returns (position of the block, the block, whether the range is finished)."""
        limit = self.end - self.position
        while True:
            ends = self.fmt.record_ends(self.buffer)
            in_range = _count_starting_before(ends, limit)
            past_range = len(ends) > 0 and ends[-1] >= limit
            if in_range >= max_records or past_range or self.eof or limit <= 0:
                break
            want = int(min(MAX_CHUNK, max(MIN_CHUNK, self.avg_record * max_records * 1.2)))
            chunk = self.file.read(want)
            if chunk:
                self.buffer += chunk
            else:
                self.eof = True
        take = min(in_range, max_records)
        cut = int(ends[take - 1]) if take else 0
        if take < max_records and self.eof and take == len(ends) and cut < min(len(self.buffer), limit):
            cut, take = (
                len(self.buffer),
                take + 1,
            )  # a last record without a trailing newline
        block, self.buffer = self.buffer[:cut], self.buffer[cut:]
        start = self.position
        self.position += cut
        if take:
            self.avg_record = 0.8 * self.avg_record + 0.2 * (cut / take)
        finished = self.position >= self.end or (self.eof and not self.buffer)
        return start, block, finished

    def close(self) -> None:
        self.file.close()


def _count_starting_before(ends: np.ndarray, limit: int) -> int:
    """How many complete records start before ``limit`` (the first at 0, the rest at ends)."""
    if len(ends) == 0 or limit <= 0:
        return 0
    return 1 + int(np.count_nonzero(ends[:-1] < limit))


def line_number(path: str, position: int, *, compressed: bool) -> int:
    """The 1-based line at byte ``position``, counted by streaming (used only in errors)."""
    count, done = 1, 0
    with gzip.open(path, "rb") if compressed else open(path, "rb") as f:
        while done < position:
            chunk = f.read(min(1 << 20, position - done))
            if not chunk:
                break
            count += chunk.count(b"\n")
            done += len(chunk)
    return count
