"""What enumerators whose splits wait in the run's backlog share: handing a reader its
share of the waiting splits, and serving the readers that asked when none waited (Flink's
``ContinuousFileSplitEnumerator`` keeps them as ``readersAwaitingSplit``)."""

from __future__ import annotations

from collections.abc import Sequence

from source_support.api import SplitEnumerator, SplitEnumeratorContext, SplitT, splits_per_request


class BacklogEnumerator(SplitEnumerator[SplitT]):
    """An enumerator with ``pending`` splits waiting in ``context.backlog()`` and the
    readers in ``awaiting`` that asked while none waited; its subclass sets the three and
    keeps ``pending`` and ``awaiting`` in its state."""

    context: SplitEnumeratorContext[SplitT]
    pending: int
    awaiting: list[int]

    def add_splits_back(self, splits: Sequence[SplitT], subtask: int) -> None:
        """Splits back from a failed reader go to the head of the backlog, to be read first."""
        self.context.backlog().prepend(splits)
        self.pending += len(splits)
        self.serve_awaiting()

    def add_reader(self, subtask: int) -> None:
        """Readers ask for splits themselves; nothing is pushed on registration."""

    def assign_share(self, subtask: int) -> bool:
        """Gives ``subtask`` its share of the backlog; False if nothing waits."""
        if not self.pending:
            return False
        count = splits_per_request(self.pending, self.context.current_parallelism)
        given = self.context.backlog().take(count)
        self.pending = self.pending - len(given) if given else 0  # 0: the backlog ran dry first
        if given:
            self.context.assign_splits({subtask: given})
        return bool(given)

    def serve_awaiting(self) -> None:
        """Hands waiting splits to the readers that asked and still wait, in the order they
        asked; tells them there are no more once the enumerator is exhausted. A reader that
        has gone is forgotten (it asks again when it comes back)."""
        if not self.awaiting:
            return
        registered = self.context.registered_readers()
        waiting: list[int] = []
        for subtask in self.awaiting:
            if subtask not in registered or self.assign_share(subtask):
                continue
            if self.is_exhausted():
                self.context.signal_no_more_splits(subtask)
            else:
                waiting.append(subtask)
        self.awaiting = waiting
