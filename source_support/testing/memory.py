"""The runtime's side of a run kept in memory: store, backlog, contexts and a clock.

What ``source_support.coordination`` and the database do for a real run, with the same
rules: an assignment goes through the store, which refuses a split that is out with a
reader or finished and hands a split that came back at its checkpoint; a split travels
serialized (and through JSON), never as the object the enumerator made.
"""

from __future__ import annotations

import json
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic

from source_support.api import (
    ReaderInfo,
    SourceEvent,
    SourceReaderContext,
    SplitBacklog,
    SplitEnumeratorContext,
    SplitSerializer,
    SplitT,
)

#: A split as a reader is given it: (split_id, serialized split, checkpointed position), as
#: ``source_support.coordination.AssignedSplit`` (not imported: it would import Redis).
AssignedSplit = tuple[str, dict[str, Any], int]


def json_round_trip(data: Any) -> Any:
    """``data`` as it comes back from the database (a JSON column)."""
    return json.loads(json.dumps(data))


class ManualClock:
    """A clock (``time.time``: seconds) that moves only when told to."""

    def __init__(self, start: float | None = None) -> None:
        self.now = time.time() if start is None else start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class MemoryBacklog(SplitBacklog[SplitT]):
    """The run's queue of waiting splits, kept serialized as the store keeps it."""

    def __init__(self, serializer: SplitSerializer[SplitT]) -> None:
        self.serializer = serializer
        self.queue: deque[dict[str, Any]] = deque()

    def append(self, splits: Sequence[SplitT]) -> None:
        self.queue.extend(self._payload(s) for s in splits)

    def prepend(self, splits: Sequence[SplitT]) -> None:
        self.queue.extendleft(reversed([self._payload(s) for s in splits]))

    def take(self, count: int) -> list[SplitT]:
        taken = [self.queue.popleft() for _ in range(min(count, len(self.queue)))]
        return [self.serializer.deserialize(payload) for payload in taken]

    def splits(self) -> list[SplitT]:
        """What waits, head first (left in place)."""
        return [self.serializer.deserialize(payload) for payload in self.queue]

    def __len__(self) -> int:
        return len(self.queue)

    def _payload(self, split: SplitT) -> dict[str, Any]:
        return json_round_trip(self.serializer.serialize(split))


@dataclass
class StoredSplit:
    """A split's row: its payload, checkpoint and owner (a reader instance's token)."""

    payload: dict[str, Any]
    position: int
    owner: str | None = None
    owner_subtask: int | None = None
    finished: bool = False


@dataclass(frozen=True)
class BatchMove:
    """One batch as a commit presents it to the store."""

    split_id: str
    start: int
    end: int
    finished: bool


class MemorySplitStore:
    """The durable split state of a run (``SplitStore`` + ``RunStore.commit_batches``)."""

    def __init__(self) -> None:
        self.splits: dict[str, StoredSplit] = {}
        #: Splits an assignment named that were out with a reader or finished (refused).
        self.refused: list[str] = []

    def record_assignments(
        self, assignments: dict[int, list[AssignedSplit]], tokens: dict[int, str]
    ) -> dict[int, list[AssignedSplit]]:
        """Takes new splits and splits that came back; each goes out at its checkpoint
        (the store's position wins over the one in the enumerator's copy)."""
        out: dict[int, list[AssignedSplit]] = {}
        for subtask, rows in assignments.items():
            for split_id, payload, position in rows:
                stored = self.splits.get(split_id)
                if stored is None:
                    stored = self.splits[split_id] = StoredSplit(payload, position)
                elif stored.owner is not None or stored.finished:
                    self.refused.append(split_id)
                    continue
                stored.owner, stored.owner_subtask = tokens[subtask], subtask
                out.setdefault(subtask, []).append((split_id, payload, stored.position))
        return out

    def owned_splits(self, token: str) -> list[AssignedSplit]:
        return [
            (split_id, s.payload, s.position)
            for split_id, s in self.splits.items()
            if s.owner == token and not s.finished
        ]

    def reclaim(self, live_tokens: set[str]) -> dict[int, list[AssignedSplit]]:
        """Ends the assignments of reader instances that are gone; their splits by subtask."""
        reclaimed: dict[int, list[AssignedSplit]] = {}
        for split_id, stored in self.splits.items():
            subtask = stored.owner_subtask  # set with the owner
            gone = stored.owner is not None and stored.owner not in live_tokens
            if gone and subtask is not None and not stored.finished:
                reclaimed.setdefault(subtask, []).append((split_id, stored.payload, stored.position))
                stored.owner, stored.owner_subtask = None, None
        return reclaimed

    def revoke(self, split_ids: Sequence[str]) -> list[tuple[str, AssignedSplit]]:
        """Takes assigned splits back from their owners: (old owner's token, split)."""
        revoked: list[tuple[str, AssignedSplit]] = []
        for split_id in split_ids:
            stored = self.splits.get(split_id)
            if stored is None or stored.owner is None or stored.finished:
                continue
            revoked.append((stored.owner, (split_id, stored.payload, stored.position)))
            stored.owner, stored.owner_subtask = None, None
        return revoked

    def commit(self, token: str, moves: Sequence[BatchMove]) -> set[str]:
        """Moves each split's checkpoint past its batches where ``token`` owns it and its
        batches follow on from the checkpoint, all or nothing per split; returns the ids
        of the splits that moved."""
        by_split: dict[str, list[BatchMove]] = {}
        for move in moves:
            by_split.setdefault(move.split_id, []).append(move)
        moved: set[str] = set()
        for split_id, batches in by_split.items():
            stored = self.splits.get(split_id)
            if stored is None or stored.owner != token or stored.finished:
                continue
            position = stored.position
            for batch in batches:
                if batch.start != position:
                    break
                position = batch.end
            else:
                stored.position, stored.finished = position, batches[-1].finished
                moved.add(split_id)
        return moved

    def checkpoint(self, split_id: str) -> int | None:
        stored = self.splits.get(split_id)
        return None if stored is None else stored.position


