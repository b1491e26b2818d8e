"""Reads the splits of Avro container files (``[format] type = "avro"``) block by block.

A split is a byte range of a file; it owns the blocks that start in it
(``source_support.formats.avro_container``), and its position is the byte offset where
its next block starts, so a batch ends after a whole block and a reader that restarts from
a checkpoint resumes at the block after the last one landed. A batch holds at most
``max_records`` records, unless one block alone holds more (a block is never cut).

A block that cannot be read is a bad record at the block's offset: dead-lettered when the
flow skips errors (reading goes on at the next sync marker), or the split fails naming
the file and the offset.
"""

from __future__ import annotations

import gzip
import os
from typing import Any

import pyarrow as pa

from connectors.files.enumerator import COMPRESSED_SUFFIXES, list_files
from connectors.files.split import FileSplit
from source_support.api import BadRecord, OffsetEntry, RecordBatch
from source_support.errors import SplitFailed
from source_support.formats import AvroFormat, ReadError
from source_support.formats.avro_container import Block, BlockFile, ContainerBlocks, CorruptBlock, read_header
from source_support.reader_base import SequentialSplitReader
from source_support.registry import Environment


class _OpenSplit:
    """A split's open file, where it is, and a block read but not yet handed out."""

    def __init__(self, file: BlockFile, blocks: ContainerBlocks) -> None:
        self.file = file
        self.blocks = blocks
        self.held: Block | None = None

    @property
    def position(self) -> int:
        return self.held.start if self.held is not None else self.blocks.position


class AvroFileSplitReader(SequentialSplitReader[FileSplit]):
    """Reads held Avro file splits one after the other."""

    def __init__(self, fmt: AvroFormat, *, first_bad_record_only: bool = False) -> None:
        super().__init__()
        self.fmt = fmt
        self.first_bad_record_only = first_bad_record_only
        self.open: dict[str, _OpenSplit] = {}

    def read_batch(self, split: FileSplit, max_records: int) -> RecordBatch:
        state = self.open.get(split.split_id)
        if state is None or state.position != split.position:
            self.close_split(split.split_id)
            try:
                state = self._open(split)
            except FileNotFoundError:
                return self._gone(split)
            self.open[split.split_id] = state
        blocks = state.blocks
        records: list[dict[str, Any]] = []
        bad: list[BadRecord] = []
        while not blocks.finished or state.held is not None:
            block, state.held = state.held, None
            if block is None:
                at = blocks.position
                try:
                    block = blocks.read()
                except CorruptBlock as exc:
                    bad.append(BadRecord(at, "", str(exc)))
                    if self.first_bad_record_only:
                        break
                    blocks.skip()
                    continue
                if block is None:
                    break
            if records and len(records) + len(block.records) > max_records:
                state.held = block  # the next batch starts with it
                break
            records.extend(block.records)
            if len(records) >= max_records:
                break
        finished = blocks.finished and state.held is None and not (bad and self.first_bad_record_only)
        if finished:
            self._check_unchanged(split, state)
        table = (
            self.fmt.file_table(records, blocks.header.schema, path=split.path)
            if records
            else self.fmt.empty()
        )
        return RecordBatch(
            split_id=split.split_id,
            start=split.offset,
            end=OffsetEntry(split.split_id, state.position),
            records=table,
            bad_records=bad,
            finished=finished,
        )

    def _open(self, split: FileSplit) -> _OpenSplit:
        f = open_container(split.path, compressed=split.compressed)
        try:
            blocks = ContainerBlocks(f, start=split.start, end=split.end, position=split.position)
        except ValueError as exc:
            f.close()
            raise ReadError(f"{split.path}: {exc}") from None
        state = _OpenSplit(f, blocks)
        self._check_unchanged(split, state)
        return state

    def _check_unchanged(self, split: FileSplit, state: _OpenSplit) -> None:
        """Fails the split if the open file is not the one discovered (see ``FileSplitReader``)."""
        change = split.change_in(os.fstat(state.file.fileno()))
        if change is not None:
            self.close_split(split.split_id)
            raise SplitFailed(change, split_id=split.split_id)

    def _gone(self, split: FileSplit) -> RecordBatch:
        return RecordBatch(
            split_id=split.split_id,
            start=split.offset,
            end=split.offset,
            records=self.fmt.empty(),
            bad_records=[BadRecord(split.position, "", "the file was deleted after it was discovered")],
            finished=True,
        )

    def describe(self, split: FileSplit, position: int, *, line: int | None = None) -> str:
        """Where ``position`` is: the file and the byte offset of the block there."""
        return f"{split.path} block at byte {position}"

    def close_split(self, split_id: str) -> None:
        state = self.open.pop(split_id, None)
        if state is not None:
            state.file.close()

    def close(self) -> None:
        super().close()
        for split_id in list(self.open):
            self.close_split(split_id)


def open_container(path: str, *, compressed: bool) -> BlockFile:
    """A container file, gunzipped when it is compressed (its positions then count
    uncompressed bytes, as in every gzip file)."""
    return gzip.open(path, "rb") if compressed else open(path, "rb")  # noqa: SIM115


def avro_infer_schema(pattern: str, env: Environment, fmt: AvroFormat) -> pa.Schema | None:
    """The columns of the first file's Avro schema (only its header is read); None if there
    is no file. ValueError naming the file if it is not an Avro container file."""
    for path in list_files(pattern, env):
        f = open_container(path, compressed=path.endswith(COMPRESSED_SUFFIXES))
        try:
            header = read_header(f)
        except ValueError as exc:
            raise ValueError(f"{path}: {exc}") from None
        finally:
            f.close()
        return fmt.columns_of(header.schema, where=path)
    return None


#: Files whose header is checked against a declared schema when a run starts.
MAX_HEADERS_CHECKED = 1000


def avro_check_input(pattern: str, env: Environment, fmt: AvroFormat) -> None:
    """Refuses a declared ``format.schema`` that disagrees with a file's Avro schema, naming
    the column and the file (the first ``MAX_HEADERS_CHECKED`` files)."""
    if fmt.declared is None:
        return
    for path in list_files(pattern, env)[:MAX_HEADERS_CHECKED]:
        try:
            f = open_container(path, compressed=path.endswith(COMPRESSED_SUFFIXES))
        except OSError:
            continue  # gone: its split says so
        try:
            header = read_header(f)
        except (OSError, ValueError):
            continue  # not Avro: its split says so
        finally:
            f.close()
        fmt.check_file_schema(header.schema, path=path)
