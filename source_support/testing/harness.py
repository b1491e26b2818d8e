"""Drives a connector through the framework's contracts in memory (no Redis, no database).

``SourceHarness`` does what ``source_support.runtime`` does, step by step and under the
test's control: an enumerator rebuilt each pass from its JSON state, readers that ask for
splits, adopt them at their checkpoints, poll, commit and acknowledge, and the failures a
fleet of workers has: a reader killed with uncommitted batches, readers added and removed.
It checks the reader contract as it goes (``ContractViolation``): each batch starts where
its split's checkpoint or last batch ended, and positions only grow.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic

from source_support.api import (
    Boundedness,
    RecordBatch,
    Source,
    SourceEvent,
    SourceReader,
    SplitEnumerator,
    SplitT,
)
from source_support.testing.memory import (
    AssignedSplit,
    BatchMove,
    ManualClock,
    MemoryEnumeratorContext,
    MemoryReaderContext,
    MemoryRun,
    json_round_trip,
)

Record = dict[str, Any]


class ContractViolation(AssertionError):
    """A connector broke a promise of the source model; the message says which."""


@dataclass(frozen=True)
class LandedBatch:
    """A batch whose commit went through: what the landing zone keeps of a run."""

    subtask: int
    token: str
    split_id: str
    start: int
    end: int
    records: list[Record]
    finished: bool


@dataclass(frozen=True)
class Assignment:
    """A split handed to a reader instance, at its checkpoint."""

    subtask: int
    token: str
    split_id: str
    position: int


@dataclass
class ReaderSlot(Generic[SplitT]):
    """One reader instance (a token) of a subtask, and what the runtime keeps for it."""

    subtask: int
    token: str
    reader: SourceReader[SplitT]
    context: MemoryReaderContext
    #: Where each held split's next batch must start: its checkpoint (None: the store has
    #: none), then each batch's end.
    positions: dict[str, int | None] = field(default_factory=dict[str, int | None])
    uncommitted: list[RecordBatch] = field(default_factory=list[RecordBatch])
    inbox: list[AssignedSplit] = field(default_factory=list[AssignedSplit])
    events: list[SourceEvent] = field(default_factory=list[SourceEvent])
    revoked: list[str] = field(default_factory=list[str])
    told_no_more: bool = False
    #: Told no more splits and holding none: the instance ended (the runtime's DONE).
    done: bool = False
    requested_at: int | None = None
    batches_read: int = 0


class SourceHarness(Generic[SplitT]):
    """A run of ``source`` with ``readers`` readers, advanced round by round.

    A round moves the clock by ``tick_s``, makes one enumerator pass (as a periodic tick
    does) and one step of each reader (commit what is due, or ask for splits, or poll one
    batch). ``commit_every`` batches are committed together. A reader that asked and got
    nothing asks again after ``request_retry_rounds`` rounds, as the runtime does after
    ``SPLIT_REQUEST_RETRY_S``.
    """

    def __init__(
        self,
        source: Source[SplitT],
        *,
        readers: int = 1,
        clock: ManualClock | None = None,
        tick_s: float = 1.0,
        commit_every: int = 1,
        poll_timeout_s: float = 0.0,
        request_retry_rounds: int = 5,
        max_rounds: int = 2_000,
        parallelism: int | None = None,
    ) -> None:
        self.source = source
        self.serializer = source.split_serializer
        self.run_state = MemoryRun(self.serializer, fixed_parallelism=parallelism)
        self.clock = clock or ManualClock()
        self.tick_s, self.commit_every, self.poll_timeout_s = tick_s, commit_every, poll_timeout_s
        self.request_retry_rounds, self.max_rounds = request_retry_rounds, max_rounds
        self.readers: dict[int, ReaderSlot[SplitT]] = {}
        self.landed: list[LandedBatch] = []
        self.assignments: list[Assignment] = []
        #: Splits given back to the enumerator (``add_splits_back``): (subtask, split id, position).
        self.returned: list[tuple[int, str, int]] = []
        #: Subtasks told there are no more splits, in order.
        self.no_more_signals: list[int] = []
        self.checkpoints: list[dict[str, int]] = []
        self.state: dict[str, Any] | None = None
        self.pending, self.exhausted, self.rounds = 0, False, 0
        self._tokens = itertools.count()
        self._start_enumerator()
        for _ in range(readers):
            self.add_reader()

    @property
    def bounded(self) -> bool:
        return self.source.boundedness == Boundedness.BOUNDED

    # The enumerator: rebuilt from its JSON state at every pass, as enumerator_tick does.

    def _start_enumerator(self) -> None:
        """``enumerator_start``: created, started and saved once, before any reader."""
        self._pass(lambda enumerator, context: None)

    def enumerator_pass(self) -> None:
        """One pass: registrations, splits of readers that are gone, events, requests."""
        self._pass(self._feed)

    def _pass(self, feed: Callable[[SplitEnumerator[SplitT], MemoryEnumeratorContext[SplitT]], None]) -> None:
        context = MemoryEnumeratorContext(self.run_state)
        if self.state is None:
            enumerator = self.source.create_enumerator(context)
        else:
            enumerator = self.source.restore_enumerator(context, json_round_trip(self.state))
        enumerator.start()
        feed(enumerator, context)
        context.flush()
        self.state = json_round_trip(enumerator.snapshot_state())
        self.pending, self.exhausted = enumerator.pending_count(), enumerator.is_exhausted()
        enumerator.close()
        self._deliver(context)

    def _feed(self, enumerator: SplitEnumerator[SplitT], context: MemoryEnumeratorContext[SplitT]) -> None:
        run = self.run_state
        registrations, run.registrations = run.registrations, []
        for subtask in registrations:
            if subtask in run.live:
                enumerator.add_reader(subtask)
        for subtask, rows in run.store.reclaim(set(run.live.values())).items():
            splits = [self.serializer.deserialize(payload).at(position) for _, payload, position in rows]
            self.returned += [(subtask, s.split_id, s.offset.position) for s in splits]
            enumerator.add_splits_back(splits, subtask)
        events, run.reader_events = run.reader_events, []
        for origin, event in events:
            enumerator.handle_source_event(origin, event)
        requests, run.requests = run.requests, []
        for subtask in dict.fromkeys(requests):
            if subtask in run.live:
                enumerator.handle_split_request(subtask, f"memory-{subtask}")

    def _deliver(self, context: MemoryEnumeratorContext[SplitT]) -> None:
        """What the pass told readers reaches them once it is over."""
        by_token = {slot.token: slot for slot in self.readers.values()}
        for token, split_ids in context.revoked.items():
            if token in by_token:
                by_token[token].revoked += split_ids
        for subtask, rows in context.notices.items():
            slot = self.readers[subtask]
            slot.inbox += rows
            self.assignments += [Assignment(subtask, slot.token, split_id, pos) for split_id, _, pos in rows]
        for subtask in context.no_more:
            self.readers[subtask].told_no_more = True
            self.no_more_signals.append(subtask)
        for subtask, event in context.events:
            if subtask in self.readers:
                self.readers[subtask].events.append(event)

    # Readers.

    def add_reader(self, subtask: int | None = None) -> int:
        """Starts a new reader instance (a new token), which registers; returns its subtask."""
        if subtask is None:
            subtask = next(i for i in itertools.count() if i not in self.readers)
        if subtask in self.run_state.live:
            raise ValueError(f"reader {subtask} is running; kill or remove it first")
        token = f"token-{next(self._tokens)}"
        self.run_state.live[subtask] = token
        self.run_state.registrations.append(subtask)
        self.readers[subtask] = self._new_slot(subtask, token)
        return subtask

    def _new_slot(self, subtask: int, token: str) -> ReaderSlot[SplitT]:
        context = MemoryReaderContext(self.run_state, subtask)
        return ReaderSlot(subtask, token, self.source.create_reader(context), context)

    def restart_reader(self, subtask: int) -> None:
        """A new slice of the same instance (same token): a new reader that takes what the
        store says it owns, at the checkpoints; what was not committed is read again."""
        old = self.readers[subtask]
        old.reader.close()
        self.readers[subtask] = slot = self._new_slot(subtask, old.token)
        self._adopt_stored(slot)

    def restore_reader(self, subtask: int, splits: Sequence[SplitT]) -> None:
        """A new reader for the same instance, given ``splits`` (e.g. from the last one's
        ``snapshot_state``, taken right after a commit) instead of what the store says: its
        first batches must start at the splits' checkpoints all the same."""
        old = self.readers[subtask]
        old.reader.close()
        self.readers[subtask] = slot = self._new_slot(subtask, old.token)
        slot.reader.add_splits(splits)
        slot.positions = {s.split_id: self.checkpoint(s.split_id) for s in splits}

    def kill_reader(self, subtask: int) -> list[RecordBatch]:
        """The reader's process dies: nothing more is committed, its lease lapses, and its
        splits go back to the enumerator (next pass) at their checkpoints. Returns the
        batches it had read but not committed."""
        slot = self.readers.pop(subtask)
        self.run_state.live.pop(subtask, None)
        slot.reader.close()
        return slot.uncommitted

    def remove_reader(self, subtask: int) -> None:
        """A reader scaled away: it commits, then leaves; its splits go back (next pass)."""
        self.commit(subtask)
        self.kill_reader(subtask)

    def step_reader(self, subtask: int) -> None:
        """One turn of the reader loop (``runtime._ReaderLoop.step``)."""
        slot = self.readers[subtask]
        if slot.done:
            return
        self._take_inbox(slot)
        reader = slot.reader
        if (
            slot.uncommitted
            and not reader.has_buffered()
            and (len(slot.uncommitted) >= self.commit_every or not reader.has_splits())
        ):
            self.commit(subtask)
        elif not reader.has_splits():
            self._wait_for_splits(slot)
        else:
            self._read(slot)

    def read(self, subtask: int, batches: int, *, commit: bool = True) -> list[RecordBatch]:
        """Rounds in which only reader ``subtask`` steps, until it has polled ``batches``
        batches (and any it had buffered); with ``commit``, each is committed once polled.
        Returns the batches polled."""
        slot = self.readers[subtask]
        polled: list[RecordBatch] = []
        for _ in range(self.max_rounds):
            if len(polled) >= batches and not slot.reader.has_buffered():
                if commit:
                    self.commit(subtask)
                return polled
            self._advance()
            self._take_inbox(slot)
            if not slot.reader.has_splits():
                self._wait_for_splits(slot)
                continue
            batch = self._read(slot)
            if batch is not None:
                polled.append(batch)
            if commit and not slot.reader.has_buffered():
                self.commit(subtask)
        raise AssertionError(f"reader {subtask} did not read {batches} batches: {self.describe()}")

    def _take_inbox(self, slot: ReaderSlot[SplitT]) -> None:
        events, slot.events = slot.events, []
        for event in events:
            slot.reader.handle_source_event(event)
        if slot.revoked:
            revoked, slot.revoked = slot.revoked, []
            self.commit(slot.subtask)  # what was read of them lands under their new reader
            for split_id in revoked:
                slot.reader.remove_split(split_id)
                slot.positions.pop(split_id, None)
        inbox, slot.inbox = slot.inbox, []
        self._adopt(slot, inbox)

    def _adopt(self, slot: ReaderSlot[SplitT], rows: Sequence[AssignedSplit]) -> None:
        held = {s.split_id for s in slot.reader.snapshot_state()}
        fresh = [
            self.serializer.deserialize(payload).at(position)
            for split_id, payload, position in rows
            if split_id not in held
        ]
        slot.reader.add_splits(fresh)
        slot.positions.update((s.split_id, s.offset.position) for s in fresh)

    def _adopt_stored(self, slot: ReaderSlot[SplitT]) -> None:
        self.commit(slot.subtask)
        slot.inbox = []
        self._adopt(slot, self.run_state.store.owned_splits(slot.token))

    def _wait_for_splits(self, slot: ReaderSlot[SplitT]) -> None:
        if slot.told_no_more:
            self._adopt_stored(slot)  # a split assigned before the signal may not be adopted yet
            if slot.reader.has_splits():
                return
            slot.reader.notify_no_more_splits()
            slot.done = True
            self.run_state.live.pop(slot.subtask, None)  # the runtime releases a done reader
            return
        if slot.requested_at is None or self.rounds - slot.requested_at >= self.request_retry_rounds:
            if slot.requested_at is not None:
                self._adopt_stored(slot)  # in case a notice was lost
            slot.context.send_split_request()
            slot.requested_at = self.rounds

    def _read(self, slot: ReaderSlot[SplitT]) -> RecordBatch | None:
        batch = slot.reader.poll(self.poll_timeout_s)
        if batch is None:
            return None
        self._check_batch(slot, batch)
        slot.positions[batch.split_id] = batch.end.position
        slot.uncommitted.append(batch)
        slot.batches_read += 1
        if batch.finished:
            slot.requested_at = None
        return batch

    def _check_batch(self, slot: ReaderSlot[SplitT], batch: RecordBatch) -> None:
        where = f"reader {slot.subtask}: a batch of split {batch.split_id}"
        expected = slot.positions.get(batch.split_id)
        if expected is None:
            raise ContractViolation(f"{where}, which the reader does not hold")
        start, end = batch.start.position, batch.end.position
        if start != expected:
            raise ContractViolation(
                f"{where} starts at {start}, but the split was at {expected} (its checkpoint or "
                "the end of its last batch): records would be lost or read twice"
            )
        if end < start:
            raise ContractViolation(f"{where} ends at {end}, before its start {start}")
        if end == start and batch.records.num_rows:
            raise ContractViolation(
                f"{where} holds {batch.records.num_rows} records but does not move the position "
                f"({start}): a replay from the checkpoint would read them again"
            )

    def commit(self, subtask: int) -> dict[str, int]:
        """Commits the reader's waiting batches (the store refuses those of splits it no
        longer owns, which the reader then drops), then tells the reader what is durable
        (``notify_checkpoint_complete``). Returns the committed positions."""
        slot = self.readers[subtask]
        batches, slot.uncommitted = slot.uncommitted, []
        if not batches:
            return {}
        moves = [BatchMove(b.split_id, b.start.position, b.end.position, b.finished) for b in batches]
        moved = self.run_state.store.commit(slot.token, moves)
        committed: dict[str, int] = {}
        for batch in batches:
            if batch.split_id in moved:
                self.landed.append(
                    LandedBatch(
                        subtask,
                        slot.token,
                        batch.split_id,
                        batch.start.position,
                        batch.end.position,
                        batch.records.to_pylist(),
                        batch.finished,
                    )
                )
                committed[batch.split_id] = batch.end.position
                if batch.finished:
                    slot.positions.pop(batch.split_id, None)
        for split_id in {b.split_id for b in batches} - moved:
            slot.reader.remove_split(split_id)  # it went to another reader
            slot.positions.pop(split_id, None)
        self.checkpoints.append(committed)
        slot.reader.notify_checkpoint_complete(committed)
        return committed

    # Rounds.

    def _advance(self) -> None:
        self.rounds += 1
        self.clock.advance(self.tick_s)
        self.enumerator_pass()
        if self.pending:  # a done reader is started again when splits came back (run_tick)
            for subtask, slot in list(self.readers.items()):
                if slot.done:
                    del self.readers[subtask]
                    self.add_reader(subtask)

    def round(self) -> None:
        """The clock moves, the enumerator makes a pass, each reader makes one step."""
        self._advance()
        for subtask in list(self.readers):
            self.step_reader(subtask)

    def run(
        self, *, until: Callable[[SourceHarness[SplitT]], bool] | None = None, rounds: int | None = None
    ) -> None:
        """``rounds`` rounds; or rounds until ``until`` holds; or, for a bounded source,
        until it is over (the enumerator exhausted, every split finished, every reader
        told no more splits). Fails after ``max_rounds`` rounds."""
        if rounds is not None:
            for _ in range(rounds):
                self.round()
            return
        if until is None and not self.bounded:
            raise ValueError("an unbounded source runs until something holds: pass until=")
        done = until or SourceHarness[SplitT].is_over
        for _ in range(self.max_rounds):
            if done(self):
                return
            self.round()
        if not done(self):
            raise AssertionError(f"the run did not get there in {self.max_rounds} rounds: {self.describe()}")

    def is_over(self) -> bool:
        """The end of a bounded run: nothing to assign, nothing held, every reader done."""
        stored = self.run_state.store.splits.values()
        return (
            self.exhausted
            and all(s.finished for s in stored)
            and all(slot.done for slot in self.readers.values())
        )

    # What the run produced.

    def records(self) -> list[Record]:
        """Every committed record, in commit order."""
        return [record for batch in self.landed for record in batch.records]

    def records_by_split(self) -> dict[str, list[Record]]:
        """Each split's committed records, in order of position."""
        by_split: dict[str, list[LandedBatch]] = {}
        for batch in self.landed:
            by_split.setdefault(batch.split_id, []).append(batch)
        return {
            split_id: [r for b in sorted(batches, key=lambda b: b.start) for r in b.records]
            for split_id, batches in by_split.items()
        }

    def checkpoint(self, split_id: str) -> int | None:
        return self.run_state.store.checkpoint(split_id)

    def describe(self) -> str:
        """The run's state in a line per reader, for a failure message."""
        lines = [
            f"round {self.rounds}, {len(self.records())} records committed, enumerator pending "
            f"{self.pending}, exhausted {self.exhausted}, backlog {len(self.run_state.backlog)}"
        ]
        for subtask, slot in sorted(self.readers.items()):
            held = ", ".join(f"{s.split_id}@{s.offset.position}" for s in slot.reader.snapshot_state())
            lines.append(
                f"  reader {subtask} ({slot.token}): holds [{held}], {len(slot.uncommitted)} uncommitted, "
                f"told no more {slot.told_no_more}, done {slot.done}"
            )
        return "\n".join(lines)
