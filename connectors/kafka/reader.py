"""Reads every held partition through one consumer assigned exactly those partitions at
their checkpointed offsets (Flink's ``KafkaPartitionSplitReader``), and commits offsets to
the flow's consumer group only once a checkpoint past them is committed."""

from __future__ import annotations

import bisect
import hashlib
import logging
import operator
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from itertools import repeat
from typing import Any

import numpy as np
import pyarrow as pa
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from connectors.kafka.brokers import TRANSIENT
from connectors.kafka.connection import (
    REQUEST_TIMEOUT_S,
    error_reason,
    keep_consumer,
    new_consumer,
    take_consumer,
)
from connectors.kafka.outages import broker_log
from connectors.kafka.resets import PARTITION_RESET, Reset, ResetWatch
from connectors.kafka.split import PartitionSplit, partition_split_id, split_place
from source_support.api import BadRecord, OffsetEntry, RecordBatch, SourceEvent
from source_support.errors import SplitFailed
from source_support.formats.drift import SchemaDrift
from source_support.formats.messages import MessageDecoder
from source_support.streams.reader import Decoding, DecodingSplitReader

log = logging.getLogger("connectors.kafka")

METADATA_FIELDS = (
    pa.field("_topic", pa.string()),
    pa.field("_partition", pa.int32()),
    pa.field("_offset", pa.int64()),
    pa.field("_ts", pa.timestamp("us", tz="UTC")),
    pa.field("_key", pa.string()),
)
#: How often an idle split with a stop asks the brokers whether anything is left.
CHECK_INTERVAL_S = 1.0
#: The longest one consume call blocks, so ``wake_up`` is heard soon.
CONSUME_SLICE_S = 0.25
#: How often offsets the group has not confirmed are committed again (a commit sent while
#: the brokers were away is lost, and a split with nothing new would never commit again).
COMMIT_RETRY_S = 2.0
#: Offsets committed to a group and not yet confirmed, by (servers, group), then split id:
#: kept across the reader instances of a process (a reader lives one time slice), so a
#: commit lost while the brokers were away is sent again by the next slice's reader.
_UNCONFIRMED: dict[tuple[str, str], dict[str, int]] = {}
#: The most messages one consume call takes.
MAX_CONSUME = 50_000
_NAME_CHARS = re.compile(r"[^A-Za-z0-9._-]")
#: Errors that end a split: its records are gone (retention) or its topic is.
_LOST = {KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE}  # pyright: ignore[reportPrivateUsage]
_GONE = {
    KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError._UNKNOWN_PARTITION,  # pyright: ignore[reportPrivateUsage]
    KafkaError._UNKNOWN_TOPIC,  # pyright: ignore[reportPrivateUsage]
}


def group_name(flow: str) -> str:
    """The consumer group the flow's offsets are committed to (for monitoring only)."""
    digest = hashlib.sha256(flow.encode()).hexdigest()[:8]
    return f"adf-{_NAME_CHARS.sub('_', flow)[:100] or 'flow'}-{digest}"


@dataclass
class HeldPartition:
    """A split this reader reads, and the messages fetched for it not yet handed out, with
    the offset of each (``offsets``: strictly increasing)."""

    split: PartitionSplit
    pending: list[Message] = field(default_factory=list[Message])
    offsets: list[int] = field(default_factory=list[int])
    next_check: float = 0.0
    #: Whether its topic's id was compared with the split's before its first fetch.
    id_checked: bool = False
    #: What the brokers said when a fetch at the position was out of range (None: not so).
    out_of_range: str | None = None
    #: Whether the high watermark the consumer last fetched for the partition is about this
    #: assignment: not for a partition the consumer had before (its figure is from then)
    #: until messages of this assignment come.
    fetched_since_assigned: bool = True

    @property
    def partition(self) -> TopicPartition:
        return TopicPartition(self.split.topic, self.split.partition, self.split.position)

    def take(self, messages: list[Message]) -> bool:
        """Adds a partition's ``messages`` (in the order fetched) past what it holds;
        whether any was added. A message before that (prefetched for an earlier
        assignment of the partition) is dropped."""
        # No step per message in Python: librdkafka's calls through map, numpy for the rest
        # (a message here is no error: it has an offset).
        found = np.fromiter(map(Message.offset, messages), np.int64, len(messages))
        expected = self.offsets[-1] + 1 if self.offsets else self.split.position
        if found[0] >= expected and (len(found) == 1 or bool(np.all(found[1:] > found[:-1]))):
            self.pending += messages
            self.offsets += found.tolist()
            self.fetched_since_assigned = True
            return True
        took = False
        for message, offset in zip(messages, found.tolist(), strict=True):
            if offset >= expected:
                self.pending.append(message)
                self.offsets.append(offset)
                expected, took = offset + 1, True
        self.fetched_since_assigned |= took
        return took

    def head(self, count: int) -> tuple[list[Message], list[int]]:
        """Hands out the first ``count`` pending messages and their offsets."""
        messages, offsets = self.pending[:count], self.offsets[:count]
        del self.pending[:count], self.offsets[:count]
        return messages, offsets


