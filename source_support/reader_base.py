"""The reader loop shared by every connector (Flink ``SourceReaderBase`` + ``SplitReader``).

A connector implements a ``SplitReader``: it is told which splits it holds
(``handle_splits_changes``), reads from all of them (``fetch``, which may return nothing:
a stream that is caught up), can be woken from a blocking read (``wake_up``), and is told
when positions are durably committed (``notify_checkpoint_complete``), so it acknowledges
upstream only then. The order in which held splits are read is the connector's policy
(files: one after another; streams: all at once, so no held split starves).

``SourceReaderBase`` owns which splits are held, their positions, and the end of input.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Generic

from source_support.api import RecordBatch, SourceEvent, SourceReader, SourceReaderContext, SplitT
from source_support.errors import SplitFailed
from source_support.formats import ReadError
from source_support.formats.drift import SchemaDrift


class SplitReader(ABC, Generic[SplitT]):
    """Reads the splits it holds (Flink ``SplitReader``); holds whatever handles it keeps
    open between calls."""

    @abstractmethod
    def handle_splits_changes(self, added: Sequence[SplitT], removed: Sequence[str]) -> None:
        """Starts reading ``added`` (each from its position) and drops ``removed``, releasing
        their handles. Never blocks."""

    @abstractmethod
    def fetch(self, max_records: int, timeout_s: float) -> list[RecordBatch]:
        """Reads from the held splits: at most one batch of at most ``max_records`` records
        per split, each starting where the split's last batch ended.

        An empty list means nothing now. A connector whose data may still arrive (a
        stream) blocks up to ``timeout_s`` for it, and returns early when woken; one that
        always has data (a file) never waits. A split that cannot go on raises
        ``SplitFailed`` naming it.
        """

    def wake_up(self) -> None:
        """Makes a blocked ``fetch`` return soon (from another thread); the default does
        nothing, for connectors whose ``fetch`` never blocks."""

    def notify_checkpoint_complete(self, positions: Mapping[str, int]) -> None:
        """``positions`` (split id -> position) are durably committed: a connector may now
        acknowledge upstream what lies before them (XACK, a NATS ack, an offset commit).
        Nothing before this call may be acknowledged: a crash replays from the last commit."""

    def handle_source_event(self, event: SourceEvent) -> None:
        """Reacts to an enumerator's event; the default ignores it."""

    def describe(self, split: SplitT, position: int, *, line: int | None = None) -> str:
        """Where ``position`` of ``split`` is (on ``line`` if known), in words a person can act on."""
        return f"split {split.split_id} at position {position}"

    def close(self) -> None:
        """Releases every handle."""


