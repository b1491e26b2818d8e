"""Reads every held subject filter through the flow's pull consumer of it, all at once,
and acknowledges a message only once a checkpoint past it is committed."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

import nats.js.errors
import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext

from connectors.nats.checks import Discarded, discarded, discards_by_limits, reset_failure, reset_reason
from connectors.nats.connection import (
    CHECK_TIMEOUT_S,
    REQUEST_TIMEOUT_S,
    NatsClient,
    connection_reason,
    mask_servers,
)
from connectors.nats.jetstream import (
    TRANSIENT,
    StreamSeen,
    consumer_after,
    consumer_name,
    delete_consumer,
    stream_seen,
)
from connectors.nats.puller import Puller
from connectors.nats.split import SubjectSplit
from source_support.api import BadRecord, OffsetEntry, RecordBatch, SourceEvent
from source_support.errors import SplitFailed
from source_support.formats.drift import SchemaDrift
from source_support.formats.messages import MessageDecoder
from source_support.parking import ParkedHandles
from source_support.streams.reader import Decoding, DecodingSplitReader

log = logging.getLogger("connectors.nats")

METADATA_FIELDS = (
    pa.field("_subject", pa.string()),
    pa.field("_seq", pa.int64()),
    pa.field("_ts", pa.timestamp("us", tz="UTC")),
)
#: The event a reader sends once a ``[stop] at`` time is placed on a stream sequence (the
#: last message before the first one after the time): every split stops there.
STOP_PLACED = "stop-placed"
#: The event a reader sends the enumerator once the split of a stream that was created
#: again is committed as finished (``source.on_reset = "restart"``): the new stream is the
#: split's next generation, read from its first sequence.
STREAM_RESET = "stream-reset"
#: How long one pull request waits on the server for messages of an idle filter.
PULL_WAIT_S = 5.0
#: How often an idle split with a stop asks its consumer whether anything is left.
CHECK_INTERVAL_S = 1.0
#: How long a split's pull consumer waits, parked, for the next slice of a reader in this
#: process to take the split on (``PARKED_SPLITS``).
PARKED_S = 15.0
#: How long a look at a stream of several subjects without limits stands for it: a gap
#: in a split's sequences (other subjects' messages) is then not asked about again.
LOOK_FRESH_S = 1.0


@dataclass
class HeldSplit:
    """A split this reader reads, and its consumer's state as the reader knows it."""

    split: SubjectSplit
    puller: Puller | None = None
    #: The consumer sequence the next delivered message must have (a gap: another
    #: reader, or a redelivery, took some: the consumer is made again at the position).
    next_delivery: int = 0
    next_check: float = 0.0
    #: The ack subject of the last message of each batch not yet acknowledged.
    acks: dict[int, str] = field(default_factory=dict[int, str])
    #: The stream sequence up to which the consumer is known to have delivered every
    #: message of the filter (it looked past the position and found no more).
    scanned: int = 0
    #: Messages discarded before they were read, found as the consumer was set up: said
    #: with the split's next batch.
    discarded: Discarded | None = None
    #: The stream now under the split's name, and why its checkpoint is not of it, found
    #: as the consumer was set up under ``on_reset = "restart"``: the split ends.
    reset: tuple[StreamSeen, str] | None = None
    #: Whether the stream's absence was said (``on_reset = "restart"`` waits for it).
    gone_said: bool = False
    #: The last look at the stream, and when (the reader's clock).
    look: StreamSeen | None = None
    looked_at: float = 0.0


def _unpark(parked: tuple[NatsClient, HeldSplit]) -> None:
    client, state = parked
    if state.puller is not None and client.alive:
        try:
            client.run(state.puller.stop())
        except Exception:  # noqa: BLE001 - the connection went away: nothing to release
            log.debug("release failed", exc_info=True)


