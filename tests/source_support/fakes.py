"""An in-memory SplitEnumeratorContext, for testing enumerators' decisions.

SplitEnumeratorContext is a pure-Python interface we own, so a fake of it tests an
enumerator without Redis; the Redis implementation has its own tests in
tests/source_support/test_coordination.py.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from source_support.api import (
    ReaderInfo,
    SourceEvent,
    SourceReaderContext,
    SourceSplit,
    SplitBacklog,
    SplitEnumeratorContext,
)


class MemoryBacklog(SplitBacklog):
    def __init__(self) -> None:
        self.queue: deque[SourceSplit] = deque()

    def append(self, splits: Sequence[SourceSplit]) -> None:
        self.queue.extend(splits)

    def prepend(self, splits: Sequence[SourceSplit]) -> None:
        self.queue.extendleft(reversed(splits))

    def take(self, count: int) -> list[SourceSplit]:
        return [self.queue.popleft() for _ in range(min(count, len(self.queue)))]


class RecordingContext(SplitEnumeratorContext):
    def __init__(self, parallelism: int = 2) -> None:
        self.parallelism = parallelism
        self.assigned: list[tuple[int, SourceSplit]] = []
        self.requests: list[list[SourceSplit]] = []  # what each assign_splits call gave
        self.no_more: list[int] = []
        self.events: list[tuple[int, SourceEvent]] = []
        self.queue = MemoryBacklog()  # a store's backlog outlives the enumerator: share the context
        #: split id -> (subtask, split) of the splits readers hold (revoke_splits takes them)
        self.held: dict[str, tuple[int, SourceSplit]] = {}
        self.revoked: list[tuple[int, SourceSplit]] = []

    @property
    def current_parallelism(self) -> int:
        return self.parallelism

    def registered_readers(self) -> dict[int, ReaderInfo]:
        return {i: ReaderInfo(i) for i in range(self.parallelism)}

    def assign_splits(self, assignment: dict[int, Sequence[SourceSplit]]) -> None:
        for subtask, splits in assignment.items():
            self.assigned.extend((subtask, s) for s in splits)
            self.requests.append(list(splits))
            self.held.update({s.split_id: (subtask, s) for s in splits})

    def revoke_splits(self, split_ids: Sequence[str]) -> list[SourceSplit]:
        taken = [self.held.pop(split_id) for split_id in split_ids if split_id in self.held]
        self.revoked.extend(taken)
        return [split for _, split in taken]

    def signal_no_more_splits(self, subtask: int) -> None:
        self.no_more.append(subtask)

    def send_event_to_source_reader(self, subtask: int, event: SourceEvent) -> None:
        self.events.append((subtask, event))

    def backlog(self) -> MemoryBacklog:
        return self.queue

    @property
    def pending(self) -> list[SourceSplit]:
        """What waits in the backlog, head first."""
        return list(self.queue.queue)


class RecordingReaderContext(SourceReaderContext):
    """A SourceReaderContext (an interface we own) that records split requests and events
    sent to the enumerator, for tests that drive a reader without the runtime."""

    def __init__(self, *, fails_split: bool = False) -> None:
        self.bad_record_fails_split = fails_split
        self.requests = 0
        self.events: list[SourceEvent] = []

    @property
    def subtask(self) -> int:
        return 0

    def send_split_request(self) -> None:
        self.requests += 1

    def send_source_event_to_coordinator(self, event: SourceEvent) -> None:
        self.events.append(event)
