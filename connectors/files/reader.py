"""Reads a file split block by block, keeping one file open per split between polls."""

from __future__ import annotations

import os
from dataclasses import replace

import pyarrow as pa

from connectors.files.combined import GroupReader
from connectors.files.open_splits import fail_if_changed
from connectors.files.split import FileSplit
from source_support.api import BadRecord, OffsetEntry, RecordBatch
from source_support.formats import JSON_LAYOUT_SAMPLE, CsvFormat, MissingColumns, ReadError, RecordFormat
from source_support.formats.drift import SchemaDrift
from source_support.lines import RawOpener, RecordBlockReader, line_number, open_local, open_records
from source_support.parking import ParkedHandles
from source_support.reader_base import SequentialSplitReader

#: Open files of splits whose slice ended, for the next slice in this process (a gzip file
#: reopened would be inflated again up to its checkpoint).
PARKED_FILES: ParkedHandles[RecordBlockReader] = ParkedHandles(close=lambda reader: reader.close())


class FileSplitReader(SequentialSplitReader[FileSplit]):
    """Reads held file splits one after the other (``SequentialSplitReader``)."""

    def __init__(self, fmt: RecordFormat, *, first_bad_record_only: bool = False) -> None:
        super().__init__()
        self.fmt = fmt
        #: Stop at a block's first bad record (it fails the split; the rest do not matter).
        self.first_bad_record_only = first_bad_record_only
        self.open: dict[str, RecordBlockReader] = {}
        #: The format of each open split's file (a CSV header maps its columns by name).
        self.formats: dict[str, RecordFormat] = {}
        #: Reads the combined splits (many small files each).
        self.groups = GroupReader(fmt, first_bad_record_only=first_bad_record_only)

    def read_batch(self, split: FileSplit, max_records: int) -> RecordBatch:
        if split.group is not None:
            return self.groups.read_batch(split, max_records)
        reader = self.open.get(split.split_id)
        if reader is None or reader.position != split.position:
            self.close_split(split.split_id)
            try:
                fmt = self._file_format(split)
                reader = PARKED_FILES.take(_parking_key(split, split.position, fmt))
                if reader is not None and not self._path_unchanged(split):
                    reader.close()  # replaced since: opened anew, the split fails as it would
                    reader = None
                if reader is None:
                    reader = RecordBlockReader(
                        split.path,
                        fmt,
                        start=split.start,
                        end=split.end,
                        position=split.position,
                        compressed=split.compressed,
                        open_raw=self.raw_opener(split),
                    )
                else:
                    reader.fmt = fmt  # read the same way (the key says so), by this run's copy
            except FileNotFoundError:
                return self._gone(split)
            self.open[split.split_id] = reader
            self._check_unchanged(split, reader)
        block_start, block, finished = reader.read_block(max_records)
        if finished:
            self._check_unchanged(split, reader)  # e.g. appended to while this split was read
        fmt = self._format_for(split, reader)
        records, bad = self._parse(fmt, reader, block, block_start)
        return RecordBatch(
            split_id=split.split_id,
            start=split.offset,
            end=OffsetEntry(split.split_id, reader.position),
            records=records,
            bad_records=bad,
            finished=finished,
            # a change seen in the file's header (position -1) is at the file's start
            schema_changes=[replace(c, position=max(c.position, 0)) for c in fmt.drift_seen],
        )

    def _parse(
        self, fmt: RecordFormat, reader: RecordBlockReader, block: bytes, block_start: int
    ) -> tuple[pa.Table, list[BadRecord]]:
        records, bad = fmt.parse(block, block_start, first_only=self.first_bad_record_only)
        lines = reader.lines_of(block, [b.position - block_start for b in bad])
        for record, line in zip(bad, lines, strict=True):
            record.line = line
        return records, bad

    def _file_format(self, split: FileSplit) -> RecordFormat:
        """The format of the split's file: JSON lines, or a JSON array or documents, as the
        file's first bytes say."""
        if not self.fmt.chooses_by_head:
            return self.fmt
        with open_records(
            split.path,
            compressed=split.compressed,
            encoding=self.fmt.encoding,
            open_raw=self.raw_opener(split),
        ) as f:
            return self.fmt.for_file(f.read(JSON_LAYOUT_SAMPLE))

    def _format_for(self, split: FileSplit, reader: RecordBlockReader) -> RecordFormat:
        fmt = self.formats.get(split.split_id)
        if fmt is None:
            fmt = reader.fmt
            if reader.header is not None and isinstance(fmt, CsvFormat) and fmt.schema is not None:
                try:
                    fmt = fmt.bind_header(reader.header)
                except MissingColumns as exc:
                    raise ReadError(f"{split.path}: {exc}") from None
                except SchemaDrift as exc:  # seen in the header: at the file's start
                    raise SchemaDrift(replace(exc.change, position=0)) from None
            self.formats[split.split_id] = fmt
        return fmt

    def describe(self, split: FileSplit, position: int, *, line: int | None = None) -> str:
        """Where ``position`` is, for a person: file, line and byte offset."""
        if split.group is not None:
            return self.groups.describe(split, position, line=line)
        if line is None:
            try:
                line = line_number(
                    split.path,
                    position,
                    compressed=split.compressed,
                    encoding=self.fmt.encoding,
                    open_raw=self.raw_opener(split),
                )
            except OSError:
                return f"{split.path} at byte {position}"
        return f"{split.path} line {line} (byte {position})"

    def raw_opener(self, split: FileSplit) -> RawOpener:
        """How the split's stored bytes are opened: a local file here; an object of an
        object store in the S3 source's reader."""
        return open_local

    def _path_unchanged(self, split: FileSplit) -> bool:
        """Whether the split's path still names the discovered file (a parked open file
        is taken back only then; a path that is not a local file never matches)."""
        try:
            return split.change_in(os.stat(split.path)) is None
        except OSError:
            return False

    def _check_unchanged(self, split: FileSplit, reader: RecordBlockReader) -> None:
        fail_if_changed(split, reader.file, self.close_split)

    def _gone(self, split: FileSplit) -> RecordBatch:
        reason = "the file was deleted after it was discovered"
        return RecordBatch(
            split_id=split.split_id,
            start=split.offset,
            end=split.offset,
            records=self.fmt.empty(),
            bad_records=[BadRecord(split.position, "", reason)],
            finished=True,
        )

    def close_split(self, split_id: str) -> None:
        self.groups.close_split(split_id)
        self.formats.pop(split_id, None)
        reader = self.open.pop(split_id, None)
        if reader is not None:
            reader.close()

    def close(self) -> None:
        """Parks the open files of the held splits (``PARKED_FILES``), closes the rest."""
        for split_id, reader in list(self.open.items()):
            split = self.splits.get(split_id)
            if split is not None and split.group is None and not reader.file.closed:
                del self.open[split_id]
                PARKED_FILES.park(_parking_key(split, reader.position, reader.fmt), reader)
        super().close()
        for split_id in list(self.open):
            self.close_split(split_id)


def _parking_key(split: FileSplit, position: int, fmt: RecordFormat) -> tuple[object, ...]:
    """What a parked file is open on, where it stands, and what of the format its opening
    read by (header, comments, preamble, encoding)."""
    return (
        split.at(0),  # every field of the split (an object's ETag too) but its position
        position,
        type(fmt).__name__,
        fmt.encoding,
        fmt.has_header,
        fmt.comment,
        fmt.preamble_bytes,
    )