class _CommitAnswers:
    """Hands librdkafka's answers to commits to the reader that uses the consumer now (a
    kept consumer outlives the reader that made it)."""

    def __init__(self) -> None:
        self.reader: KafkaPartitionReader | None = None

    def __call__(self, error: KafkaError | None, partitions: list[TopicPartition]) -> None:
        if self.reader is not None:
            self.reader.commit_confirmed(error, partitions)


class KafkaPartitionReader(DecodingSplitReader[PartitionSplit, MessageDecoder]):
    """Reads the held partitions all at once: each ``fetch`` consumes what the brokers have
    for any of them (waiting up to its timeout for the first) and returns a batch per split.

    Progress is the offset in the checkpoint: a split added is assigned at its position
    (``incremental_assign``), a message before it (prefetched for an earlier assignment) is
    dropped, and offsets go to Kafka only after the commit of them.

    A reader lives one time slice; its consumer is kept open for the next slice of the same
    reader in this process (``keep_consumer``), with the partitions it was assigned and the
    messages it fetched. The next reader goes on from there only for a split whose
    checkpoint is the position the kept consumer reached; any other split is assigned
    again at its checkpoint, as a new consumer would be, and a kept partition no split
    asks for is unassigned."""

    metadata_fields = METADATA_FIELDS

    def __init__(
        self,
        servers: str,
        decoding: Decoding[MessageDecoder],
        *,
        flow: str,
        subtask: int | None = None,
        on_reset: str = "fail",
        send_event: Callable[[SourceEvent], None] = lambda event: None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(decoding)
        self.servers = servers
        self.flow = flow
        #: The reader's subtask, under which its consumer is kept between slices (None:
        #: never kept).
        self.subtask = subtask
        #: What a partition whose offsets went backwards does (``source.on_reset``).
        self.on_reset = on_reset
        self.resets = ResetWatch(
            lambda: self.consumer, servers=servers, answered=broker_log(servers).answered
        )
        self.send_event = send_event
        self.clock = clock
        #: Held splits by ``topic:partition`` (one generation of a partition at a time).
        self.held: dict[str, HeldPartition] = {}
        #: The events to send once the end of a reset split is committed, by split id.
        self._restarting: dict[str, SourceEvent] = {}
        self._consumer: Consumer | None = None
        self._answers = _CommitAnswers()
        #: What the kept consumer holds that no split has asked for yet.
        self._kept: dict[str, HeldPartition] = {}
        #: The splits whose partitions the consumer has been assigned in its life.
        self._ever_assigned: set[str] = set()
        if subtask is not None and (kept := take_consumer(servers, group_name(flow), subtask)) is not None:
            self._consumer, (self._answers, self._kept, self._ever_assigned) = kept.consumer, kept.state
        self._answers.reader = self
        self._woken = threading.Event()
        #: Offsets committed to the group whose commit it has not confirmed, by split id.
        self._unconfirmed = _UNCONFIRMED.setdefault((servers, group_name(flow)), {})
        self._last_commit = float("-inf")
        #: Whether a commit awaits librdkafka's answer.
        self._in_flight = False

    @property
    def consumer(self) -> Consumer:
        if self._consumer is None:
            self._consumer = new_consumer(
                self.servers, group_id=group_name(self.flow), on_commit=self._answers
            )
        return self._consumer

    # The SplitReader interface

    def handle_splits_changes(self, added: Sequence[PartitionSplit], removed: Sequence[str]) -> None:
        assign: list[HeldPartition] = []
        stale: list[HeldPartition] = []
        for split in added:
            if split.place in self.held:
                continue
            kept = self._kept.pop(split.place, None)
            if (
                kept is not None
                and kept.split.split_id == split.split_id
                and kept.split.position == split.position
            ):
                # The kept consumer reached the checkpoint: it goes on from there.
                kept.split, kept.next_check = split, 0.0
                self.held[split.place] = kept
                continue
            if kept is not None:
                stale.append(kept)  # assigned again at the checkpoint, as a new consumer would be
            state = self.held[split.place] = HeldPartition(
                split, fetched_since_assigned=split.place not in self._ever_assigned
            )
            self._ever_assigned.add(split.place)
            assign.append(state)
        stale += self._kept.values()
        self._kept = {}
        if stale:
            self._unassign(stale)
        if assign:
            self.consumer.incremental_assign([s.partition for s in assign])
        gone = [
            self.held.pop(split_place(split_id))
            for split_id in removed
            if (held := self.held.get(split_place(split_id))) is not None and held.split.split_id == split_id
        ]
        for split_id in removed:  # its next reader commits it; an old offset must not win
            self._unconfirmed.pop(split_place(split_id), None)
            self.resets.forget(split_id)
        if gone:
            self._unassign(gone)

    def wake_up(self) -> None:
        self._woken.set()

    def fetch(self, max_records: int, timeout_s: float) -> list[RecordBatch]:
        if self._kept:  # a kept partition that no split asked for
            self._unassign(list(self._kept.values()))
            self._kept = {}
        if self._unconfirmed and (not self._in_flight or self.clock() - self._last_commit >= COMMIT_RETRY_S):
            self._commit_unconfirmed()
        if not self.held:
            return []
        stopped = [s for s in self.held.values() if s.split.stopped]
        if stopped:
            return [self._finish(s) for s in stopped]
        replaced = self._replaced_topics()
        if replaced:
            return replaced
        if not any(s.pending for s in self.held.values()):
            self._consume(max_records, timeout_s)
        batches: list[RecordBatch] = []
        for state in list(self.held.values()):
            batch = self._batch(state, max_records) if state.pending else self._check(state)
            if batch is not None:
                batches.append(batch)
        return batches

    def notify_checkpoint_complete(self, positions: Mapping[str, int]) -> None:
        """Commits each committed split's offset to the flow's consumer group, so
        ``kafka-consumer-groups --describe`` shows the flow's lag; never read back. An
        offset the group does not confirm is committed again (``COMMIT_RETRY_S``).

        The end of a split that was reset is not committed to the group (it is an offset of
        the old log); the enumerator is told to read the partition's next generation."""
        restarted = [self._restarting.pop(i) for i in list(positions) if i in self._restarting]
        self._unconfirmed.update(
            {split_place(i): p for i, p in positions.items() if not _ended_by_reset(i, restarted)}
        )
        self._commit_unconfirmed()
        for event in restarted:
            self.send_event(event)

    def _commit_unconfirmed(self) -> None:
        self._last_commit = self.clock()
        self._in_flight = True
        offsets = [
            _partition_of(split_id, position) for split_id, position in list(self._unconfirmed.items())
        ]
        if not offsets:
            return
        try:
            self.consumer.commit(offsets=offsets, asynchronous=True)
        except TRANSIENT as exc:
            log.warning("could not commit offsets to Kafka: %s (committed again later)", error_reason(exc))

    def commit_confirmed(self, error: KafkaError | None, partitions: list[TopicPartition]) -> None:
        """librdkafka's answer to a commit (served in ``consume``): what it confirms is done."""
        self._in_flight = False
        if error is not None:
            return
        broker_log(self.servers).answered()
        for tp in partitions:
            split_id = partition_split_id(tp.topic or "", tp.partition)
            if tp.error is None and self._unconfirmed.get(split_id, -1) <= tp.offset:
                self._unconfirmed.pop(split_id, None)

    def describe(self, split: PartitionSplit, position: int, *, line: int | None = None) -> str:
        return f"topic {split.topic} partition {split.partition} offset {position}"

    def close(self) -> None:
        """Keeps the consumer for the next slice (``keep_consumer``) while it holds
        partitions, else closes it."""
        held, self.held = self.held, {}
        held.update(self._kept)
        self._kept = {}
        consumer, self._consumer = self._consumer, None
        self._answers.reader = None
        if consumer is not None and held and self.subtask is not None:
            keep_consumer(
                self.servers,
                group_name(self.flow),
                self.subtask,
                consumer,
                (self._answers, held, self._ever_assigned),
            )
        elif consumer is not None:
            try:
                consumer.close()
            except TRANSIENT:  # a consumer of brokers that are gone
                log.debug("closing the consumer failed", exc_info=True)

    # Reading

    def _consume(self, max_records: int, timeout_s: float) -> None:
        """Takes what the brokers have for the held partitions into their ``pending``,
        waiting up to ``timeout_s`` for the first message (less when woken)."""
        self._woken.clear()
        deadline = time.monotonic() + max(timeout_s, 0.0)
        wanted = min(MAX_CONSUME, max_records * len(self.held))
        while True:
            wait = max(0.0, min(CONSUME_SLICE_S, deadline - time.monotonic()))
            try:
                messages = self._receive(wanted, wait)
            except KafkaException as exc:
                broker_log(self.servers).lost(error_reason(exc))
                return
            if self._take(messages) or self._woken.is_set() or time.monotonic() >= deadline:
                return

    def _receive(self, wanted: int, wait: float) -> list[Message]:
        """What librdkafka holds now, up to ``wanted`` messages; if it holds none, what
        arrives first within ``wait`` and what came with it. (A batch consume with a
        timeout waits until the whole batch is there: a record would wait for others.)"""
        messages = self.consumer.consume(num_messages=wanted, timeout=0)
        if messages:
            return messages
        first = self.consumer.poll(wait)
        if first is None:
            return []
        return [first, *self.consumer.consume(num_messages=wanted - 1, timeout=0)] if wanted > 1 else [first]

    def _take(self, messages: list[Message]) -> bool:
        """Sorts ``messages`` into their splits; whether any was a record. A consume
        returns each partition's messages in runs: each run goes to its split at once."""
        errors = list(map(Message.error, messages))
        # ``is``, not ``==``: KafkaError compares itself with None as with an error code,
        # and leaves a TypeError pending (the next call then fails with a SystemError).
        if any(map(operator.is_not, errors, repeat(None))):
            for message, error in zip(messages, errors, strict=True):
                if error is not None:
                    self._error(message, error)
            messages = [m for m, error in zip(messages, errors, strict=True) if error is None]
        if not messages:
            return False
        partitions = np.fromiter(map(Message.partition, messages), np.int64, len(messages))
        cuts = np.flatnonzero(partitions[1:] != partitions[:-1]) + 1
        if len({s.split.topic for s in self.held.values()}) > 1:
            topics = list(map(Message.topic, messages))
            changes = [i for i in range(1, len(topics)) if topics[i] != topics[i - 1]]
            cuts = np.union1d(cuts, np.array(changes, np.int64))
        took = False
        for start, end in zip([0, *cuts.tolist()], [*cuts.tolist(), len(messages)], strict=True):
            first = messages[start]
            state = self.held.get(partition_split_id(first.topic() or "", first.partition() or 0))
            # None: a partition dropped since it was fetched
            if state is not None and state.take(messages[start:end]):
                took = True
        return took

    def _error(self, message: Message, error: KafkaError) -> None:
        code = error.code()
        topic, partition = message.topic(), message.partition()
        split_id = (
            partition_split_id(topic, partition) if topic is not None and partition is not None else None
        )
        state = self.held.get(split_id) if split_id is not None else None
        if state is not None and code in _LOST:
            # The position is outside the partition's log: ``_check`` asks why (a reset).
            state.out_of_range = error.str()
            return
        if state is not None and code in _GONE:
            raise SplitFailed(
                f"topic {state.split.topic} partition {state.split.partition} is gone (the split is at "
                f"offset {state.split.position}): {error.str()}",
                split_id=state.split.split_id,
            )
        # Brokers away, a leader moving: librdkafka reconnects and fetches on by itself.
        broker_log(self.servers).lost(error.str())

    def _batch(self, state: HeldPartition, max_records: int) -> RecordBatch:
        split = state.split
        messages, offsets = state.head(max_records)
        finished = False
        split, messages, offsets, passed = _from_start_time(split, messages, offsets)
        state.split = split
        if split.stop_time_ms is not None:
            late = next(
                (i for i, m in enumerate(messages) if _timestamp_ms(m) > (split.stop_time_ms or 0)), None
            )
            if late is not None:
                split = state.split = replace(split, stop_offset=offsets[late], stop_time_ms=None)
        stop = split.stop_offset
        if stop is not None:
            before = bisect.bisect_left(offsets, stop)
            # A record at or past the stop: nothing before it is left (offsets only grow).
            finished = before < len(messages)
            messages, offsets = messages[:before], offsets[:before]
        end = offsets[-1] + 1 if offsets else max(split.position, passed)
        if stop is not None and (finished or end >= stop):
            finished, end = True, max(stop, split.position)
        records, bad = self._records(split, messages, offsets)
        changes = self._drift_seen(offsets)
        state.split = split.at(end)
        if finished:
            self._drop(state)
        return RecordBatch(
            split.split_id,
            split.offset,
            OffsetEntry(split.split_id, end),
            records,
            bad,
            finished,
            schema_changes=changes,
        )

    def records_of(
        self, split: PartitionSplit, messages: list[Message], offsets: list[int]
    ) -> tuple[pa.Table, list[BadRecord]]:
        """The run's records of ``split``'s ``messages`` (at ``offsets``), and its bad
        messages; SplitFailed on a schema change under ``fail``."""
        return self._records(split, messages, offsets)

    def _records(
        self, split: PartitionSplit, messages: list[Message], offsets: list[int]
    ) -> tuple[pa.Table, list[BadRecord]]:
        first_only = self.first_bad_record_only()
        bodies = list(map(Message.value, messages))
        try:
            table, reasons = self.decoder.decode(bodies, first_only=first_only)
        except SchemaDrift as drift:
            raise self._drift_failed(drift, split, offsets) from None
        bad = [
            BadRecord(offsets[i], (bodies[i] or b"").decode("utf-8", "replace"), reasons[i])
            for i in sorted(reasons)
        ]
        if self.metadata and not (first_only and bad):
            kept = [i for i in range(len(messages)) if i not in reasons]
            stamps = [_timestamp_ms(messages[i]) for i in kept]
            columns: list[pa.Array[Any]] = [
                pa.array([messages[i].topic() for i in kept], pa.string()),
                pa.array([messages[i].partition() for i in kept], pa.int32()),
                pa.array([offsets[i] for i in kept], pa.int64()),
                pa.array([ms * 1000 if ms >= 0 else None for ms in stamps], pa.int64()),
                pa.array([_key_text(messages[i].key()) for i in kept], pa.string()),
            ]
            table = self._with_metadata(table, columns)
        return table, bad

    def _check(self, state: HeldPartition) -> RecordBatch | None:
        """An idle split: failed if its partition went back below its position
        (``ResetWatch``); with a stop, finished once the brokers have nothing for it before
        the stop (its position reached the stop offset, or, for a stop time that has passed,
        the partition's end)."""
        split = state.split
        reset = self.resets.check(split, fetched=state.fetched_since_assigned)
        if reset is None and state.out_of_range is not None:
            reset = self.resets.out_of_range(split)
            if reset is None and self.on_reset == "fail":
                self._drop(state)
                raise SplitFailed(
                    f"topic {split.topic} partition {split.partition}: offset {split.position} "
                    f"is no longer kept (deleted by retention?): {state.out_of_range}",
                    split_id=split.split_id,
                )
        if reset is not None:
            return self._reset(state, reset)
        if split.stop_offset is None and split.stop_time_ms is None:
            return None
        now = time.monotonic()
        if state.next_check > now:
            return None
        state.next_check = now + CHECK_INTERVAL_S
        try:
            if split.stop_offset is not None:
                # Past records the consumer skips (transaction markers), its position moves on.
                (found,) = self.consumer.position([TopicPartition(split.topic, split.partition)])
                if found.offset >= split.stop_offset:
                    return self._finish(state, split.stop_offset)
                return None
            if self.clock() * 1000 <= (split.stop_time_ms or 0):
                return None
            _, high = self.consumer.get_watermark_offsets(
                TopicPartition(split.topic, split.partition), timeout=REQUEST_TIMEOUT_S, cached=False
            )
        except TRANSIENT as exc:
            log.info("split %s: %s; checked again", split.split_id, error_reason(exc))
            return None
        return self._finish(state) if high <= split.position else None

    def _replaced_topics(self) -> list[RecordBatch]:
        """Before the first fetch of a split added since: its topic is the one it was found
        with (a topic made again under its name, whose new log may reach past the checkpoint,
        has another id: KIP-516, where the brokers tell it), else it is reset."""
        fresh = [s for s in self.held.values() if not s.id_checked]
        if not fresh:
            return []
        for state in fresh:
            state.id_checked = True
        batches: list[RecordBatch] = []
        for reset in self.resets.topic_id_resets([s.split for s in fresh]):
            state = self.held.get(reset.split.place)
            if state is not None and (batch := self._reset(state, reset)) is not None:
                batches.append(batch)
        return batches

    def _reset(self, state: HeldPartition, reset: Reset) -> RecordBatch | None:
        """A split whose partition went back below its checkpoint fails, naming both
        offsets (``on_reset = "fail"``), or ends, and its partition's new log is read from
        its first offset as the split's next generation (``"restart"``; None while the
        brokers do not say where the new log starts: asked again at the next check)."""
        if self.on_reset != "restart":
            self._drop(state)
            raise SplitFailed(
                f"{reset.words()}; source.on_reset is {self.on_reset!r}", split_id=state.split.split_id
            )
        split = state.split
        low = high = None
        if not reset.gone:
            tp = TopicPartition(split.topic, split.partition)
            try:
                low, high = self.consumer.get_watermark_offsets(tp, timeout=REQUEST_TIMEOUT_S, cached=False)
                # Some brokers (Tansu 0.6) answer ListOffsets(latest) short: a fetch's is not.
                high = max(high, self.consumer.get_watermark_offsets(tp, cached=True)[1])
            except TRANSIENT as exc:
                log.info("split %s: %s; checked again", split.split_id, error_reason(exc))
                return None
        generation = split.generation + 1
        if low is None or high is None:
            then = f"it is read from its first offset as generation {generation + 1} of the split once the topic is back"
        else:
            then = (
                f"it is read again from offset {low}, the first of its new log (which ends at {high} now), "
                f"as generation {generation + 1} of the split"
            )
        note = (
            f"{reset.words()}; source.on_reset is 'restart': {then} "
            f"(reset {generation} of this partition in this run)"
        )
        log.warning("%s", note)
        self._drop(state)
        self.resets.forget(split.split_id)
        self._restarting[split.split_id] = SourceEvent(
            PARTITION_RESET,
            {
                "topic": split.topic,
                "partition": split.partition,
                "generation": split.generation,
                "start": low,
                "stop": None if split.stop_offset is None or high is None else max(low or 0, high),
            },
        )
        batch = self._end_batch(split)
        batch.note = note
        return batch

    def _finish(self, state: HeldPartition, end: int | None = None) -> RecordBatch:
        self._drop(state)
        return self._end_batch(state.split, end)

    def _drop(self, state: HeldPartition) -> None:
        if self.held.pop(state.split.place, None) is not None:
            self._unassign([state])

    def _unassign(self, states: list[HeldPartition]) -> None:
        try:
            self.consumer.incremental_unassign(
                [TopicPartition(s.split.topic, s.split.partition) for s in states]
            )
        except TRANSIENT:
            log.debug("unassign failed", exc_info=True)


def _partition_of(place: str, position: int) -> TopicPartition:
    topic, _, partition = place.rpartition(":")
    return TopicPartition(topic, int(partition), position)


def _ended_by_reset(split_id: str, restarted: list[SourceEvent]) -> bool:
    place = split_place(split_id)
    return any(partition_split_id(e.payload["topic"], e.payload["partition"]) == place for e in restarted)


def _from_start_time(
    split: PartitionSplit, messages: list[Message], offsets: list[int]
) -> tuple[PartitionSplit, list[Message], list[int], int]:
    """``messages`` (and their ``offsets``) less those before the split's start time at its
    start: (the split, its start time dropped once a record at or after it is seen; the
    messages and offsets kept; the offset after the last one dropped, or the split's
    position)."""
    if split.start_time_ms is None or not messages:
        return split, messages, offsets, split.position
    first = next((i for i, m in enumerate(messages) if _timestamp_ms(m) >= (split.start_time_ms or 0)), None)
    if first is None:
        return split, [], [], offsets[-1] + 1
    passed = offsets[first - 1] + 1 if first else split.position
    return replace(split, start_time_ms=None), messages[first:], offsets[first:], passed


def _timestamp_ms(message: Message) -> int:
    kind, stamp = message.timestamp()
    return -1 if kind == 0 else int(stamp)  # TIMESTAMP_NOT_AVAILABLE


def _key_text(key: str | bytes | None) -> str | None:
    if key is None or isinstance(key, str):
        return key
    return key.decode("utf-8", "replace")
