"""Reads every held stream with one XREAD, and moves the flow's consumer group only once
a checkpoint is committed."""

from __future__ import annotations

import logging
import time
from bisect import bisect_right
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import redis

from connectors.redis_streams.checks import (
    LostEntries,
    entries_read_at,
    group_name,
    lost_entries,
    read_to_stop,
    resync_entries_read,
)
from connectors.redis_streams.connection import MAX_BLOCK_MS, server_major_version
from connectors.redis_streams.entries import (
    Entry,
    FieldsDecoder,
    RecordFieldDecoder,
    entry_json,
    good_indices,
)
from connectors.redis_streams.split import MAX_SEQ, EntryIdOutOfRange, StreamSplit, decode_position, encode_id
from source_support.api import BadRecord, OffsetEntry, RecordBatch
from source_support.errors import SplitFailed
from source_support.reader_base import SplitReader

log = logging.getLogger("connectors.redis_streams")

#: How often each held stream is looked at (trimmed, deleted, read up to its stop).
CHECK_INTERVAL_S = 1.0
METADATA_FIELDS = (pa.field("_stream", pa.string()), pa.field("_id", pa.string()))


@dataclass
class StreamState:
    """What the reader knows of one held stream besides its split."""

    split: StreamSplit
    next_check: float = 0.0
    group_ready: bool = False
    #: Entries the group has read at each position read since (Redis 7 ``ENTRIESREAD``,
    #: so ``XINFO GROUPS`` shows the lag); empty when unknown.
    entries_read: dict[int, int] = field(default_factory=dict)