#: Held splits kept, with their ``Puller``, between the time slices of the readers of this
#: process, by (servers, flow, split id). A reader lives one slice (a few seconds); a
#: puller stopped as it ends left its pull request waiting on the server, which handed
#: the request messages for up to its expiry with nobody to read them, while the next
#: slice's puller waited behind it: the messages came again only after the consumer was
#: set up anew. That cost the NATS bench's latency p99 6-15 s, every few slices. The next
#: slice takes the split's puller, its request and what it delivered, where the split's
#: checkpoint is where the parked split stood.
PARKED_SPLITS: ParkedHandles[tuple[NatsClient, HeldSplit]] = ParkedHandles(
    close=_unpark, capacity=256, ttl_s=PARKED_S
)


class NatsSplitReader(DecodingSplitReader[SubjectSplit, MessageDecoder]):
    """Reads the held filters (Flink's ``KafkaPartitionSplitReader``): each held split's
    ``Puller`` keeps a pull request outstanding; each ``fetch`` returns a batch of what
    each has received, waiting up to its timeout for the first to receive anything.

    Progress is the stream sequence in the checkpoint: each consumer is set up at the
    split's position when the split is added (``consumer_after``), and acknowledged
    (AckAll) up to a position only after the commit of it."""

    metadata_fields = METADATA_FIELDS

    def __init__(
        self,
        client: NatsClient,
        decoding: Decoding[MessageDecoder],
        *,
        flow: str,
        on_reset: str = "fail",
        send_event: Callable[[SourceEvent], None] = lambda event: None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(decoding)
        self.client = client
        self.flow = flow
        #: What a split does on a stream that is not its checkpoint's (``source.on_reset``).
        self.on_reset = on_reset
        #: The events to send once the end of a reset split is committed, by split id.
        self._restarting: dict[str, SourceEvent] = {}
        self.send_event = send_event
        self.clock = clock
        self.held: dict[str, HeldSplit] = {}
        #: Splits finished since the last commit: their consumer goes once it is committed.
        self.finished: dict[str, HeldSplit] = {}

    # The SplitReader interface

    def handle_splits_changes(self, added: Sequence[SubjectSplit], removed: Sequence[str]) -> None:
        for split in added:
            self.held[split.split_id] = self._unparked(split) or HeldSplit(split)
        for split_id in removed:
            state = self.held.pop(split_id, None)
            if state is not None:
                self._release(state)

    def handle_source_event(self, event: SourceEvent) -> None:
        if event.kind != STOP_PLACED:
            return
        seq = event.payload["seq"]
        for state in self.held.values():
            split = state.split
            if split.stop_position is None or split.stop_position > seq:
                state.split = replace(split, stop_position=seq, stop_time_ms=None)
                state.next_check = 0.0

    def fetch(self, max_records: int, timeout_s: float) -> list[RecordBatch]:
        if not self.held:
            return []
        batches = [self._finish(s) for s in list(self.held.values()) if s.split.stopped]
        if batches:
            return batches
        client = self.client  # connects on first use, outside the loop
        try:
            answered = client.run(
                self._pull(client.nc, client.js, max_records, timeout_s), REQUEST_TIMEOUT_S + timeout_s
            )
        except TRANSIENT as exc:  # the server is away: nothing now, the next fetch tries again
            log.warning("NATS at %s: %s", mask_servers(client.servers), connection_reason(exc))
            time.sleep(min(timeout_s, 1.0))
            return batches
        for split_id, messages in answered.items():
            state = self.held.get(split_id)
            if state is None:
                continue
            if state.reset is not None:
                batches.append(self._restart(state, *state.reset))
                continue
            if state.discarded is not None:
                batches.append(self._lost(state, state.discarded))
            batch = self._batch(state, messages) if messages else self._check(state)
            if batch is not None:
                batches.append(batch)
        return batches

    def notify_checkpoint_complete(self, positions: Mapping[str, int]) -> None:
        """Acknowledges each committed split up to its position (one AckAll each), and
        deletes the consumers of the splits that finished."""
        acks: list[str] = []
        for split_id, position in positions.items():
            state = self.held.get(split_id) or self.finished.get(split_id)
            if state is None:
                continue
            covered = [p for p in state.acks if p <= position]
            if covered:
                acks.append(state.acks[max(covered)])
            for p in covered:
                del state.acks[p]
        gone = [self.finished.pop(i) for i in positions if i in self.finished]
        if acks or gone:
            try:
                client = self.client
                client.run(self._acknowledge(client.nc, client.js, acks, gone))
            except (*TRANSIENT, nats.js.errors.Error) as exc:
                log.warning("could not acknowledge to NATS: %s (the next commit does)", exc)
        for split_id in [i for i in positions if i in self._restarting]:
            self.send_event(self._restarting.pop(split_id))

    def describe(self, split: SubjectSplit, position: int, *, line: int | None = None) -> str:
        return f"stream {split.stream} subject filter {split.subject} sequence {position}"

    def close(self) -> None:
        """Parks each held split whose puller goes on as it was (``PARKED_SPLITS``); any
        other is released."""
        for state in self.held.values():
            if state.puller is not None and not state.puller.broken and state.reset is None:
                PARKED_SPLITS.park(self._parking_key(state.split), (self.client, state))
            else:
                self._release(state)
        self.held.clear()

    def _parking_key(self, split: SubjectSplit) -> tuple[str, str, str]:
        return (self.client.servers, self.flow, split.split_id)

    def _unparked(self, split: SubjectSplit) -> HeldSplit | None:
        """The split as a reader of this process parked it, if it stands at ``split``'s
        position (its checkpoint) with this process's connection; else None (one parked
        at another position is released)."""
        parked = PARKED_SPLITS.take(self._parking_key(split))
        if parked is None:
            return None
        client, state = parked
        kept = state.split
        if client is not self.client or (kept.position, kept.generation) != (
            split.position,
            split.generation,
        ):
            _unpark(parked)
            return None
        state.split, state.next_check = replace(split, created=split.created or kept.created), 0.0
        return state

    # Reading

    async def _pull(
        self, nc: Client, js: JetStreamContext, max_records: int, timeout_s: float
    ) -> dict[str, list[Msg]]:
        """Waits up to ``timeout_s`` for messages of any held split; returns those that
        arrived, by split (an empty list: none for that split now)."""
        for state in self.held.values():
            if state.puller is not None and state.puller.broken:
                log.info(
                    "split %s: %s; its consumer is set up again", state.split.split_id, state.puller.broken
                )
                await self._drop_puller(state)
            if state.puller is None:
                await self._set_up(nc, js, state, max_records)
            if state.puller is not None:
                await state.puller.keep_asking()
        pullers = [s.puller for s in self.held.values() if s.puller is not None]
        if pullers and not any(p.buffer for p in pullers):
            waits = [asyncio.ensure_future(p.arrived.wait()) for p in pullers]
            await asyncio.wait(waits, timeout=max(timeout_s, 0.01), return_when=asyncio.FIRST_COMPLETED)
            for wait in waits:
                wait.cancel()
        return {
            split_id: state.puller.take(max_records) if state.puller is not None else []
            for split_id, state in self.held.items()
        }

    async def _set_up(self, nc: Client, js: JetStreamContext, state: HeldSplit, batch: int) -> None:
        """Sets the split's consumer up at its position, once the stream is known to be
        the one its checkpoint belongs to (else the split fails), noting the messages
        after the position the stream discarded before they were read."""
        split = state.split
        name = consumer_name(self.flow, split.subject)
        try:
            seen = await stream_seen(nc, split.stream, REQUEST_TIMEOUT_S)
            if seen is None:
                raise nats.js.errors.NotFoundError
            why = reset_reason(split, seen)
            if why and self.on_reset == "restart":
                state.reset = (seen, why)
                return
            if why:
                raise SplitFailed(reset_failure(split, seen, why), split_id=split.split_id)
            state.gone_said = False
            state.look, state.looked_at = seen, self.clock()
            if split.created is None:  # stored before splits kept it: this stream from now on
                split = state.split = replace(split, created=seen.created)
            state.discarded = discarded(split, state.scanned, seen)
            consumer = await consumer_after(js, split.stream, name, split.subject, split.position)
            puller = Puller(nc, split.stream, name, batch=batch, wait_s=PULL_WAIT_S)
            await puller.start()
        except nats.js.errors.NotFoundError:
            if self.on_reset == "restart":  # read again from its start once it is created again
                if not state.gone_said:
                    log.warning(
                        "stream %s is gone: subject filter %s (at sequence %d) waits for it to be "
                        "created again (source.on_reset is 'restart')",
                        split.stream,
                        split.subject,
                        split.position,
                    )
                    state.gone_said = True
                return
            raise SplitFailed(
                f"stream {split.stream} is gone: subject filter {split.subject} cannot be read on",
                split_id=split.split_id,
            ) from None
        except (*TRANSIENT, nats.js.errors.Error) as exc:
            log.info("split %s: consumer not ready (%s); tried again", split.split_id, exc)
            return
        state.puller = puller
        state.next_delivery = consumer.delivered + 1
        state.acks.clear()

    async def _drop_puller(self, state: HeldSplit) -> None:
        puller, state.puller = state.puller, None
        if puller is not None:
            try:
                await puller.stop()
            except Exception:  # noqa: BLE001 - a subscription of a connection that is gone
                log.debug("unsubscribe failed", exc_info=True)

    def _release(self, state: HeldSplit) -> None:
        try:
            self.client.run(self._drop_puller(state))
        except Exception:  # noqa: BLE001 - the connection went away: nothing to release
            log.debug("release failed", exc_info=True)

    async def _acknowledge(
        self, nc: Client, js: JetStreamContext, acks: list[str], gone: list[HeldSplit]
    ) -> None:
        await asyncio.gather(*(nc.request(reply, b"+ACK", timeout=REQUEST_TIMEOUT_S) for reply in acks))
        for state in gone:
            await self._drop_puller(state)
            await delete_consumer(js, state.split.stream, consumer_name(self.flow, state.split.subject))

    def _batch(self, state: HeldSplit, raw: list[Msg]) -> RecordBatch | None:
        split = state.split
        got = Deliveries.of(raw)
        if not got.in_order(state.next_delivery, split.position):
            # Another reader took deliveries of this consumer, or it sent some again:
            # read on from the checkpoint's position through a consumer made again there.
            log.info("split %s: deliveries out of order; its consumer is set up again", split.split_id)
            self._release(state)
            return None
        state.next_delivery = int(got.deliveries[-1]) + 1
        lost = self._discarded_before(state, int(got.seqs[0]))
        split = state.split
        finished = False
        if split.stop_time_ms is not None:
            late = np.flatnonzero(got.ts_ns // 1_000_000 > split.stop_time_ms)
            if len(late):
                stop = int(got.seqs[late[0]]) - 1
                self.send_event(SourceEvent(STOP_PLACED, {"seq": stop}))
                split = state.split = replace(split, stop_position=stop, stop_time_ms=None)
        if split.stop_position is not None and got.seqs[-1] >= split.stop_position:
            got = got.head(int(np.searchsorted(got.seqs, split.stop_position, side="right")))
            finished = True
        end = int(got.seqs[-1]) if len(got) else split.position
        if finished and split.stop_position is not None:
            end = max(split.stop_position, split.position)
        records, bad = self._records(split, got)
        changes = self._drift_seen(got.seqs.tolist())
        note = ""
        if lost is not None:
            said, note = self._said(state, lost)
            bad = said + bad
        if len(got):
            state.acks[int(got.seqs[-1])] = got.messages[-1].reply
        state.split = split.at(end)
        if finished:
            self._move_to_finished(state)
        return RecordBatch(
            split.split_id,
            split.offset,
            OffsetEntry(split.split_id, end),
            records,
            bad,
            finished,
            note,
            schema_changes=changes,
        )

    def records_of(self, split: SubjectSplit, messages: list[Msg]) -> tuple[pa.Table, list[BadRecord]]:
        """The run's records of ``split``'s delivered ``messages``, and its bad messages (at
        their stream sequences); SplitFailed on a schema change under ``fail``."""
        return self._records(split, Deliveries.of(messages))

    def _records(self, split: SubjectSplit, got: Deliveries) -> tuple[pa.Table, list[BadRecord]]:
        first_only = self.first_bad_record_only()
        try:
            table, reasons = self.decoder.decode([m.data for m in got.messages], first_only=first_only)
        except SchemaDrift as drift:
            raise self._drift_failed(drift, split, got.seqs.tolist()) from None
        bad = [
            BadRecord(int(got.seqs[i]), got.messages[i].data.decode("utf-8", "replace"), reasons[i])
            for i in sorted(reasons)
        ]
        if self.metadata and not (first_only and bad):
            kept = np.flatnonzero(~np.isin(np.arange(len(got)), list(reasons)))
            subjects = [got.messages[i].subject for i in kept]
            stamps = pa.array(got.ts_ns[kept] // 1000, pa.int64())  # ns to the column's us
            table = self._with_metadata(
                table, [pa.array(subjects, pa.string()), pa.array(got.seqs[kept], pa.int64()), stamps]
            )
        return table, bad

    def _check(self, state: HeldSplit) -> RecordBatch | None:
        """An idle split with a stop: finished once its consumer has nothing left to deliver
        and delivered nothing this reader has not taken (whatever comes later is past the
        stop)."""
        split = state.split
        now = time.monotonic()
        if state.next_check > now or state.puller is None:
            return None
        state.next_check = now + CHECK_INTERVAL_S
        client = self.client
        name = consumer_name(self.flow, split.subject)
        try:
            info = client.run(client.js.consumer_info(split.stream, name, timeout=CHECK_TIMEOUT_S))
            seen = client.run(stream_seen(client.nc, split.stream, CHECK_TIMEOUT_S))
        except nats.js.errors.NotFoundError:
            # The consumer (or its stream) is gone, say with a server that restarted on
            # fresh storage: set up again, which checks the stream first.
            log.info("split %s: its consumer is gone; it is set up again", split.split_id)
            self._release(state)
            return None
        except (*TRANSIENT, nats.js.errors.Error):
            return None
        if seen is None:
            self._release(state)
            return None
        lost = discarded(split, state.scanned, seen)
        if lost is not None:
            return self._lost(state, lost)
        delivered = info.delivered.consumer_seq if info.delivered else 0
        if info.num_pending or delivered >= state.next_delivery:
            return None  # messages wait on the server, or are on their way to this reader
        if info.delivered is not None:
            # Nothing was discarded past what the split read (the stream's first message is
            # after that, looked at after the consumer), so the consumer went past the
            # position only over other subjects' messages.
            state.scanned = max(state.scanned, info.delivered.stream_seq)
        if split.stop_position is None and split.stop_time_ms is None:
            return None
        if split.stop_position is None:
            stop_ms = split.stop_time_ms or 0
            if self.clock() * 1000 <= stop_ms:
                return None
            return self._finish(state)
        return self._finish(state, split.stop_position)

    def _discarded_before(self, state: HeldSplit, first_seq: int) -> Discarded | None:
        """Messages between the split's position and ``first_seq``, the first one its
        consumer delivered, that the stream discarded before they were read (the stream is
        asked only when the consumer went past the next sequence)."""
        split = state.split
        if first_seq <= max(split.position, state.scanned) + 1 or not split.position:
            return None
        if self._gaps_are_other_subjects(state):
            return None
        client = self.client
        try:
            seen = client.run(stream_seen(client.nc, split.stream, REQUEST_TIMEOUT_S))
        except (*TRANSIENT, nats.js.errors.Error):
            return None  # cannot tell now; a gap after this batch is looked at again
        if seen is not None:
            state.look, state.looked_at = seen, self.clock()
        lost = None if seen is None else discarded(split, state.scanned, seen)
        return None if lost is None else replace(lost, last=min(lost.last, first_seq - 1))

    def _gaps_are_other_subjects(self, state: HeldSplit) -> bool:
        """Whether a gap before a batch is known to be other subjects' messages without
        asking the stream: a look younger than ``LOOK_FRESH_S`` saw a stream of several
        subjects that discards nothing by limits. A split among several subjects has a gap
        before nearly every batch, and a ``STREAM.INFO`` round trip each cost a reader of
        the NATS bench 13% of its time; a stream of the split's subject alone has gaps only
        where messages went, so it is always asked."""
        look = state.look
        if look is None or self.clock() - state.looked_at >= LOOK_FRESH_S:
            return False
        subjects = look.info.config.subjects or []
        return subjects != [state.split.subject] and not discards_by_limits(look)

    def _lost(self, state: HeldSplit, lost: Discarded) -> RecordBatch:
        """A batch of no records that moves the split past messages the stream discarded
        before they were read (``_said``)."""
        state.discarded = None
        split = state.split
        state.split = split.at(max(split.position, lost.last))
        bad, note = self._said(state, lost)
        return RecordBatch(split.split_id, split.offset, state.split.offset, self._empty(), bad, note=note)

    def _said(self, state: HeldSplit, lost: Discarded) -> tuple[list[BadRecord], str]:
        """How a loss is told: messages that were the split's (its filter is the stream's
        only subject) are a bad record at the first of them, so the split fails unless the
        flow skips errors (then a dead letter); where other subjects' messages were among
        them, a note on the split and the run (whether any was the split's is not known)."""
        reason = lost.describe(state.split)
        log.warning("split %s: %s", state.split.split_id, reason)
        if not lost.certain:
            return [], reason
        if self.first_bad_record_only():
            reason += "; set skip_errors to go on past lost messages"
        return [BadRecord(lost.first, "", reason)], ""

    def _restart(self, state: HeldSplit, seen: StreamSeen, why: str) -> RecordBatch:
        """Ends a split whose stream was created again (``on_reset = "restart"``), saying
        so; once that end is committed the enumerator reads the new stream from its first
        sequence as the split's next generation (``STREAM_RESET``)."""
        split = state.split
        generation = split.generation + 1
        note = (
            f"{why}; source.on_reset is 'restart': subject filter {split.subject} is read again from "
            # A stream made again and still empty tells first_seq 0: its first message is 1.
            f"sequence {seen.first_seq or 1} of the stream created at {seen.created}, as generation "
            f"{generation + 1} of the split (reset {generation} of this split in this run); messages of "
            f"the old stream after sequence {split.position} that were not read are lost"
        )
        log.warning("%s", note)
        del self.held[split.split_id]
        self._release(state)
        self._restarting[split.split_id] = SourceEvent(
            STREAM_RESET,
            {
                "subject": split.subject,
                "generation": split.generation,
                "created": seen.created,
                "stop": None if split.stop_position is None else seen.last_seq,
            },
        )
        batch = self._end_batch(split)
        batch.note = note
        return batch

    def _finish(self, state: HeldSplit, end: int | None = None) -> RecordBatch:
        batch = self._end_batch(state.split, end)
        state.split = state.split.at(batch.end.position)
        self._move_to_finished(state)
        return batch

    def _move_to_finished(self, state: HeldSplit) -> None:
        self.finished[state.split.split_id] = self.held.pop(state.split.split_id)


@dataclass(frozen=True)
class Deliveries:
    """Delivered messages, with the stream sequence, consumer sequence and time of each read
    from its ack subject at once (``$JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.
    <consumer seq>.<ns>.<pending>``, with a domain and account hash before the stream in
    the newer form)."""

    messages: list[Msg]
    seqs: npt.NDArray[np.int64]
    deliveries: npt.NDArray[np.int64]
    ts_ns: npt.NDArray[np.int64]

    @classmethod
    def of(cls, messages: list[Msg]) -> Deliveries:
        tokens = pc.split_pattern(pa.array([m.reply for m in messages], pa.string()), ".")
        base = 4 if len(messages[0].reply.split(".")) == 9 else 6

        def column(index: int) -> npt.NDArray[np.int64]:
            return pc.list_element(tokens, index).cast(pa.int64()).to_numpy()

        return cls(messages, column(base + 1), column(base + 2), column(base + 3))

    def __len__(self) -> int:
        return len(self.messages)

    def head(self, count: int) -> Deliveries:
        return Deliveries(
            self.messages[:count], self.seqs[:count], self.deliveries[:count], self.ts_ns[:count]
        )

    def in_order(self, next_delivery: int, position: int) -> bool:
        """Whether these are the consumer's next deliveries, each a first delivery of a
        message past ``position``."""
        expected = np.arange(next_delivery, next_delivery + len(self), dtype=np.int64)
        return bool(
            np.array_equal(self.deliveries, expected)
            and self.seqs[0] > position
            and np.all(np.diff(self.seqs) > 0)
        )
