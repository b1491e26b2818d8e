"""Reads every held stream with one XREAD, and moves the flow's consumer group only once
a checkpoint is committed."""

from __future__ import annotations

import logging
import time
from bisect import bisect_right
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import redis

from connectors.redis_streams.checks import (
    GroupInfo,
    LostEntries,
    StreamReplaced,
    entries_read_at,
    group_name,
    lost_entries,
    read_to_stop,
    replaced_stream,
    resync_entries_read,
)
from connectors.redis_streams.connection import MAX_BLOCK_MS, server_major_version
from connectors.redis_streams.entries import (
    Entry,
    EntryDecoder,
    XreadReply,
    entry_json,
    good_indices,
)
from connectors.redis_streams.split import (
    MAX_SEQ,
    EntryIdOutOfRange,
    StreamSplit,
    decode_position,
    encode_id,
    position_ms,
)
from source_support.api import BadRecord, OffsetEntry, RecordBatch, SourceEvent
from source_support.errors import SplitFailed
from source_support.formats.drift import SchemaDrift
from source_support.streams.reader import Decoding, DecodingSplitReader
from source_support.typed_redis import Arg, execute, execute_command, pipeline, time_ms

log = logging.getLogger("connectors.redis_streams")

#: How often each held stream is looked at (trimmed, deleted, replaced, read up to its stop).
CHECK_INTERVAL_S = 1.0
#: The event a reader sends the enumerator once the split of a stream that is gone or
#: was replaced is finished: the key's next generation is to be read when it exists.
STREAM_REPLACED = "stream-replaced"
METADATA_FIELDS = (pa.field("_stream", pa.string()), pa.field("_id", pa.string()))


@dataclass
class StreamState:
    """What the reader knows of one held stream besides its split."""

    split: StreamSplit
    next_check: float = 0.0
    group_ready: bool = False
    #: Entries the group has read at each position read since (Redis 7 ``ENTRIESREAD``,
    #: so ``XINFO GROUPS`` shows the lag); empty when unknown.
    entries_read: dict[int, int] = field(default_factory=dict[int, int])
    #: The stream as the last check saw it (``XINFO STREAM``), to tell what was lost if
    #: it is gone by the next one.
    last_info: Mapping[str, Any] | None = None
    #: The ``run_id`` of the Redis server at this reader's last check of the stream.
    server_id: str = ""
    #: The event to send the enumerator once this (finished) split is committed.
    event: SourceEvent | None = None


