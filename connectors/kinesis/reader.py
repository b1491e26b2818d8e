"""Reads every held shard in turn with GetRecords, and tells the enumerator once a shard
is read to its end (its children may then be read) and, now and then, how far it got."""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa

from connectors.aws.session import AWS_ERRORS, aws_error_reason
from connectors.kinesis.shards import (
    get_records,
    is_expired,
    is_not_found,
    is_throttled,
    next_iterator,
    shard_iterator,
)
from connectors.kinesis.split import AFTER_SEQUENCE_NUMBER, Anchor, ShardSplit
from source_support.api import BadRecord, OffsetEntry, RecordBatch, SourceEvent
from source_support.errors import SplitFailed
from source_support.formats.drift import SchemaDrift
from source_support.formats.messages import MessageDecoder
from source_support.streams.reader import Decoding, DecodingSplitReader

if TYPE_CHECKING:
    from mypy_boto3_kinesis import KinesisClient
    from mypy_boto3_kinesis.type_defs import RecordTypeDef

log = logging.getLogger("connectors.kinesis")

METADATA_FIELDS = (
    pa.field("_shard", pa.string()),
    pa.field("_seq", pa.string()),  # up to 129 digits: more than any integer column holds
    pa.field("_ts", pa.timestamp("us", tz="UTC")),
    pa.field("_partition_key", pa.string()),
)
#: A reader's event: shard ``shard`` is read to its end and committed there.
SHARD_FINISHED = "shard-finished"
#: A reader's event: ``position`` of ``shard`` is committed and is record ``seq``.
SHARD_PROGRESS = "shard-progress"
#: How often a reader reports a shard's progress (a new anchor) at most.
PROGRESS_INTERVAL_S = 10.0
#: How long a shard that had nothing waits before it is asked again (Kinesis allows five
#: GetRecords calls a second per shard).
IDLE_WAIT_S = 0.25
#: The longest wait after the endpoint throttled or did not answer.
MAX_BACKOFF_S = 10.0
#: A ``[stop]`` time is reached by a caught-up shard once the clock is this far past it
#: (a record's arrival time is approximate).
STOP_SLACK_MS = 1_000
#: Resume points kept per shard (position -> sequence number).
RESUME_POINTS_PER_SHARD = 64


class ResumePoints:
    """The sequence number at positions of shards this process read, so a reader of a
    later slice gets its iterator right after its checkpoint instead of skipping from the
    anchor. Positions count from a split's ``origin``, which is part of the key."""

    def __init__(self) -> None:
        self._points: dict[tuple[str, str, str, str], OrderedDict[int, str]] = {}
        self._lock = threading.Lock()

    def remember(self, key: tuple[str, str, str, str], position: int, seq: str) -> None:
        with self._lock:
            points = self._points.setdefault(key, OrderedDict())
            points[position] = seq
            while len(points) > RESUME_POINTS_PER_SHARD:
                points.popitem(last=False)

    def find(self, key: tuple[str, str, str, str], position: int) -> str | None:
        with self._lock:
            points = self._points.get(key)
            return points.get(position) if points is not None else None


resume_points = ResumePoints()


@dataclass
class HeldShard:
    """A shard this reader reads, and where its iterator stands."""

    split: ShardSplit
    iterator: str | None = None
    #: The sequence number of the record at ``split.position`` (None: not known here).
    last_seq: str | None = None
    #: Records still to pass over before ``split.position`` (read from an older anchor).
    skip: int = 0
    next_try: float = 0.0
    backoff_s: float = 0.0
    progress_sent: float = 0.0


