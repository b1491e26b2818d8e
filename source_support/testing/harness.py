"""Runs a connector on the runtime's own code, round by round, under the test's control.

``SourceHarness`` calls ``source_support.runtime``: ``enumerator_start`` once, then at each
round an ``enumerator_tick`` and one ``ReaderLoop.step`` per reader, over a
``MemoryRunCoordinator``, a ``MemoryRunStore`` and a ``MemoryLandingZone``, with the run's
clock a ``ManualClock`` that each round moves. What a fleet of workers does besides is a
step of the test's: a reader killed with uncommitted batches (its lease lapses), readers
added and removed, a reader's slice that ends and the next that starts. A slice that
raises (the external system went away) is a dead worker: its reader comes back at the next
round, as the run's tick queues one.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic

from source_support.api import Boundedness, Source, SourceReader, SplitT
from source_support.runtime import (
    BatchCommit,
    ReaderLoop,
    ReaderSettings,
    SliceOutcome,
    TickResult,
    enumerator_start,
    enumerator_tick,
)
from source_support.testing.memory import (
    Assignment,
    ContractViolation,
    ManualClock,
    MemoryLandingZone,
    MemoryRunCoordinator,
    MemoryRunStore,
)

log = logging.getLogger(__name__)

Record = dict[str, Any]
RUN_KEY = "conformance"


@dataclass(frozen=True)
class LandedBatch:
    """A batch a reader polled and landed (committed or not): its records as landed."""

    subtask: int
    token: str
    split_id: str
    start: int
    end: int
    records: list[Record]
    finished: bool


@dataclass
class ReaderSlot(Generic[SplitT]):
    """One reader instance (a token) of a subtask, and its current slice."""

    subtask: int
    token: str
    loop: ReaderLoop[SplitT]
    #: The outcome of its last slice, once one ended it (DONE, LOST, STOPPED).
    outcome: SliceOutcome | None = None
    batches_read: int = 0

    @property
    def reader(self) -> SourceReader[SplitT]:
        return self.loop.reader

    @property
    def done(self) -> bool:
        return self.outcome is not None


class SourceHarness(Generic[SplitT]):
    """A run of ``source`` with ``readers`` readers, advanced round by round.

    A round moves the clock by ``tick_s``, runs an enumerator tick (as the periodic tick
    does) and one step of each reader's loop (commit what is due, or ask for splits, or
    poll one batch). A slice lasts ``slice_s`` of the clock; the next starts at once.
    """

    def __init__(
        self,
        source: Source[SplitT],
        *,
        readers: int = 1,
        clock: ManualClock | None = None,
        tick_s: float = 1.0,
        poll_timeout_s: float = 0.0,
        slice_s: float = 600.0,
        skip_errors: bool = False,
        max_rounds: int = 2_000,
        parallelism: int | None = None,
        linger_s: float = 0.0,
        max_batch_records: int | None = None,
        max_errors: int | None = None,
    ) -> None:
        self.source = source
        self.serializer = source.split_serializer
        self.clock = clock or ManualClock()
        self.tick_s, self.max_rounds, self.fixed_parallelism = tick_s, max_rounds, parallelism
        self.coordinator = MemoryRunCoordinator()
        self.store = MemoryRunStore()
        self.landing = MemoryLandingZone()
        self.settings = ReaderSettings(
            slice_seconds=slice_s,
            poll_interval_s=poll_timeout_s,
            skip_errors=skip_errors,
            location="memory",
            linger_s=linger_s,
            max_batch_records=max_batch_records,
            max_errors=max_errors,
        )
        self.readers: dict[int, ReaderSlot[SplitT]] = {}
        #: Subtasks whose reader died in a failed slice, to start again at the next round.
        self.respawn: set[int] = set()
        #: What a failed tick or slice raised, in order.
        self.failures: list[Exception] = []
        self.result: TickResult | None = None
        self.rounds = 0
        enumerator_start(
            source=source, coordinator=self.coordinator, store=self.store, parallelism=self.parallelism
        )
        for _ in range(readers):
            self.add_reader()

    @property
    def bounded(self) -> bool:
        return self.source.boundedness == Boundedness.BOUNDED

    @property
    def parallelism(self) -> int:
        """The run's parallelism if fixed; else one past the highest subtask that ran."""
        return self.fixed_parallelism or max(1, len(self.readers), *(s + 1 for s in self.readers))

    @property
    def exhausted(self) -> bool:
        return self.store.state.exhausted

    @property
    def pending(self) -> int:
        return self.store.state.pending

    # The enumerator.

    def enumerator_tick(self) -> None:
        """One ``enumerator_tick``; what it raises is a failed tick (the next one retries)."""
        try:
            self.result = enumerator_tick(
                source=self.source,
                coordinator=self.coordinator,
                store=self.store,
                parallelism=self.parallelism,
                atomic=self.store.atomic,
            )
        except AssertionError:
            raise
        except Exception as exc:  # noqa: BLE001 - a failed tick task: the next tick retries
            log.info("enumerator tick failed: %s", exc)
            self.failures.append(exc)

    # Readers.

    def add_reader(self, subtask: int | None = None) -> int:
        """Starts a new reader instance (a new token), which registers; returns its subtask."""
        if subtask is None:
            subtask = next(i for i in range(len(self.readers) + 1) if i not in self.readers)
        token = self.coordinator.acquire_reader(subtask, None, self.settings.location)
        if token is None:
            raise ValueError(f"reader {subtask} is running; kill or remove it first")
        self.readers[subtask] = ReaderSlot(subtask, token, self._loop(subtask, token))
        self._open(subtask)
        return subtask

    def _loop(self, subtask: int, token: str) -> ReaderLoop[SplitT]:
        return ReaderLoop(
            self.source,
            self.coordinator,
            self.store,
            self.landing,
            RUN_KEY,
            subtask,
            token,
            self.settings,
            on_split_request=lambda: None,  # the next round's tick serves it
            clock=self.clock,
        )

    def _open(self, subtask: int) -> None:
        try:
            self.readers[subtask].loop.open()
        except AssertionError:
            raise
        except Exception as exc:  # noqa: BLE001 - a failed slice, as in ``step_reader``
            self._slice_failed(subtask, exc)

    def restart_reader(self, subtask: int) -> None:
        """The next slice of the same instance (same token): a new connector reader that
        takes what the store says it owns, at the checkpoints; what was not committed is
        read again."""
        slot = self.readers[subtask]
        slot.loop.close()
        slot.loop = self._loop(subtask, slot.token)
        self._open(subtask)

    def restore_reader(self, subtask: int, splits: Sequence[SplitT]) -> None:
        """A new slice of the same instance whose connector reader is given ``splits`` (e.g.
        the last one's ``snapshot_state``, taken right after a commit) before it takes what
        the store says: its first batches must start at the checkpoints all the same."""
        slot = self.readers[subtask]
        slot.loop.close()
        slot.loop = self._loop(subtask, slot.token)
        slot.loop.reader.add_splits(splits)
        self._open(subtask)

    def kill_reader(self, subtask: int) -> None:
        """The reader's process dies: nothing more is committed, its lease lapses, and its
        splits go back to the enumerator (next tick) at their checkpoints."""
        slot = self.readers.pop(subtask)
        self.coordinator.expire_reader(subtask)
        slot.loop.close()

    def remove_reader(self, subtask: int) -> None:
        """A reader scaled away: it commits, then leaves; its splits go back (next tick)."""
        self.readers[subtask].loop.commit()
        self.kill_reader(subtask)

    def step_reader(self, subtask: int) -> None:
        """One turn of the reader's loop (``ReaderLoop.step``); a slice whose time is up is
        followed by the next slice of the same instance, as the reader's task requeues it."""
        slot = self.readers[subtask]
        if slot.done:
            return
        loop = slot.loop
        before = loop.report.batches
        try:
            outcome = loop.step(self.clock())
        except AssertionError:
            raise
        except Exception as exc:  # noqa: BLE001 - a failed slice: its worker is gone
            self._slice_failed(subtask, exc)
            return
        slot.batches_read += loop.report.batches - before
        if outcome == SliceOutcome.CONTINUE:
            loop.close()
            slot.loop = self._loop(subtask, slot.token)
            self._open(subtask)
        elif outcome is not None:
            loop.close()
            slot.outcome = outcome

    def _slice_failed(self, subtask: int, exc: Exception) -> None:
        """A slice raised: its worker's task failed; the reader's lease lapses, and the
        next round starts a new instance (as the run's tick queues one)."""
        log.info("reader %s failed: %s", subtask, exc)
        self.failures.append(exc)
        self.kill_reader(subtask)
        self.respawn.add(subtask)

    def read(self, subtask: int, batches: int, *, commit: bool = True) -> list[LandedBatch]:
        """Rounds in which only reader ``subtask`` steps, until it has polled ``batches``
        batches (and any it had buffered); with ``commit``, each is committed once polled.
        Each is a step of the runtime's loop (inbox, wait for splits, read, commit).
        Returns the batches polled."""
        slot = self.readers[subtask]
        polled: list[LandedBatch] = []
        for _ in range(self.max_rounds):
            loop = slot.loop
            if len(polled) >= batches and not loop.reader.has_buffered():
                if commit:
                    loop.commit()
                return polled
            self._advance()
            now = self.clock()
            loop.take_inbox(self.coordinator.reader_inbox(subtask))
            if not loop.reader.has_splits():
                loop.wait_for_splits(now)
                continue
            before = loop.report.batches
            loop.read(now)
            if loop.report.batches > before:
                slot.batches_read += 1
                polled.append(self._landed(subtask, slot.token, loop.commits.waiting[-1]))
            if commit and not loop.reader.has_buffered():
                loop.commit()
        raise AssertionError(f"reader {subtask} did not read {batches} batches: {self.describe()}")

    def commit(self, subtask: int) -> None:
        """The reader commits what waits (``ReaderLoop.commit``), then is told what is durable."""
        self.readers[subtask].loop.commit()

    # Rounds.

    def _advance(self) -> None:
        self.rounds += 1
        self.clock.advance(self.tick_s)
        for subtask in sorted(self.respawn):
            self.respawn.discard(subtask)
            self.add_reader(subtask)
        self.enumerator_tick()
        if self.pending:  # a done reader is started again when splits came back (the run's tick)
            for subtask, slot in list(self.readers.items()):
                if slot.outcome == SliceOutcome.DONE:
                    del self.readers[subtask]
                    self.add_reader(subtask)

    def round(self) -> None:
        """The clock moves, the enumerator ticks, each reader makes one step."""
        self._advance()
        for subtask in list(self.readers):
            if subtask in self.readers:
                self.step_reader(subtask)

    def run(
        self, *, until: Callable[[SourceHarness[SplitT]], bool] | None = None, rounds: int | None = None
    ) -> None:
        """``rounds`` rounds; or rounds until ``until`` holds; or, for a bounded source,
        until it is over (the enumerator exhausted, every split finished, every reader
        done). Fails after ``max_rounds`` rounds."""
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
        return (
            self.exhausted
            and not self.respawn
            and all(s.finished or s.failed for s in self.store.state.splits.values())
            and all(slot.done for slot in self.readers.values())
        )

    # What the run produced.

    @property
    def assignments(self) -> list[Assignment]:
        """Every split handed to a reader instance, at its checkpoint, in order."""
        return self.store.state.assignments

    @property
    def returned(self) -> list[tuple[int, str, int]]:
        """Splits given back to the enumerator after their reader was gone: (subtask,
        split id, position)."""
        return self.store.state.returned

    @property
    def no_more_signals(self) -> list[int]:
        """Subtasks told there are no more splits, in order."""
        return self.coordinator.no_more_signals

    @property
    def landed(self) -> list[LandedBatch]:
        """The committed batches, in commit order."""
        subtasks = {a.token: a.subtask for a in self.store.state.assignments}
        return [self._landed(subtasks[token], token, commit) for token, commit in self.store.state.committed]

    def _landed(self, subtask: int, token: str, commit: BatchCommit) -> LandedBatch:
        table = self.landing.tables.get(commit.landed_path or "")
        records: list[Record] = table.to_pylist() if table is not None else []
        return LandedBatch(
            subtask, token, commit.split_id, commit.start, commit.end, records, commit.finished
        )

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

    def lags(self) -> dict[str, int | None]:
        """``Source.split_lags`` of the stored splits at their checkpoints."""
        splits = {i: (s.payload, s.position) for i, s in self.store.state.splits.items()}
        return self.source.split_lags(splits)

    def checkpoint(self, split_id: str) -> int | None:
        return self.store.checkpoint(split_id)

    def waiting_splits(self) -> list[SplitT]:
        """The splits in the run's backlog, head first."""
        return [self.serializer.deserialize(payload) for payload in self.store.backlog_payloads()]

    def describe(self) -> str:
        """The run's state in a line per reader, for a failure message."""
        lines = [
            f"round {self.rounds}, {len(self.records())} records committed, enumerator pending "
            f"{self.pending}, exhausted {self.exhausted}, backlog {len(self.store.state.backlog)}, "
            f"failures {[repr(f) for f in self.failures[-3:]]}"
        ]
        for subtask, slot in sorted(self.readers.items()):
            held = ", ".join(f"{s.split_id}@{s.offset.position}" for s in slot.reader.snapshot_state())
            lines.append(
                f"  reader {subtask} ({slot.token[:8]}): holds [{held}], "
                f"{len(slot.loop.commits.waiting)} uncommitted, outcome {slot.outcome}"
            )
        return "\n".join(lines)


__all__ = ["ContractViolation", "LandedBatch", "ReaderSlot", "SourceHarness"]