class StreamSplitReader(DecodingSplitReader[StreamSplit, EntryDecoder]):
    """Reads the held streams (Flink's ``KafkaPartitionSplitReader``): each ``fetch`` is
    one ``XREAD`` over all of them from their positions, blocking when all are caught up.

    Progress is kept by position, not by a consumer group's pending list, so a replay
    reads the same entries; the group named after the flow only mirrors the committed
    positions (``XGROUP SETID`` in ``notify_checkpoint_complete``) for Redis tools.
    """

    metadata_fields = METADATA_FIELDS

    def __init__(
        self,
        client: redis.Redis,
        decoding: Decoding[EntryDecoder],
        *,
        group: str,
        send_event: Callable[[SourceEvent], None] = lambda event: None,
    ) -> None:
        super().__init__(decoding)
        self.client = client
        self.group = group
        self.send_event = send_event
        #: Held streams by split id (the key, or the key and its generation).
        self.streams: dict[str, StreamState] = {}
        #: Streams that finished since the last commit: their group still moves to the end.
        self.finished: dict[str, StreamState] = {}
        self._redis_major: int | None = None

    # The SplitReader interface

    def handle_splits_changes(self, added: Sequence[StreamSplit], removed: Sequence[str]) -> None:
        for split in added:
            self.streams[split.split_id] = StreamState(split)
        for split_id in removed:
            self.streams.pop(split_id, None)

    def fetch(self, max_records: int, timeout_s: float) -> list[RecordBatch]:
        if not self.streams:
            return []
        batches = self._check_due()
        reading = [s for s in self.streams.values() if s.split.split_id not in {b.split_id for b in batches}]
        if not reading:
            return batches
        block_ms = None if batches or timeout_s <= 0 else min(MAX_BLOCK_MS, max(1, round(timeout_s * 1000)))
        try:
            reply, unsure = self._xread(reading, max_records, block_ms)
        except redis.ResponseError as exc:
            if "WRONGTYPE" not in str(exc):
                raise
            for state in reading:  # a key is no longer a stream: the checks say which
                state.next_check = 0.0
            return batches + self._check_due()
        by_key = {s.split.key: s for s in reading if s.split.split_id not in unsure}
        for raw_key, entries in reply:
            state = by_key.get(raw_key.decode("utf-8"))
            if state is not None and entries:
                batches.append(self._batch(state, entries))
        if unsure:
            batches += self._check_due()
        return batches

    def notify_checkpoint_complete(self, positions: Mapping[str, int]) -> None:
        """Moves the flow's consumer group on each committed stream to its checkpoint, and
        tells the enumerator of streams gone or replaced once their old split is committed
        as finished (so a crash before that commit never leaves two generations read).

        A group that is missing is not made again here: a stream that lost it may be a
        new one (deleted and created again, or its server restarted empty), which the
        next check tells apart and reports."""
        ids = [i for i in positions if i in self.streams or i in self.finished]
        pipe = pipeline(self.client, transaction=False)
        for split_id in ids:
            key = self._state(split_id).split.key
            execute_command(
                pipe, "XGROUP", "SETID", key, self.group, *self._group_id(split_id, positions[split_id])
            )
        try:
            results = execute(pipe, raise_on_error=False)
            for split_id, result in zip(ids, results, strict=True):
                if _is_error(result, "NOGROUP") and split_id in self.streams:
                    self.streams[split_id].next_check = 0.0  # the check says why it is gone
        except redis.RedisError as exc:
            log.warning("could not move consumer group %s: %s (the next commit moves it)", self.group, exc)
        for split_id in ids:
            done = self.finished.pop(split_id, None)
            if done is not None and done.event is not None:
                self.send_event(done.event)

    def describe(self, split: StreamSplit, position: int, *, line: int | None = None) -> str:
        return f"stream {split.key} entry {decode_position(position)}"

    def close(self) -> None:
        self.streams.clear()
        self.client.close()

    # Reading

    def _xread(
        self, reading: list[StreamState], max_records: int, block_ms: int | None
    ) -> tuple[XreadReply, set[str]]:
        """The XREAD's reply, and the split ids of the streams it may have read from another
        stream than the split's: those that gave entries but no longer hold the flow's
        consumer group just after the read. The group lives in the stream, and this reader
        made it there before reading, so a stream deleted and created again (or lost with a
        server that restarted empty, the client reconnecting during the read) has none:
        what came from it is left unread until a check says what it is. One ``XPENDING``
        per stream that gave entries asks, after the XREAD returned (small: this source
        leaves no entry pending)."""
        args: list[Arg] = ["XREAD", "COUNT", max_records]
        if block_ms is not None:
            args += ["BLOCK", block_ms]
        args.append("STREAMS")
        args += [s.split.key for s in reading]
        args += [decode_position(s.split.position) for s in reading]
        reply: XreadReply = execute_command(self.client, *args) or []
        by_key = {s.split.key: s for s in reading if s.group_ready}
        guarded = [
            by_key[k] for k in (raw.decode("utf-8") for raw, entries in reply if entries) if k in by_key
        ]
        if not guarded:
            return reply, set()
        pipe = pipeline(self.client, transaction=False)
        for state in guarded:
            execute_command(pipe, "XPENDING", state.split.key, self.group)
        unsure: set[str] = set()
        for state, result in zip(guarded, execute(pipe, raise_on_error=False), strict=True):
            if _is_error(result, "NOGROUP") or _is_error(result, "WRONGTYPE"):
                state.next_check = 0.0
                unsure.add(state.split.split_id)
        return reply, unsure

    def _state(self, split_id: str) -> StreamState:
        return self.streams.get(split_id) or self.finished[split_id]

    def _batch(self, state: StreamState, entries: list[Entry]) -> RecordBatch:
        split = state.split
        _check_sequences(split, entries)
        last = split.entry_position(entries[-1][0])
        finished = False
        if split.stop_position is not None and last >= split.stop_position:
            entries = entries[: bisect_right(entries, split.stop_position, key=lambda e: encode_id(e[0]))]
            last, finished = split.stop_position, True
        records, bad = self.records_of(split, entries)
        end = split.entry_position(entries[-1][0]) if entries and not finished else last
        self._advance(state, end, len(entries))
        if finished:
            self.finished[split.split_id] = self.streams.pop(split.split_id)
        # Each entry's position is encoded only if the decode saw a change (a rare batch).
        changes = self._drift_seen(_positions(entries)) if self.decoder.drift_seen else []
        return RecordBatch(
            split.split_id,
            split.offset,
            OffsetEntry(split.key, end),
            records,
            bad,
            finished,
            schema_changes=changes,
        )

    def records_of(self, split: StreamSplit, entries: list[Entry]) -> tuple[pa.Table, list[BadRecord]]:
        """The run's records of ``entries`` of ``split``'s stream, and its bad entries."""
        first_only = self.first_bad_record_only()
        try:
            table, reasons = self.decoder.decode(entries, first_only=first_only)
        except SchemaDrift as drift:  # at its entry's id
            raise self._drift_failed(drift, split, _positions(entries)) from None
        bad = [
            BadRecord(encode_id(entries[i][0]), entry_json(entries[i]), reasons[i]) for i in sorted(reasons)
        ]
        if self.metadata and not (first_only and bad):
            ids = pa.array([entries[i][0] for i in good_indices(len(entries), reasons)], pa.binary())
            table = self._with_metadata(table, [pa.array([split.key] * len(ids), pa.string()), ids])
        return table, bad

    def _advance(self, state: StreamState, end: int, count: int) -> None:
        split = state.split
        if state.entries_read:
            state.entries_read[end] = state.entries_read[max(state.entries_read)] + count
        state.split = split.at(end)

    # Checks: at most once a second per stream, and when it is added

    def _check_due(self) -> list[RecordBatch]:
        now = time.monotonic()
        due = [s for s in self.streams.values() if s.next_check <= now]
        batches: list[RecordBatch] = []
        for state in [s for s in self.streams.values() if s.split.stopped]:
            batches.append(self._finished(state))
        due = [s for s in due if s.split.split_id in self.streams]
        if not due:
            return batches
        pipe = pipeline(self.client, transaction=False)
        execute_command(pipe, "TIME")
        execute_command(pipe, "INFO", "server")
        for state in due:
            pipe.xinfo_stream(state.split.key)
            execute_command(pipe, "XINFO", "GROUPS", state.split.key)
        results = iter(execute(pipe, raise_on_error=False))
        server_ms = time_ms(next(results))
        server_info = next(results)
        server = ServerSeen(
            server_info.get("run_id", ""), server_ms - int(server_info.get("uptime_in_seconds", 0)) * 1000
        )
        for state in due:
            state.next_check = now + CHECK_INTERVAL_S
            info = next(results)
            groups = next(results)
            batch = self._check(state, info, groups, server_ms, server)
            if batch is not None:
                batches.append(batch)
        return batches

    def _check(
        self,
        state: StreamState,
        info: Mapping[str, Any] | Exception,
        groups: Sequence[GroupInfo] | Exception,
        server_ms: int,
        server: ServerSeen,
    ) -> RecordBatch | None:
        split = state.split
        if isinstance(info, Exception):
            if _is_error(info, "no such key") or _is_error(info, "WRONGTYPE"):
                return self._gone(state, server)
            raise info
        try:
            listed: Sequence[GroupInfo] = [] if isinstance(groups, Exception) else groups
            mine = next((g for g in listed if group_name(g) == self.group), None)
            replaced = replaced_stream(
                split, info, mine, state.entries_read, state.last_info, group_made=state.group_ready
            )
            if replaced is not None:
                return self._replaced(state, replaced, server)
            state.last_info, state.server_id = info, server.run_id
            if not state.group_ready or mine is None:
                self._set_up_group(state, info, mine)
            lost = lost_entries(split.position, state.entries_read, info)
            if lost is not None:
                return self._trimmed(state, lost)
            resync_entries_read(split.position, state.entries_read, info)
            if split.stop_position is not None and read_to_stop(split, info, server_ms):
                return self._finished(state)
        except EntryIdOutOfRange as exc:
            raise SplitFailed(f"stream {split.key}: {exc}", split_id=split.key) from None
        return None

    def _finished(
        self, state: StreamState, *, note: str = "", bad: list[BadRecord] | None = None
    ) -> RecordBatch:
        split = state.split
        self.finished[split.split_id] = self.streams.pop(split.split_id)
        return RecordBatch(
            split.split_id, split.offset, split.offset, self._empty(), bad or [], finished=True, note=note
        )

    def _gone(self, state: StreamState, server: ServerSeen) -> RecordBatch:
        """The stream was deleted (or its server restarted without it): its split ends,
        what it had not read is reported as lost, and the key's next stream, whenever it
        appears, is read as a new generation."""
        split = state.split
        replaced = StreamReplaced.gone(
            split, state.last_info, state.entries_read, restarted=server.restarted_since(state)
        )
        note = replaced.note(split)
        log.warning("%s", note)
        return self._end_generation(state, replaced, note)

    def _replaced(self, state: StreamState, replaced: StreamReplaced, server: ServerSeen) -> RecordBatch:
        """The key holds another stream than the one the split read: the old split ends
        (its unread entries are reported as lost) and the new stream is read from its
        start as the next generation."""
        split = state.split
        if server.restarted_since(state):
            replaced = replaced.on_restarted_server()
        note = replaced.note(split)
        log.warning("%s", note)
        return self._end_generation(state, replaced, note)

    def _end_generation(self, state: StreamState, replaced: StreamReplaced, note: str) -> RecordBatch:
        split = state.split
        bad: list[BadRecord] = []
        if replaced.lost:
            if self.first_bad_record_only():
                self.streams.pop(split.split_id, None)
                raise SplitFailed(
                    f"{note}; set skip_errors to go on past lost entries", split_id=split.split_id
                )
            bad = [BadRecord(split.position, "", replaced.lost_words(split))]
        state.event = SourceEvent(
            STREAM_REPLACED, {"key": split.key, "generation": split.generation, "exists": replaced.exists}
        )
        return self._finished(state, note=note, bad=bad)

    def _trimmed(self, state: StreamState, lost: LostEntries) -> RecordBatch:
        split = state.split
        reason = f"stream {split.key}: {lost.describe(split.position)} were trimmed before they were read"
        if self.first_bad_record_only():
            self.streams.pop(split.split_id, None)
            raise SplitFailed(
                f"{reason}; set skip_errors to go on past lost entries", split_id=split.split_id
            )
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
        return RecordBatch(split.split_id, split.offset, end, self._empty(), bad)

    # The consumer group

    def _set_up_group(self, state: StreamState, info: Mapping[str, Any], mine: Any | None) -> None:
        """Creates the flow's group at the split's position unless it exists, and learns
        how many entries it has read (Redis 7) so the group's lag is right."""
        position = state.split.position
        if state.group_ready:  # it was there: someone removed it from a stream that holds the split's entries
            log.warning(
                "consumer group %s of stream %s was removed; it is made again", self.group, state.split.key
            )
        state.group_ready = True
        if not state.entries_read:
            read = entries_read_at(position, info, mine) if self._redis_major_version() >= 7 else None
            if read is not None:
                state.entries_read = {position: read}
        if mine is None:
            made = self._create_groups({state.split.key: position}, {state.split.key: state.split.split_id})
            state.group_ready = made[state.split.key]

    def _create_groups(self, positions: Mapping[str, int], split_ids: Mapping[str, str]) -> dict[str, bool]:
        """Creates the group on existing streams only (never MKSTREAM: a flow does not
        create streams); one that exists already is left as it is. Says, for each stream,
        whether the group is there: a stream whose group this reader could not make is
        read without it (and without the checks the group allows)."""
        pipe = pipeline(self.client, transaction=False)
        for key, position in positions.items():
            execute_command(
                pipe, "XGROUP", "CREATE", key, self.group, *self._group_id(split_ids[key], position)
            )
        results = execute(pipe, raise_on_error=False)
        made: dict[str, bool] = {}
        for key, result in zip(positions, results, strict=True):
            made[key] = not isinstance(result, Exception) or _is_error(result, "BUSYGROUP")
            if not made[key]:
                log.warning("could not make consumer group %s on stream %s: %s", self.group, key, result)
        return made

    def _group_id(self, split_id: str, position: int) -> list[Arg]:
        state = self.streams.get(split_id) or self.finished.get(split_id)
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