class StreamSplitReader(SplitReader[StreamSplit]):
    """Reads the held streams (Flink's ``KafkaPartitionSplitReader``): each ``fetch`` is
    one ``XREAD`` over all of them from their positions, blocking when all are caught up.

    Progress is kept by position, not by a consumer group's pending list, so a replay
    reads the same entries; the group named after the flow only mirrors the committed
    positions (``XGROUP SETID`` in ``notify_checkpoint_complete``) for Redis tools.
    """

    def __init__(
        self,
        client: redis.Redis,
        decoder: FieldsDecoder | RecordFieldDecoder,
        *,
        group: str,
        metadata: bool = False,
        output_schema: pa.Schema | None = None,
        first_bad_record_only: Callable[[], bool] = lambda: False,
    ) -> None:
        self.client = client
        self.decoder = decoder
        self.group = group
        self.metadata = metadata
        self.output_schema = output_schema
        self.first_bad_record_only = first_bad_record_only
        self.streams: dict[str, StreamState] = {}
        #: Streams that finished since the last commit: their group still moves to the end.
        self.finished: dict[str, StreamState] = {}
        self._redis_major: int | None = None

    # The SplitReader interface

    def handle_splits_changes(self, added: Sequence[StreamSplit], removed: Sequence[str]) -> None:
        for split in added:
            self.streams[split.key] = StreamState(split)
        for key in removed:
            self.streams.pop(key, None)

    def fetch(self, max_records: int, timeout_s: float) -> list[RecordBatch]:
        if not self.streams:
            return []
        batches = self._check_due()
        reading = [s for s in self.streams.values() if s.split.key not in {b.split_id for b in batches}]
        if not reading:
            return batches
        block_ms = None if batches or timeout_s <= 0 else min(MAX_BLOCK_MS, max(1, round(timeout_s * 1000)))
        try:
            reply = self._xread(reading, max_records, block_ms)
        except redis.ResponseError as exc:
            if "WRONGTYPE" not in str(exc):
                raise
            for state in reading:  # a key is no longer a stream: the checks say which
                state.next_check = 0.0
            return batches + self._check_due()
        for raw_key, entries in reply or []:
            state = self.streams.get(raw_key.decode("utf-8"))
            if state is not None and entries:
                batches.append(self._batch(state, entries))
        return batches

    def notify_checkpoint_complete(self, positions: Mapping[str, int]) -> None:
        """Moves the flow's consumer group on each committed stream to its checkpoint."""
        keys = list(positions)
        pipe = self.client.pipeline(transaction=False)
        for key in keys:
            pipe.execute_command("XGROUP", "SETID", key, self.group, *self._group_id(key, positions[key]))
        try:
            results = pipe.execute(raise_on_error=False)
            missing = [k for k, r in zip(keys, results, strict=True) if _is_error(r, "NOGROUP")]
            if missing:
                self._create_groups({k: positions[k] for k in missing})
        except redis.RedisError as exc:
            log.warning("could not move consumer group %s: %s (the next commit moves it)", self.group, exc)
        for key in keys:
            self.finished.pop(key, None)

    def describe(self, split: StreamSplit, position: int, *, line: int | None = None) -> str:
        return f"stream {split.key} entry {decode_position(position)}"

    def close(self) -> None:
        self.streams.clear()
        self.client.close()

    # Reading

    def _xread(self, reading: list[StreamState], max_records: int, block_ms: int | None) -> list:
        args: list[Any] = ["XREAD", "COUNT", max_records]
        if block_ms is not None:
            args += ["BLOCK", block_ms]
        args.append("STREAMS")
        args += [s.split.key for s in reading]
        args += [decode_position(s.split.position) for s in reading]
        return self.client.execute_command(*args)

    def _batch(self, state: StreamState, entries: list[Entry]) -> RecordBatch:
        split = state.split
        _check_sequences(split, entries)
        last = split.entry_position(entries[-1][0])
        finished = False
        if split.stop_position is not None and last >= split.stop_position:
            entries = entries[: bisect_right(entries, split.stop_position, key=lambda e: encode_id(e[0]))]
            last, finished = split.stop_position, True
        records, bad = self._records(split, entries)
        end = split.entry_position(entries[-1][0]) if entries and not finished else last
        self._advance(state, end, len(entries))
        if finished:
            self.finished[split.key] = self.streams.pop(split.key)
        return RecordBatch(split.key, split.offset, OffsetEntry(split.key, end), records, bad, finished)

    def _records(self, split: StreamSplit, entries: list[Entry]) -> tuple[pa.Table, list[BadRecord]]:
        first_only = self.first_bad_record_only()
        table, reasons = self.decoder.decode(entries, first_only=first_only)
        bad = [
            BadRecord(encode_id(entries[i][0]), entry_json(entries[i]), reasons[i]) for i in sorted(reasons)
        ]
        if self.metadata and not (first_only and bad):
            table = self._with_metadata(table, split.key, entries, good_indices(len(entries), reasons))
        return table, bad

    def _with_metadata(self, table: pa.Table, key: str, entries: list[Entry], rows) -> pa.Table:
        ids = pa.array([entries[i][0] for i in rows], pa.binary()).cast(pa.string())
        table = table.append_column(METADATA_FIELDS[0], pa.array([key] * len(ids), pa.string()))
        table = table.append_column(METADATA_FIELDS[1], ids)
        if self.output_schema is not None and set(self.output_schema.names) == set(table.column_names):
            table = table.select(self.output_schema.names)
        return table

    def _advance(self, state: StreamState, end: int, count: int) -> None:
        split = state.split
        if state.entries_read:
            state.entries_read[end] = state.entries_read[max(state.entries_read)] + count
        state.split = split.at(end)

    # Checks: at most once a second per stream, and when it is added

    def _check_due(self) -> list[RecordBatch]:
        now = time.monotonic()
        due = [s for s in self.streams.values() if s.next_check <= now]
        batches = []
        for state in [s for s in self.streams.values() if s.split.stopped]:
            batches.append(self._finished(state))
        due = [s for s in due if s.split.key in self.streams]
        if not due:
            return batches
        pipe = self.client.pipeline(transaction=False)
        pipe.time()
        for state in due:
            pipe.xinfo_stream(state.split.key)
            if not state.group_ready:
                pipe.execute_command("XINFO", "GROUPS", state.split.key)
        results = iter(pipe.execute(raise_on_error=False))
        server_ms = _time_ms(next(results))
        for state in due:
            state.next_check = now + CHECK_INTERVAL_S
            info = next(results)
            groups = next(results) if not state.group_ready else None
            batch = self._check(state, info, groups, server_ms)
            if batch is not None:
                batches.append(batch)
        return batches

    def _check(self, state: StreamState, info: Any, groups: Any, server_ms: int) -> RecordBatch | None:
        split = state.split
        if isinstance(info, Exception):
            if _is_error(info, "no such key") or _is_error(info, "WRONGTYPE"):
                at = decode_position(split.position)
                note = f"stream {split.key} was deleted while it was read; its split ends at {at}"
                log.warning("%s", note)
                return self._finished(state, note=note)
            raise info
        try:
            if not state.group_ready:
                self._set_up_group(state, info, groups)
            lost = lost_entries(split.position, state.entries_read, info)
            if lost is not None:
                return self._trimmed(state, lost)
            resync_entries_read(split.position, state.entries_read, info)
            if split.stop_position is not None and read_to_stop(split, info, server_ms):
                return self._finished(state)
        except EntryIdOutOfRange as exc:
            raise SplitFailed(f"stream {split.key}: {exc}", split_id=split.key) from None
        return None

    def _finished(self, state: StreamState, *, note: str = "") -> RecordBatch:
        split = state.split
        self.finished[split.key] = self.streams.pop(split.key)
        return RecordBatch(split.key, split.offset, split.offset, self._empty(), finished=True, note=note)

    def _trimmed(self, state: StreamState, lost: LostEntries) -> RecordBatch:
        split = state.split
        reason = f"stream {split.key}: {lost.describe(split.position)} were trimmed before they were read"
        if self.first_bad_record_only():
            self.streams.pop(split.key, None)
            raise SplitFailed(f"{reason}; set skip_errors to go on past lost entries", split_id=split.key)
        log.warning("%s; they are recorded as a dead letter", reason)
        read = state.entries_read.get(split.position)
        if read is not None:
            state.entries_read[lost.last_position] = read + lost.count
        state.split = split.at(lost.last_position)
        bad = [
            BadRecord(
                lost.last_position, "", f"{lost.describe(split.position)} were trimmed before they were read"
            )
        ]
        end = OffsetEntry(split.key, lost.last_position)
        return RecordBatch(split.key, split.offset, end, self._empty(), bad)

    def _empty(self) -> pa.Table:
        if self.output_schema is not None:
            return self.output_schema.empty_table()
        table = self.decoder.fmt.empty()
        if self.metadata:
            for f in METADATA_FIELDS:
                table = table.append_column(f, pa.array([], f.type))
        return table

    # The consumer group

    def _set_up_group(self, state: StreamState, info: Mapping[str, Any], groups: Any) -> None:
        """Creates the flow's group at the split's position unless it exists, and learns
        how many entries it has read (Redis 7) so the group's lag is right."""
        state.group_ready = True
        position = state.split.position
        mine = None
        if isinstance(groups, list):
            mine = next((g for g in groups if group_name(g) == self.group), None)
        read = entries_read_at(position, info, mine) if self._redis_major_version() >= 7 else None
        if read is not None:
            state.entries_read = {position: read}
        if mine is None:
            self._create_groups({state.split.key: position})

    def _create_groups(self, positions: Mapping[str, int]) -> None:
        """Creates the group on existing streams only (never MKSTREAM: a flow does not
        create streams); one that exists already is left as it is."""
        pipe = self.client.pipeline(transaction=False)
        for key, position in positions.items():
            pipe.execute_command("XGROUP", "CREATE", key, self.group, *self._group_id(key, position))
        pipe.execute(raise_on_error=False)

    def _group_id(self, key: str, position: int) -> list[Any]:
        state = self.streams.get(key) or self.finished.get(key)
        read = state.entries_read.get(position) if state is not None else None
        if state is not None:
            for older in [p for p in state.entries_read if p < position]:
                del state.entries_read[older]
        if read is not None and self._redis_major_version() >= 7:
            return [decode_position(position), "ENTRIESREAD", read]
        return [decode_position(position)]

    def _redis_major_version(self) -> int:
        if self._redis_major is None:
            self._redis_major = server_major_version(self.client)
        return self._redis_major


def _check_sequences(split: StreamSplit, entries: list[Entry]) -> None:
    """Fails the split on an entry id whose sequence a position cannot hold (only ids
    given explicitly by a producer can have one)."""
    ids = pa.array([e[0] for e in entries], pa.binary()).cast(pa.string())
    seqs = pc.list_element(pc.split_pattern(ids, "-", max_splits=1), 1).cast(pa.int64())
    if pc.max(seqs).as_py() > MAX_SEQ:
        first = int(pc.index(pc.greater(seqs, MAX_SEQ), True).as_py())
        split.entry_position(entries[first][0])  # raises SplitFailed naming the id


def _time_ms(reply: Any) -> int:
    seconds, micros = reply
    return int(seconds) * 1000 + int(micros) // 1000


def _is_error(reply: Any, text: str) -> bool:
    return isinstance(reply, Exception) and text.lower() in str(reply).lower()
