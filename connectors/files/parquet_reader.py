"""Reads the splits of Parquet files (``[format] type = "parquet"``) row group by row group.

A split is a byte range of a file; it owns the row groups that start in it (as Spark
assigns a file's row groups to its byte-range partitions), and its position is the byte
offset where its next row group starts, so a batch ends after a whole row group and a
reader that restarts from a checkpoint resumes at the row group after the last one
landed. A batch holds at most ``max_records`` rows, unless one row group alone holds
more (a row group is never cut): memory holds one batch of row groups per reader.

A row group that cannot be read is a bad record at the row group's offset: dead-lettered
when the flow skips errors (reading goes on at the next row group), or the split fails
naming the file and the offset. A file that is not Parquet fails its split.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from connectors.files.enumerator import COMPRESSED_SUFFIXES, list_files
from connectors.files.open_splits import OpenFileSplitReader
from connectors.files.split import FileSplit
from source_support.api import BadRecord, OffsetEntry, RecordBatch, SchemaChange
from source_support.errors import SplitFailed
from source_support.formats import ReadError
from source_support.formats.drift import SchemaDrift
from source_support.formats.parquet import ParquetFormat
from source_support.registry import Environment

#: What pyarrow raises for a file or a row group it cannot read.
_UNREADABLE = (OSError, pa.ArrowException)
#: The most uncompressed bytes of one row group a reader holds (a batch never cuts one, so a
#: reader's memory is bounded by this, not by the file); Spark's writers make them 128 MB.
MAX_ROW_GROUP_BYTES = 1 << 30


@dataclass
class _OpenSplit:
    """A split's open file, the row groups it owns (index and start offset, in order), and
    how many of them are read."""

    file: Any
    parquet: pq.ParquetFile
    groups: list[tuple[int, int]]
    read: int = 0

    def position(self, end: int) -> int:
        return self.groups[self.read][1] if self.read < len(self.groups) else end


def row_group_start(metadata: pq.FileMetaData, index: int) -> int:
    """Where row group ``index`` starts in its file: its first column chunk's first page."""
    group = metadata.row_group(index)
    starts: list[int] = []
    for c in range(group.num_columns):
        column = group.column(c)
        dictionary = column.dictionary_page_offset if column.has_dictionary_page else None
        starts.append(dictionary if dictionary else column.data_page_offset)
    return min(starts) if starts else 0