@dataclass
class MemoryRun(Generic[SplitT]):
    """What outlives one enumerator pass: the store, the backlog, the live reader instances
    (subtask -> token) and what readers sent the enumerator since the last pass."""

    serializer: SplitSerializer[SplitT]
    #: The run's parallelism if fixed; else the number of live readers (at least 1).
    fixed_parallelism: int | None = None
    store: MemorySplitStore = field(default_factory=MemorySplitStore)
    live: dict[int, str] = field(default_factory=dict[int, str])
    registrations: list[int] = field(default_factory=list[int])
    requests: list[int] = field(default_factory=list[int])
    reader_events: list[tuple[int, SourceEvent]] = field(default_factory=list[tuple[int, SourceEvent]])
    backlog: MemoryBacklog[SplitT] = field(init=False)

    def __post_init__(self) -> None:
        self.backlog = MemoryBacklog(self.serializer)

    @property
    def parallelism(self) -> int:
        return self.fixed_parallelism or max(1, len(self.live))


class MemoryEnumeratorContext(SplitEnumeratorContext[SplitT]):
    """An enumerator's view of a ``MemoryRun`` for one pass (the runtime makes a new
    context each pass too). What it tells readers waits in ``notices``, ``no_more``,
    ``events`` and ``revoked`` until the pass is over, as the runtime holds notices back
    until the pass's transaction commits."""

    def __init__(self, run: MemoryRun[SplitT]) -> None:
        self.run = run
        self._queued: dict[int, list[SplitT]] = {}
        #: Splits stored as assigned, by subtask, each at its checkpoint.
        self.notices: dict[int, list[AssignedSplit]] = {}
        self.no_more: list[int] = []
        self.events: list[tuple[int, SourceEvent]] = []
        #: Split ids taken back from each reader instance (token).
        self.revoked: dict[str, list[str]] = {}

    @property
    def current_parallelism(self) -> int:
        return self.run.parallelism

    def registered_readers(self) -> dict[int, ReaderInfo]:
        return {subtask: ReaderInfo(subtask, f"memory-{subtask}") for subtask in self.run.live}

    def assign_splits(self, assignment: Mapping[int, Sequence[SplitT]]) -> None:
        unknown = set(assignment) - set(self.run.live)
        if unknown:
            raise ValueError(f"cannot assign splits to readers that are not registered: {unknown}")
        for subtask, splits in assignment.items():
            self._queued.setdefault(subtask, []).extend(splits)

    def signal_no_more_splits(self, subtask: int) -> None:
        if subtask not in self.run.live:
            raise ValueError(f"cannot signal no more splits to reader {subtask}: it is not registered")
        self.no_more.append(subtask)

    def send_event_to_source_reader(self, subtask: int, event: SourceEvent) -> None:
        self.events.append((subtask, event))

    def backlog(self) -> MemoryBacklog[SplitT]:
        return self.run.backlog

    def revoke_splits(self, split_ids: Sequence[str]) -> list[SplitT]:
        self.flush()  # a split queued for a reader in this pass is stored before it moves
        serializer = self.run.serializer
        splits: list[SplitT] = []
        for owner, (split_id, payload, position) in self.run.store.revoke(split_ids):
            self.revoked.setdefault(owner, []).append(split_id)
            for subtask, rows in self.notices.items():
                self.notices[subtask] = [row for row in rows if row[0] != split_id]
            splits.append(serializer.deserialize(payload).at(position))
        return splits

    def flush(self) -> None:
        """Stores the queued assignments; what the store took waits in ``notices``."""
        serializer = self.run.serializer
        rows = {
            subtask: [
                (s.split_id, json_round_trip(serializer.serialize(s)), s.offset.position) for s in splits
            ]
            for subtask, splits in self._queued.items()
            if splits
        }
        self._queued = {}
        for subtask, assigned in self.run.store.record_assignments(rows, self.run.live).items():
            self.notices.setdefault(subtask, []).extend(assigned)


class MemoryReaderContext(SourceReaderContext):
    """A reader's view of a ``MemoryRun``: requests and events wait for the next pass."""

    def __init__(self, run: MemoryRun[Any], subtask: int) -> None:
        self.run = run
        self._subtask = subtask
        self.requests = 0

    @property
    def subtask(self) -> int:
        return self._subtask

    def send_split_request(self) -> None:
        self.requests += 1
        self.run.requests.append(self._subtask)

    def send_source_event_to_coordinator(self, event: SourceEvent) -> None:
        self.run.reader_events.append((self._subtask, event))
