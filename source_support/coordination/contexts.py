"""The contexts of the source model over a run's ``RunCoordinator`` and ``SplitStore``: what
the enumerator and a reader see of their run (assignments go to the store first, then to
the readers through the coordinator). The same code runs on Redis and in the kit's memory."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from source_support.api import (
    ReaderInfo,
    SourceEvent,
    SourceReaderContext,
    SplitEnumeratorContext,
    SplitSerializer,
    SplitT,
)
from source_support.coordination.messages import SPLITS_REVOKED
from source_support.coordination.protocol import ReaderNotices, RunCoordinator
from source_support.coordination.store import SplitStore, StoreBacklog


class RunEnumeratorContext(SplitEnumeratorContext[SplitT]):
    """The enumerator's view of the run: assignments go to the store, then to the readers."""

    def __init__(
        self,
        coordinator: ReaderNotices,
        store: SplitStore,
        serializer: SplitSerializer[SplitT],
        *,
        parallelism: int,
        live: dict[int, str],
    ) -> None:
        self.coordinator = coordinator
        self.store = store
        self.serializer = serializer
        self.parallelism = parallelism
        self.live = live
        self._queued: dict[int, list[SplitT]] = {}
        #: How many splits were assigned since the last ``flush``.
        self.queued = 0
        self._backlog: StoreBacklog[SplitT] | None = None
        self._locations: dict[int, str] | None = None

    @property
    def current_parallelism(self) -> int:
        return self.parallelism

    def locations(self) -> dict[int, str]:
        """Where each reader runs, read from the coordinator once per tick."""
        if self._locations is None:
            self._locations = self.coordinator.reader_locations()
        return self._locations

    def registered_readers(self) -> dict[int, ReaderInfo]:
        locations = self.locations()
        return {s: ReaderInfo(s, locations.get(s, "")) for s in self.live}

    def assign_splits(self, assignment: Mapping[int, Sequence[SplitT]]) -> None:
        """Queues the assignment; ``flush`` stores every queued one in a single write."""
        unknown = set(assignment) - set(self.live)
        if unknown:
            raise ValueError(f"cannot assign splits to readers that are not registered: {unknown}")
        for subtask, splits in assignment.items():
            self._queued.setdefault(subtask, []).extend(splits)
            self.queued += len(splits)

    def flush(self) -> int:
        """Stores the queued assignments, then notifies their readers; returns how many."""
        if self._backlog is not None:
            self._backlog.flush()
        if not self._queued:
            return 0
        rows = {
            subtask: [(s.split_id, self.serializer.serialize(s), s.offset.position) for s in splits]
            for subtask, splits in self._queued.items()
            if splits
        }
        self._queued, self.queued = {}, 0
        assigned = self.store.record_assignments(rows, self.live, self.locations())
        for subtask, splits in assigned.items():
            if splits:
                self.coordinator.notify_assigned(subtask, splits)
        return sum(len(splits) for splits in assigned.values())

    def backlog(self) -> StoreBacklog[SplitT]:
        if self._backlog is None:
            self._backlog = StoreBacklog(self.store, self.serializer)
        return self._backlog

    def signal_no_more_splits(self, subtask: int) -> None:
        if subtask not in self.live:
            return  # gone: a reader that registers again asks again
        self.coordinator.signal_no_more_splits(subtask, self.live[subtask])
        self.coordinator.notify_assigned(subtask, [])

    def send_event_to_source_reader(self, subtask: int, event: SourceEvent) -> None:
        self.coordinator.send_to_reader(subtask, event)

    def revoke_splits(self, split_ids: Sequence[str]) -> list[SplitT]:
        self.flush()  # a split queued for a reader in this pass is in the store before it moves
        revoked = self.store.revoke_splits(split_ids)
        by_owner: dict[int, list[str]] = {}
        for owner, (split_id, _, _) in revoked:
            by_owner.setdefault(owner, []).append(split_id)
        for owner, ids in by_owner.items():
            self.coordinator.send_to_reader(owner, SourceEvent(SPLITS_REVOKED, {"split_ids": ids}))
        return [self.serializer.deserialize(payload).at(position) for _, (_, payload, position) in revoked]


class RunReaderContext(SourceReaderContext):
    """A reader's view of the run; a split request also asks for a prompt enumerator tick."""

    def __init__(
        self,
        coordinator: RunCoordinator,
        subtask: int,
        on_split_request: Callable[[], None],
    ) -> None:
        self.coordinator = coordinator
        self._subtask = subtask
        self.on_split_request = on_split_request

    @property
    def subtask(self) -> int:
        return self._subtask

    def send_split_request(self) -> None:
        self.coordinator.request_split(self._subtask)
        self.on_split_request()

    def send_source_event_to_coordinator(self, event: SourceEvent) -> None:
        self.coordinator.send_to_enumerator(event, origin=self._subtask)
        self.on_split_request()
