"""Lists the directory once, when the run starts, and hands out its files on request."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tests.connectors.lines.connector.split import LineFileSplit
from source_support.api import SplitEnumerator, SplitEnumeratorContext, splits_per_request


class LineFileEnumerator(SplitEnumerator[LineFileSplit]):
    """The splits wait in the run's backlog, not in the state: a tick reads only those it
    hands out. Splits that come back from a failed reader go to the head of the backlog."""

    def __init__(
        self, context: SplitEnumeratorContext[LineFileSplit], *, directory: Path, state: dict[str, Any] | None
    ) -> None:
        self.context = context
        self.directory = directory
        self.discovered = bool(state and state["discovered"])
        self.pending = state["pending"] if state else 0

    def start(self) -> None:
        if not self.discovered:  # start() runs on every rebuilt enumerator: discover once
            splits = [
                LineFileSplit(path=str(p), size=p.stat().st_size)
                for p in sorted(self.directory.iterdir())
                if p.is_file() and not p.name.startswith((".", "_"))
            ]
            self.context.backlog().append(splits)
            self.discovered, self.pending = True, len(splits)

    def handle_split_request(self, subtask: int, requester_location: str = "") -> None:
        if self.pending:
            count = splits_per_request(self.pending, self.context.current_parallelism)
            given = self.context.backlog().take(count)
            self.pending -= len(given)
            self.context.assign_splits({subtask: given})
        else:
            self.context.signal_no_more_splits(subtask)

    def add_splits_back(self, splits: Sequence[LineFileSplit], subtask: int) -> None:
        self.context.backlog().prepend(splits)
        self.pending += len(splits)

    def add_reader(self, subtask: int) -> None:
        """Readers ask for splits themselves."""

    def snapshot_state(self) -> dict[str, Any]:
        return {"discovered": self.discovered, "pending": self.pending}

    def is_exhausted(self) -> bool:
        return self.discovered and not self.pending

    def pending_count(self) -> int:
        return self.pending
