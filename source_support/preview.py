"""Reading a few records of a source for a preview, with no trace upstream or in a run.

A bounded source whose reader changes nothing upstream (files, objects, a table's
snapshot) is read through its own enumerator and reader, as a run reads it, but on
in-memory contexts: its splits are discovered and read, nothing is landed, no checkpoint
is committed and no reader is told one was (so no connector acknowledges anything). A
source whose reader keeps a position upstream (a consumer group, a durable consumer, a
committed offset) answers ``Source.sample`` instead, which reads without one.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from source_support.api import (
    BadRecord,
    ReaderInfo,
    RecordBatch,
    Source,
    SourceEvent,
    SourceReaderContext,
    SplitBacklog,
    SplitEnumeratorContext,
    SplitT,
)
from source_support.errors import ConfigError

#: The subtask of the preview's one reader.
PREVIEW_SUBTASK = 0


@dataclass
class PreviewRead:
    """What a preview read: the records (in the run's columns), every bad record with its
    reason and position, where each came from, and whether the read stopped early."""

    records: pa.Table
    bad_records: list[BadRecord] = field(default_factory=list[BadRecord])
    #: The split ids read, in order.
    splits: list[str] = field(default_factory=list[str])
    #: Why reading stopped before the source's end ("" it did not): the limit or the time.
    truncated: str = ""


class _ListBacklog(SplitBacklog[SplitT]):
    def __init__(self) -> None:
        self.splits: list[SplitT] = []

    def append(self, splits: Sequence[SplitT]) -> None:
        self.splits.extend(splits)

    def prepend(self, splits: Sequence[SplitT]) -> None:
        self.splits[:0] = splits

    def take(self, count: int) -> list[SplitT]:
        taken, self.splits = self.splits[:count], self.splits[count:]
        return taken


class _PreviewEnumeratorContext(SplitEnumeratorContext[SplitT]):
    """One reader; what the enumerator assigns is kept for it, nothing is stored."""

    def __init__(self) -> None:
        self.assigned: list[SplitT] = []
        self.no_more_splits = False
        self._backlog = _ListBacklog[SplitT]()

    @property
    def current_parallelism(self) -> int:
        return 1

    def registered_readers(self) -> dict[int, ReaderInfo]:
        return {PREVIEW_SUBTASK: ReaderInfo(PREVIEW_SUBTASK, "preview")}

    def assign_splits(self, assignment: Mapping[int, Sequence[SplitT]]) -> None:
        for splits in assignment.values():
            self.assigned.extend(splits)

    def signal_no_more_splits(self, subtask: int) -> None:
        self.no_more_splits = True

    def send_event_to_source_reader(self, subtask: int, event: SourceEvent) -> None:
        pass  # one reader that reads a few records: no stop rule or watermark to pass on

    def backlog(self) -> SplitBacklog[SplitT]:
        return self._backlog


class _PreviewReaderContext(SourceReaderContext):
    def __init__(self) -> None:
        self.requested = False

    @property
    def subtask(self) -> int:
        return PREVIEW_SUBTASK

    def send_split_request(self) -> None:
        self.requested = True

    def send_source_event_to_coordinator(self, event: SourceEvent) -> None:
        pass


def preview_read(source: Source[Any], *, limit: int, timeout_s: float, latest: bool = False) -> PreviewRead:
    """Up to ``limit`` records (good and bad) of ``source`` within about ``timeout_s``.

    ``latest``: the newest records of a stream (where ``Source.sample`` reads); a bounded
    source is read from its start. ConfigError naming ``source`` for a source that can be
    neither sampled nor read without moving a position upstream."""
    deadline = time.monotonic() + timeout_s
    sampled = source.sample(limit=limit, latest=latest, timeout_s=timeout_s)
    if sampled is not None:
        return _collect(source, sampled, limit=limit, truncated="")
    if not source.reads_without_trace:
        raise ConfigError(
            "source.type",
            f"{type(source).__name__} cannot be previewed: reading it would move its position upstream",
        )
    return _read_splits(source, limit=limit, deadline=deadline)


def source_found(source: Source[Any], *, max_splits: int) -> list[str]:
    """What ``source`` finds now, in its own words (``Source.describe_found``), after the
    checks a run starts with (``check_input``: reachable, the table there); at most
    ``max_splits`` splits are looked at. Nothing is read or assigned to a reader."""
    source.check_input()
    context = _PreviewEnumeratorContext[Any]()
    enumerator = source.create_enumerator(context)
    try:
        enumerator.start()
        enumerator.add_reader(PREVIEW_SUBTASK)
        while len(context.assigned) < max_splits:
            before = len(context.assigned)
            enumerator.handle_split_request(PREVIEW_SUBTASK, "check")
            if len(context.assigned) == before:
                break
    finally:
        enumerator.close()
    return source.describe_found(context.assigned[:max_splits])


def _read_splits(source: Source[Any], *, limit: int, deadline: float) -> PreviewRead:
    context = _PreviewEnumeratorContext[Any]()
    enumerator = source.create_enumerator(context)
    reader_context = _PreviewReaderContext()
    reader = source.create_reader(reader_context)
    batches: list[RecordBatch] = []
    count, truncated = 0, ""
    try:
        enumerator.start()
        enumerator.add_reader(PREVIEW_SUBTASK)
        while True:
            if count >= limit:
                truncated = f"the limit of {limit} records"
                break
            if time.monotonic() >= deadline:
                truncated = "the time limit"
                break
            if not reader.has_splits():
                if context.no_more_splits or enumerator.is_exhausted() and not context.assigned:
                    break
                enumerator.handle_split_request(PREVIEW_SUBTASK, "preview")
                if not context.assigned:
                    if context.no_more_splits or enumerator.is_exhausted():
                        break
                    continue
                reader.add_splits(context.assigned)
                context.assigned = []
            batch = reader.poll(timeout_s=min(0.5, max(0.0, deadline - time.monotonic())))
            if batch is not None:
                batches.append(batch)
                count += batch.records.num_rows + len(batch.bad_records)
    finally:
        reader.close()
        enumerator.close()
    return _collect(source, batches, limit=limit, truncated=truncated)


def _collect(
    source: Source[Any], batches: Sequence[RecordBatch], *, limit: int, truncated: str
) -> PreviewRead:
    tables = [b.records for b in batches if b.records.num_rows]
    records = pa.concat_tables(tables, promote_options="default") if tables else _empty(batches)
    bad: list[BadRecord] = []
    splits: list[str] = []
    for batch in batches:
        if batch.split_id not in splits:
            splits.append(batch.split_id)
        for record in batch.bad_records:
            record.offset = record.offset or source.format_position(record.position)
            bad.append(record)
    if records.num_rows > limit:
        records, truncated = records.slice(0, limit), f"the limit of {limit} records"
    return PreviewRead(records=records, bad_records=bad[:limit], splits=splits, truncated=truncated)


def _empty(batches: Sequence[RecordBatch]) -> pa.Table:
    return batches[0].records if batches else pa.table({})
