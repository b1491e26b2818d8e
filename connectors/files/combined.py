"""Reads a combined split: many small files, each read whole, their records parsed together.

Spark reads a partition of small files one file after the other; so does this, but it
hands the format one block that joins the records of consecutive files (each file's
header, byte-order mark and comment lines before the header left out), so a thousand
one-row files cost one parse and land as one Parquet file. Files whose CSV headers differ
are not joined: a batch ends where the header changes, so each block is parsed with the
columns of its own files.

A position is ``group_position(file index, byte offset in that file)``; a batch ends at a
record boundary (inside a file, when ``max_records`` is reached there) or at the start of
a file, so a killed reader resumes at the exact record after the last commit.
"""

from __future__ import annotations

import bisect
import os
from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa

from connectors.files.split import FileGroup, FileSplit, group_location, group_position
from source_support.api import BadRecord, OffsetEntry, RecordBatch, SchemaChange
from source_support.errors import SplitFailed
from source_support.formats import JSON_LAYOUT_SAMPLE, CsvFormat, MissingColumns, ReadError, RecordFormat
from source_support.formats.drift import SchemaDrift
from source_support.lines import MAX_BLOCK_BYTES, MAX_RECORD_BYTES, UTF8_BOM

#: Bound formats kept per distinct header line (most directories have one header).
MAX_HEADERS_KEPT = 64


@dataclass
class _SmallFile:
    """One file of a group, read whole."""

    index: int
    path: str
    data: bytes
    #: Where the first record begins (after a BOM, comment lines and the header).
    body: int
    fmt: RecordFormat
    #: How many records (lines) the body holds, the last one without a newline included.
    records: int
    #: Offsets just past each record of the body, counted only when a batch ends inside
    #: the file (most small files go whole into a batch).
    ends: np.ndarray | None = None

    def record_ends(self) -> np.ndarray:
        if self.ends is None:
            ends = self.fmt.record_ends(self.data[self.body :]) + self.body
            if self.body < len(self.data) and (not len(ends) or ends[-1] != len(self.data)):
                ends = np.append(ends, len(self.data))
            self.ends = ends
        return self.ends


@dataclass
class _Segment:
    """Where a file's records sit in a joined block."""

    block_start: int
    index: int
    offset: int


