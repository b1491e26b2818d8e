"""What must survive a crash (splits, checkpoints, who was assigned what) is kept by a
``SplitStore`` the runtime provides; ``StoreBacklog`` is the enumerator's backlog in it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from source_support.api import SplitBacklog, SplitSerializer, SplitT
from source_support.coordination.messages import AssignedSplit


class SplitStore(Protocol):
    """Durable split state: what was assigned to whom, and how far each split was read."""

    def record_assignments(
        self,
        assignments: dict[int, list[AssignedSplit]],
        tokens: dict[int, str],
        locations: dict[int, str],
    ) -> dict[int, list[AssignedSplit]]:
        """Persists the splits as owned by each subtask's token; returns those it assigned,
        each with its stored checkpoint (a split that is out with a reader is refused)."""
        ...

    def owned_splits(self, subtask: int, token: str) -> list[AssignedSplit]:
        """Each unfinished split this token owns, at its checkpoint."""
        ...

    def reclaim_expired(self, live: dict[int, str]) -> dict[int, list[AssignedSplit]]:
        """Ends assignments whose reader is not in ``live``; returns their splits by subtask."""
        ...

    def revoke_splits(self, split_ids: Sequence[str]) -> list[tuple[int, AssignedSplit]]:
        """Takes the assigned splits among ``split_ids`` back from their owners; returns
        (old owner subtask, split at its checkpoint) for each."""
        ...

    def backlog_add(self, payloads: Sequence[dict[str, Any]], *, front: bool) -> None:
        """Queues serialized splits at the tail (or, in order, at the head)."""

    def backlog_head(self, count: int) -> list[tuple[int, dict[str, Any]]]:
        """Up to ``count`` (key, serialized split) pairs from the head, left in place."""
        ...

    def backlog_remove(self, keys: Sequence[int]) -> None:
        """Removes the splits of those keys (they were handed out)."""


class StoreBacklog(SplitBacklog[SplitT]):
    """The backlog in the ``SplitStore``, written in the tick's transaction.

    Takes are served from a block read once per pass and removed from the store together
    at ``flush``, so a pass that answers many requests makes two statements, not two per
    request.
    """

    BLOCK = 2_000

    def __init__(self, store: SplitStore, serializer: SplitSerializer[SplitT]) -> None:
        self.store, self.serializer = store, serializer
        self._block: list[tuple[int, dict[str, Any]]] = []  # (key, payload) read, not yet taken
        self._taken: list[int] = []

    def append(self, splits: Sequence[SplitT]) -> None:
        self.flush()
        self.store.backlog_add([self.serializer.serialize(s) for s in splits], front=False)

    def prepend(self, splits: Sequence[SplitT]) -> None:
        self.flush()
        self.store.backlog_add([self.serializer.serialize(s) for s in splits], front=True)

    def take(self, count: int) -> list[SplitT]:
        if len(self._block) < count:
            self.flush()
            self._block = self.store.backlog_head(max(count, self.BLOCK))
        given, self._block = self._block[:count], self._block[count:]
        self._taken += [key for key, _ in given]
        return [self.serializer.deserialize(payload) for _, payload in given]

    def flush(self) -> None:
        """Removes what was taken from the store, and forgets what was read ahead."""
        if self._taken:
            self.store.backlog_remove(self._taken)
        self._block, self._taken = [], []