def _positions(entries: list[Entry]) -> list[int]:
    """The positions of ``entries``, in order (their ids checked by ``_check_sequences``)."""
    return [encode_id(entry_id) for entry_id, _ in entries]


def _check_sequences(split: StreamSplit, entries: list[Entry]) -> None:
    """Fails the split on an entry id whose sequence a position cannot hold (only ids
    given explicitly by a producer can have one)."""
    ids = pa.array([e[0] for e in entries], pa.binary()).cast(pa.string())
    seqs = pc.list_element(pc.split_pattern(ids, "-", max_splits=1), 1).cast(pa.int64())
    too_large = np.flatnonzero(seqs.to_numpy() > MAX_SEQ)
    if len(too_large):
        split.entry_position(entries[int(too_large[0])][0])  # raises SplitFailed naming the id


@dataclass(frozen=True)
class ServerSeen:
    """The Redis server a check looked at: its ``run_id`` and when it started (its uptime
    is in whole seconds, so the start is known to a second)."""

    run_id: str
    started_ms: int

    def restarted_since(self, state: StreamState) -> bool:
        """Whether the server restarted since the split's stream was last seen: another
        ``run_id`` than at this reader's last check of it; for a reader that had not
        checked it yet, a server that started after the split's last entry read was
        added, within the second the uptime leaves open (a split that read nothing yet
        says nothing of a restart)."""
        if state.server_id:
            return state.server_id != self.run_id
        split = state.split
        return split.progressed and self.started_ms + 1000 > position_ms(split.position)


def _is_error(reply: Any, text: str) -> bool:
    return isinstance(reply, Exception) and text.lower() in str(reply).lower()