class GroupReader:
    """Reads the combined splits of one ``FileSplitReader``; keeps the file it stopped in."""

    def __init__(self, fmt: RecordFormat, *, first_bad_record_only: bool) -> None:
        self.fmt = fmt
        self.first_bad_record_only = first_bad_record_only
        #: The file a batch stopped in (split id -> file), so the next batch does not read it again.
        self.current: dict[str, _SmallFile] = {}
        self.bound: dict[bytes, RecordFormat] = {}

    def read_batch(self, split: FileSplit, max_records: int) -> RecordBatch:
        group = split.group
        assert group is not None
        index, offset = group_location(split.position)
        pieces: list[bytes] = []
        segments: list[_Segment] = []
        taken = size = 0
        fmt: RecordFormat | None = None
        gone: list[BadRecord] = []
        while index < len(group) and taken < max_records and size < MAX_BLOCK_BYTES:
            small = self._file(split, group, index)
            if small is None:
                reason = f"{group.path(index)}: the file was deleted after it was discovered"
                gone.append(BadRecord(group_position(index, 0), "", reason))
                index, offset = index + 1, 0
                continue
            if fmt is not None and small.fmt is not fmt:
                break  # another header: its records go in a block of their own
            fmt = small.fmt
            if offset <= small.body and small.records <= max_records - taken:
                offset, take, cut = small.body, small.records, len(small.data)  # the whole file
            else:
                offset = max(offset, small.body)
                ends = small.record_ends()
                first = int(np.searchsorted(ends, offset, side="right"))
                take = min(len(ends) - first, max_records - taken)
                cut = int(ends[first + take - 1]) if take else offset
                if first + take == len(ends):
                    cut = len(small.data)  # the file's end, blank lines after the last record included
            piece = small.data[offset:cut]
            if piece and not piece.endswith(b"\n"):
                piece += b"\n"  # a last record without a newline must not run into the next file's first
            segments.append(_Segment(size, index, offset))
            pieces.append(piece)
            size, taken = size + len(piece), taken + take
            if cut < len(small.data):
                offset = cut
                break
            del self.current[split.split_id]
            index, offset = index + 1, 0
        records, bad, changes = self._parse(split, group, fmt, b"".join(pieces), segments)
        end = group_position(index, offset)
        return RecordBatch(
            split_id=split.split_id,
            start=split.offset,
            end=OffsetEntry(split.split_id, end),
            records=records,
            bad_records=gone + bad,
            finished=index >= len(group),
            schema_changes=changes,
        )

    def _parse(
        self,
        split: FileSplit,
        group: FileGroup,
        fmt: RecordFormat | None,
        block: bytes,
        segments: list[_Segment],
    ) -> tuple[pa.Table, list[BadRecord], list[SchemaChange]]:
        if fmt is None or not block:
            return self.fmt.empty(), [], []
        starts = [s.block_start for s in segments]

        def in_group(position: int) -> int:
            segment = segments[bisect.bisect_right(starts, max(position, 0)) - 1]
            if position < 0:  # the file's header
                return group_position(segment.index, 0)
            return group_position(segment.index, segment.offset + position - segment.block_start)

        try:
            records, bad = fmt.parse(block, 0, first_only=self.first_bad_record_only)
        except SchemaDrift as exc:
            raise SchemaDrift(replace(exc.change, position=in_group(exc.change.position))) from None

        changes = [replace(c, position=in_group(c.position)) for c in fmt.drift_seen]
        for record in bad:
            segment = segments[bisect.bisect_right(starts, record.position) - 1]
            offset = segment.offset + record.position - segment.block_start
            path = group.path(segment.index)
            record.position = group_position(segment.index, offset)
            record.line = _line_at(path, offset)
            if not self.first_bad_record_only:
                # A dead letter keeps the split's name; the reason says which file.
                record.reason = f"{path} line {record.line} (byte {offset}): {record.reason}"
        return records, bad, changes

    def _file(self, split: FileSplit, group: FileGroup, index: int) -> _SmallFile | None:
        small = self.current.get(split.split_id)
        if small is not None and small.index == index:
            return small
        path = group.path(index)
        try:
            with open(path, "rb") as f:
                info = os.fstat(f.fileno())
                data = f.read(group.sizes[index] + 1)  # one byte more shows a file that grew
        except FileNotFoundError:
            return None
        change = group.change_in(index, info)
        if change is None and len(data) != group.sizes[index]:
            change = f"{path} changed while it was read: size {group.sizes[index]} -> {len(data)} or more"
        if change is not None:
            raise SplitFailed(change, split_id=split.split_id)
        small = self._small_file(index, path, data)
        self.current[split.split_id] = small
        return small

    def _small_file(self, index: int, path: str, data: bytes) -> _SmallFile:
        fmt = self.fmt.for_file(data[:JSON_LAYOUT_SAMPLE]) if self.fmt.chooses_by_head else self.fmt
        body = len(UTF8_BOM) if data.startswith(UTF8_BOM) else 0
        if fmt.has_header:
            while True:
                line_end = data.find(b"\n", body)
                line_end = len(data) if line_end < 0 else line_end + 1
                line, body = data[body:line_end], line_end
                if not (fmt.comment and line.startswith(fmt.comment)):
                    break
            if line.strip():
                fmt = self._bound(fmt, line, path, index)
        elif fmt.preamble_bytes:
            body += fmt.preamble_length(data[body : body + fmt.preamble_bytes])
        # A small file is read in byte ranges, so its records end at newlines.
        records = data.count(b"\n", body) + (0 if body == len(data) or data.endswith(b"\n") else 1)
        small = _SmallFile(index, path, data, body, fmt, records)
        if len(data) - body > MAX_RECORD_BYTES:
            ends = small.record_ends()
            if int(np.max(np.diff(ends, prepend=body))) > MAX_RECORD_BYTES:
                raise ReadError(f"{path}: a record is longer than {MAX_RECORD_BYTES >> 20} MB")
        return small

    def _bound(self, fmt: RecordFormat, header: bytes, path: str, index: int) -> RecordFormat:
        """``fmt`` mapping the schema's columns by this header's names (one per header line)."""
        if not (isinstance(fmt, CsvFormat) and fmt.schema is not None):
            return fmt
        key = header.rstrip(b"\r\n")
        bound = self.bound.get(key)
        if bound is None:
            try:
                bound = fmt.bind_header(header)
            except MissingColumns as exc:
                raise ReadError(f"{path}: {exc}") from None
            except SchemaDrift as exc:  # seen in the header: at the file's start
                raise SchemaDrift(replace(exc.change, position=group_position(index, 0))) from None
            if len(self.bound) >= MAX_HEADERS_KEPT:
                self.bound.clear()
            self.bound[key] = bound
        return bound

    def describe(self, split: FileSplit, position: int, *, line: int | None = None) -> str:
        """Where ``position`` is: the file, its line and byte offset."""
        group = split.group
        assert group is not None
        index, offset = group_location(position)
        if index >= len(group):
            return f"the end of {split.split_id}"
        path = group.path(index)
        if line is None:
            line = _line_at(path, offset)
        return f"{path} line {line} (byte {offset})"

    def close_split(self, split_id: str) -> None:
        self.current.pop(split_id, None)


def _line_at(path: str, offset: int) -> int:
    """The 1-based line at byte ``offset`` of a small file (0 if it cannot be read now)."""
    try:
        with open(path, "rb") as f:
            return f.read(offset).count(b"\n") + 1
    except OSError:
        return 0
