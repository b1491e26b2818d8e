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
from dataclasses import replace
from typing import Any

import numpy as np
import pyarrow as pa

from connectors.files.enumerator import COMPRESSED_SUFFIXES, list_files
from connectors.files.open_splits import OpenFileSplitReader
from connectors.files.split import FileSplit
from source_support.api import BadRecord, OffsetEntry, RecordBatch, SchemaChange
from source_support.formats import AvroFormat, ReadError
from source_support.formats.avro_container import Block, BlockFile, ContainerBlocks, CorruptBlock, read_header
from source_support.formats.drift import SchemaDrift
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


class AvroFileSplitReader(OpenFileSplitReader[_OpenSplit, AvroFormat]):
    """Reads held Avro file splits one after the other."""

    def read_batch(self, split: FileSplit, max_records: int) -> RecordBatch:
        state = self._held(split, lambda held: held.position)
        if state is None:
            return self._gone(split)
        blocks = state.blocks
        records: list[dict[str, Any]] = []
        #: Where each record's block starts (a schema change is said at its block).
        block_starts: list[int] = []
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
            block_starts.extend([block.start] * len(block.records))
            if len(records) >= max_records:
                break
        finished = blocks.finished and state.held is None and not (bad and self.first_bad_record_only)
        if finished:
            self._check_unchanged(split, state)
        table, changes = self._table(records, blocks.header.schema, split, block_starts)
        return RecordBatch(
            split_id=split.split_id,
            start=split.offset,
            end=OffsetEntry(split.split_id, state.position),
            records=table,
            bad_records=bad,
            finished=finished,
            schema_changes=changes,
        )

    def _table(
        self, records: list[dict[str, Any]], avro_schema: Any, split: FileSplit, block_starts: list[int]
    ) -> tuple[pa.Table, list[SchemaChange]]:
        """The records as the run lands them and the schema changes seen in them; a
        change of the file's schema (a column it lacks) is said at the batch's first block."""
        if not records:
            return self.fmt.empty(), []
        first = block_starts[0]
        try:
            table, changes = self.fmt.file_table(
                records, avro_schema, path=split.path, row_positions=np.asarray(block_starts, np.int64)
            )
        except SchemaDrift as exc:
            change = exc.change
            raise SchemaDrift(
                replace(change, position=change.position if change.position >= 0 else first)
            ) from None
        return table, [replace(c, position=c.position if c.position >= 0 else first) for c in changes]

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

    def describe(self, split: FileSplit, position: int, *, line: int | None = None) -> str:
        """Where ``position`` is: the file and the byte offset of the block there."""
        return f"{split.path} block at byte {position}"


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
    if fmt.declared is None or fmt.on_schema_change is not None:
        return  # a file that differs is settled by the policy as it is read
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