class SourceReaderBase(SourceReader[SplitT]):
    """Tracks the held splits and their positions over a connector's ``SplitReader``.

    ``poll`` hands out one batch at a time from what the last ``fetch`` returned; a split
    whose batch says ``finished`` is dropped (and its handles released) at once.
    """

    def __init__(
        self,
        context: SourceReaderContext,
        split_reader: SplitReader[SplitT],
        *,
        batch_size: int,
    ) -> None:
        self.context = context
        self.split_reader = split_reader
        self.batch_size = batch_size
        self._splits: dict[str, SplitT] = {}
        self._ready: deque[RecordBatch] = deque()
        #: Splits that finished lately: a bad record of a last batch is described after the
        #: split was dropped.
        self._finished: dict[str, SplitT] = {}
        self._no_more_splits = False

    def add_splits(self, splits: Iterable[SplitT]) -> None:
        added = [s for s in splits if s.split_id not in self._splits]
        for split in added:
            self._splits[split.split_id] = split
        if added:
            self.split_reader.handle_splits_changes(added, [])

    def poll(self, timeout_s: float = 0.0) -> RecordBatch | None:
        if not self._ready and self._splits:
            self._fetch(timeout_s)
        return self._ready.popleft() if self._ready else None

    def has_buffered(self) -> bool:
        return bool(self._ready)

    def _fetch(self, timeout_s: float) -> None:
        try:
            batches = self.split_reader.fetch(self.batch_size, timeout_s)
        except SplitFailed as failed:
            self.remove_split(failed.split_id)
            raise
        except SchemaDrift as exc:  # where it was seen, and the change, for the run
            split_id = next(iter(self._splits))
            where = self.describe(split_id, exc.change.position) if exc.change.position >= 0 else ""
            self.remove_split(split_id)
            change = replace(exc.change, where=where)
            message = f"{where}: {exc}" if where else str(exc)
            raise SplitFailed(message, split_id=split_id, schema_changes=[change]) from exc
        except ReadError as exc:  # a connector that did not say which split: the one it reads
            split_id = next(iter(self._splits))
            self.remove_split(split_id)
            raise SplitFailed(str(exc), split_id=split_id) from exc
        finished: dict[str, SplitT] = {}
        for batch in batches:
            split = self._splits.get(batch.split_id)
            if split is None:
                continue  # removed while it was being read
            if batch.finished:
                finished[batch.split_id] = split
                self.remove_split(batch.split_id)
            else:
                self._splits[batch.split_id] = split.at(batch.end.position)
            self._ready.append(batch)
        if finished:  # every split one fetch finished (several may end in one fetch)
            self._finished = finished

    def describe(self, split_id: str, position: int, *, line: int | None = None) -> str:
        split = self._splits.get(split_id) or self._finished.get(split_id)
        if split is None:
            return f"split {split_id} at position {position}"
        return self.split_reader.describe(split, position, line=line)

    def remove_split(self, split_id: str) -> None:
        if self._splits.pop(split_id, None) is not None:
            self.split_reader.handle_splits_changes([], [split_id])
        self._ready = deque(b for b in self._ready if b.split_id != split_id)

    def wake_up(self) -> None:
        self.split_reader.wake_up()

    def notify_checkpoint_complete(self, positions: Mapping[str, int]) -> None:
        if positions:
            self.split_reader.notify_checkpoint_complete(positions)

    def handle_source_event(self, event: SourceEvent) -> None:
        self.split_reader.handle_source_event(event)

    def notify_no_more_splits(self) -> None:
        self._no_more_splits = True

    @property
    def no_more_splits(self) -> bool:
        return self._no_more_splits

    def has_splits(self) -> bool:
        return bool(self._splits) or bool(self._ready)

    def snapshot_state(self) -> list[SplitT]:
        return list(self._splits.values())

    def close(self) -> None:
        self.split_reader.close()


class SequentialSplitReader(SplitReader[SplitT]):
    """The policy of bounded sources such as files: the held splits are read one after the
    other, in the order they were added, one batch per ``fetch``; a connector implements
    ``read_batch`` for the split at the head. Reading one split to its end before the next
    keeps a single file open and reads it sequentially, which is what a disk likes best."""

    def __init__(self) -> None:
        self.splits: dict[str, SplitT] = {}

    def handle_splits_changes(self, added: Sequence[SplitT], removed: Sequence[str]) -> None:
        for split in added:
            self.splits[split.split_id] = split
        for split_id in removed:
            if self.splits.pop(split_id, None) is not None:
                self.close_split(split_id)

    def fetch(self, max_records: int, timeout_s: float) -> list[RecordBatch]:
        if not self.splits:
            return []
        split_id, split = next(iter(self.splits.items()))
        batch = self.read_batch(split, max_records)
        if batch.finished:
            del self.splits[split_id]
            self.close_split(split_id)
        else:
            self.splits[split_id] = split.at(batch.end.position)
        return [batch]

    @abstractmethod
    def read_batch(self, split: SplitT, max_records: int) -> RecordBatch:
        """Up to ``max_records`` records from ``split``'s current position."""

    def close_split(self, split_id: str) -> None:
        """Releases the handles of a split that is finished or gone."""

    def close(self) -> None:
        for split_id in list(self.splits):
            self.close_split(split_id)
        self.splits.clear()