class KinesisSplitReader(DecodingSplitReader[ShardSplit, MessageDecoder]):
    """Reads the held shards (Flink's ``PollingKinesisShardSplitReader``): each ``fetch``
    calls GetRecords once on every shard that is due, from where its iterator stands.

    A shard's iterator is made from its last record read when known, else from its
    split's anchor (skipping up to the position). A throttled call (and an endpoint that
    does not answer) backs off and tries again from the same place; an expired iterator
    is made again from the last record read. A shard whose GetRecords returns no next
    iterator is closed and read to its end: its last batch finishes the split."""

    metadata_fields = METADATA_FIELDS

    def __init__(
        self,
        client: Callable[[], KinesisClient],
        decoding: Decoding[MessageDecoder],
        *,
        endpoint: str,
        send_event: Callable[[SourceEvent], None] = lambda event: None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(decoding)
        self.client = client
        self.endpoint = endpoint
        self.send_event = send_event
        self.clock = clock
        self.held: dict[str, HeldShard] = {}
        #: Shards read to their end whose last batch is not committed yet.
        self.ended: set[str] = set()

    # The SplitReader interface

    def handle_splits_changes(self, added: Sequence[ShardSplit], removed: Sequence[str]) -> None:
        for split in added:
            self.held[split.split_id] = HeldShard(split)
        for split_id in removed:  # a shard that ended stays in ``ended`` until its commit
            self.held.pop(split_id, None)

    def fetch(self, max_records: int, timeout_s: float) -> list[RecordBatch]:
        batches: list[RecordBatch] = []
        for state in list(self.held.values()):
            if state.next_try <= time.monotonic():
                batch = self._read(state, max_records)
                if batch is not None:
                    batches.append(batch)
        if not batches and self.held:
            wait = min(s.next_try for s in self.held.values()) - time.monotonic()
            time.sleep(max(0.0, min(timeout_s, wait)))
        return batches

    def notify_checkpoint_complete(self, positions: Mapping[str, int]) -> None:
        """Tells the enumerator of each shard committed at its end (its children may be
        read now), and of each other shard's committed position every
        ``PROGRESS_INTERVAL_S`` (the anchor a reader elsewhere would resume from)."""
        now = time.monotonic()
        for split_id, position in positions.items():
            if split_id in self.ended:
                self.ended.discard(split_id)
                self.send_event(SourceEvent(SHARD_FINISHED, {"shard": split_id}))
                continue
            state = self.held.get(split_id)
            if state is None or now - state.progress_sent < PROGRESS_INTERVAL_S:
                continue
            seq = resume_points.find(self._key(state.split), position)
            if seq is not None:
                state.progress_sent = now
                self.send_event(
                    SourceEvent(SHARD_PROGRESS, {"shard": split_id, "position": position, "seq": seq})
                )

    def describe(self, split: ShardSplit, position: int, *, line: int | None = None) -> str:
        return f"stream {split.stream} shard {split.shard_id} record {position}"

    def close(self) -> None:
        self.held.clear()

    # Reading

    def _key(self, split: ShardSplit) -> tuple[str, str, str, str]:
        return (self.endpoint, split.stream, split.shard_id, split.origin)

    def _read(self, state: HeldShard, max_records: int) -> RecordBatch | None:
        split = state.split
        try:
            if state.iterator is None:
                state.iterator = self._iterator(state)
            answer = get_records(self.client(), state.iterator, state.skip or max_records)
        except AWS_ERRORS as exc:
            self._failed_call(state, exc)
            return None
        state.backoff_s = 0.0
        records = answer.get("Records", [])
        following = next_iterator(answer)
        state.iterator = following
        if state.skip:
            passed = records[: state.skip]
            state.skip -= len(passed)
            if passed:
                state.last_seq = passed[-1]["SequenceNumber"]
            records = records[len(passed) :]
            if state.skip and following is None:
                raise SplitFailed(
                    f"stream {split.stream} shard {split.shard_id} ended {state.skip} record(s) before "
                    f"position {split.position}: records were trimmed (retention) since it was read",
                    split_id=split.split_id,
                )
            if state.skip:
                return None
        if not records:
            return self._idle(state, following is None, answer.get("MillisBehindLatest"))
        return self._batch(state, records, following is None)

    def _iterator(self, state: HeldShard) -> str:
        split = state.split
        seq = state.last_seq or resume_points.find(self._key(split), split.position)
        anchor = Anchor(AFTER_SEQUENCE_NUMBER, seq, split.position) if seq is not None else split.anchor
        if anchor.position > split.position:
            raise SplitFailed(
                f"stream {split.stream} shard {split.shard_id}: its anchor is past position {split.position}",
                split_id=split.split_id,
            )
        state.skip = split.position - anchor.position
        return shard_iterator(self.client(), split.stream, split.shard_id, anchor)

    def _failed_call(self, state: HeldShard, exc: BaseException) -> None:
        split = state.split
        if is_expired(exc):  # a new iterator from the last record read, at once
            state.iterator = None
            return
        if is_not_found(exc):
            raise SplitFailed(
                f"stream {split.stream} shard {split.shard_id} is gone: {aws_error_reason(exc)}",
                split_id=split.split_id,
            ) from None
        state.backoff_s = min(MAX_BACKOFF_S, max(IDLE_WAIT_S, state.backoff_s * 2))
        state.next_try = time.monotonic() + state.backoff_s
        if not is_throttled(exc):
            state.iterator = None  # the endpoint went away: its iterators may not survive it
            log.warning(
                "shard %s: %s; tried again in %.1f s", split.shard_id, aws_error_reason(exc), state.backoff_s
            )

    def _idle(self, state: HeldShard, ended: bool, behind: int | None) -> RecordBatch | None:
        """Nothing came: the shard ended (closed and read to its end), a ``[stop]`` time
        was passed with nothing left before it, or nothing is there yet."""
        split = state.split
        past_stop = (
            split.stop_ms is not None and behind == 0 and self.clock() * 1000 > split.stop_ms + STOP_SLACK_MS
        )
        if ended or past_stop:
            return self._finish(state, [])
        state.next_try = time.monotonic() + (IDLE_WAIT_S if not behind else 0.0)
        return None

    def _batch(self, state: HeldShard, records: list[RecordTypeDef], ended: bool) -> RecordBatch:
        split = state.split
        stop_ms = split.stop_ms
        if stop_ms is not None:
            late = [i for i, r in enumerate(records) if _arrival_ms(r) > stop_ms]
            if late:
                records, ended = records[: late[0]], True
        if ended:
            return self._finish(state, records)
        state.next_try = 0.0
        return self._records_batch(state, records, finished=False)

    def _finish(self, state: HeldShard, records: list[RecordTypeDef]) -> RecordBatch:
        batch = self._records_batch(state, records, finished=True)
        self.held.pop(state.split.split_id, None)
        self.ended.add(state.split.split_id)
        return batch

    def _records_batch(
        self, state: HeldShard, records: list[RecordTypeDef], *, finished: bool
    ) -> RecordBatch:
        split = state.split
        end = split.position + len(records)
        table, bad = self._records(split, records)
        changes = self._drift_seen(range(split.position + 1, end + 1)) if records else []
        if records:
            state.last_seq = records[-1]["SequenceNumber"]
            resume_points.remember(self._key(split), end, state.last_seq)
        state.split = split.at(end)
        return RecordBatch(
            split.split_id,
            split.offset,
            OffsetEntry(split.split_id, end),
            table,
            bad,
            finished,
            schema_changes=changes,
        )

    def records_of(self, split: ShardSplit, records: list[RecordTypeDef]) -> tuple[pa.Table, list[BadRecord]]:
        """The run's records of ``records`` read after ``split``'s position, and its bad
        ones (each at its record's position, its sequence number in the reason);
        SplitFailed on a schema change under ``fail``."""
        return self._records(split, records)

    def _records(self, split: ShardSplit, records: list[RecordTypeDef]) -> tuple[pa.Table, list[BadRecord]]:
        if not records:
            return self._empty(), []
        first_only = self.first_bad_record_only()
        try:
            table, reasons = self.decoder.decode([r["Data"] for r in records], first_only=first_only)
        except SchemaDrift as drift:
            positions = range(split.position + 1, split.position + len(records) + 1)
            raise self._drift_failed(drift, split, positions) from None
        bad = [
            BadRecord(
                split.position + i + 1,
                records[i]["Data"].decode("utf-8", "replace"),
                f"sequence number {records[i]['SequenceNumber']}: {reasons[i]}",
            )
            for i in sorted(reasons)
        ]
        if self.metadata and not (first_only and bad):
            kept = [r for i, r in enumerate(records) if i not in reasons]
            columns = (
                pa.array([split.shard_id] * len(kept), pa.string()),
                pa.array([r["SequenceNumber"] for r in kept], pa.string()),
                pa.array([_arrival_ms(r) * 1000 for r in kept], pa.int64()),
                pa.array([r.get("PartitionKey", "") for r in kept], pa.string()),
            )
            table = self._with_metadata(table, columns)
        return table, bad


def _arrival_ms(record: RecordTypeDef) -> int:
    stamp = record.get("ApproximateArrivalTimestamp")
    return int(stamp.timestamp() * 1000) if stamp is not None else 0