class ParquetFileSplitReader(OpenFileSplitReader[_OpenSplit, ParquetFormat]):
    """Reads held Parquet file splits one after the other."""

    def read_batch(self, split: FileSplit, max_records: int) -> RecordBatch:
        state = self._held(split, lambda held: held.position(split.end))
        if state is None:
            return self._gone(split)
        metadata = state.parquet.metadata
        columns = self.fmt.wanted_columns(state.parquet.schema_arrow)
        tables: list[pa.Table] = []
        starts: list[int] = []
        bad: list[BadRecord] = []
        rows = 0
        while state.read < len(state.groups):
            index, start = state.groups[state.read]
            group = metadata.row_group(index)
            if tables and rows + group.num_rows > max_records:
                break
            if group.total_byte_size > MAX_ROW_GROUP_BYTES:
                self.close_split(split.split_id)
                raise SplitFailed(
                    f"{split.path} row group {index} at byte {start}: {group.total_byte_size} bytes "
                    f"uncompressed, more than the {MAX_ROW_GROUP_BYTES} a reader holds at once; "
                    "write the file with smaller row groups (pyarrow's row_group_size, Spark's "
                    "parquet.block.size)",
                    split_id=split.split_id,
                )
            try:
                # The stubs leave the element type of ``columns`` open.
                table = state.parquet.read_row_group(index, columns=columns)  # pyright: ignore[reportUnknownMemberType]
            except _UNREADABLE as exc:
                bad.append(BadRecord(start, "", f"row group {index} cannot be read: {exc}"))
                if self.first_bad_record_only:
                    break
                state.read += 1
                continue
            state.read += 1
            tables.append(table)
            starts.append(start)
            rows += table.num_rows
            if rows >= max_records:
                break
        finished = state.read >= len(state.groups) and not (bad and self.first_bad_record_only)
        if finished:
            self._check_unchanged(split, state)
        table, changes = self._table(tables, starts, split)
        return RecordBatch(
            split_id=split.split_id,
            start=split.offset,
            end=OffsetEntry(split.split_id, state.position(split.end)),
            records=table,
            bad_records=bad,
            finished=finished,
            schema_changes=changes,
        )

    def _table(
        self, tables: list[pa.Table], starts: list[int], split: FileSplit
    ) -> tuple[pa.Table, list[SchemaChange]]:
        """The row groups' rows as the run lands them and the schema changes seen in them;
        a change of the file's columns (one it lacks) is said at the batch's first row group."""
        if not tables:
            return self.fmt.empty(), []
        table = pa.concat_tables(tables) if len(tables) > 1 else tables[0]
        positions = np.repeat(np.asarray(starts, np.int64), [t.num_rows for t in tables])
        try:
            landed, changes = self.fmt.file_table(table, path=split.path, row_positions=positions)
        except SchemaDrift as exc:
            change = exc.change
            raise SchemaDrift(
                replace(change, position=change.position if change.position >= 0 else starts[0])
            ) from None
        return landed, [replace(c, position=c.position if c.position >= 0 else starts[0]) for c in changes]

    def _open(self, split: FileSplit) -> _OpenSplit:
        if split.compressed:
            raise ReadError(f"{split.path}: a Parquet file is compressed inside; gzip around it is not read")
        f = open(split.path, "rb")  # noqa: SIM115 - kept open between batches, closed by close_split
        try:
            parquet = pq.ParquetFile(f)
        except _UNREADABLE as exc:
            f.close()
            raise ReadError(f"{split.path}: not a Parquet file ({exc})") from None
        metadata = parquet.metadata
        groups = [
            (index, start)
            for index in range(metadata.num_row_groups)
            if split.start <= (start := row_group_start(metadata, index)) < split.end
        ]
        state = _OpenSplit(f, parquet, groups)
        while state.read < len(groups) and groups[state.read][1] < split.position:
            state.read += 1
        self._check_unchanged(split, state)
        return state

    def describe(self, split: FileSplit, position: int, *, line: int | None = None) -> str:
        """Where ``position`` is: the file and the byte offset of the row group there."""
        return f"{split.path} row group at byte {position}"


def _file_schema(path: str) -> pa.Schema:
    """The Arrow schema of a Parquet file's footer; ValueError naming the file if it is
    not a Parquet file."""
    if path.endswith(COMPRESSED_SUFFIXES):
        raise ValueError(f"{path}: a Parquet file is compressed inside; gzip around it is not read")
    try:
        with pq.ParquetFile(path) as parquet:
            return parquet.schema_arrow
    except _UNREADABLE as exc:
        raise ValueError(f"{path}: not a Parquet file ({exc})") from None


def parquet_infer_schema(pattern: str, env: Environment, fmt: ParquetFormat) -> pa.Schema | None:
    """The columns of the first file (only its footer is read); None if there is no file.
    ValueError naming the file if it is not a Parquet file."""
    for path in list_files(pattern, env):
        try:
            return fmt.columns_of(_file_schema(path), where=path)
        except FileNotFoundError:
            continue
    return None


#: Files whose footer is checked against a declared schema when a run starts.
MAX_FOOTERS_CHECKED = 1000


def parquet_check_input(pattern: str, env: Environment, fmt: ParquetFormat) -> None:
    """Refuses a declared ``format.schema`` that disagrees with a file's columns, naming the
    column and the file (the first ``MAX_FOOTERS_CHECKED`` files)."""
    if fmt.declared is None or fmt.on_schema_change is not None:
        return  # a file that differs is settled by the policy as it is read
    for path in list_files(pattern, env)[:MAX_FOOTERS_CHECKED]:
        try:
            schema = _file_schema(path)
        except (OSError, ValueError):
            continue  # gone or not Parquet: its split says so
        fmt.check_file_schema(schema, path=path)
