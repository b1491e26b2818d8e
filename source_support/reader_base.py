"""The reader loop shared by every connector (Flink ``SourceReaderBase`` + ``SplitReader``).

A connector implements only ``SplitReader.fetch``: read up to ``max_records`` from one split
at its current position. ``SourceReaderBase`` owns which splits are held, their positions,
and the end of input.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable
from typing import Generic

from source_support.api import RecordBatch, SourceReader, SourceReaderContext, SplitT
from source_support.errors import SplitFailed
from source_support.formats import ReadError


class SplitReader(ABC, Generic[SplitT]):
    """Reads one batch of one split; holds whatever handles it keeps open between calls."""

    @abstractmethod
    def fetch(self, split: SplitT, max_records: int) -> RecordBatch:
        """Up to ``max_records`` records from ``split``'s current position."""

    def close_split(self, split_id: str) -> None:
        """Releases the handles of a split that is finished or gone."""

    def describe(self, split: SplitT, position: int, *, line: int | None = None) -> str:
        """Where ``position`` of ``split`` is (on ``line`` if known), in words a person can act on."""
        return f"split {split.split_id} at position {position}"

    def close(self) -> None:
        """Releases every handle."""


class SourceReaderBase(SourceReader[SplitT]):
    """Reads held splits in assignment order, one batch of one split per ``poll``.

    Splits are read one after the other rather than interleaved: for files this keeps a
    single file open and reads it sequentially, which is what the disk likes best.
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
        #: The split that finished last: a bad record of its last batch is described after
        #: the split was dropped.
        self._finished: SplitT | None = None
        self._no_more_splits = False

    def add_splits(self, splits: Iterable[SplitT]) -> None:
        for split in splits:
            self._splits[split.split_id] = split

    def poll(self) -> RecordBatch | None:
        if not self._splits:
            return None
        split_id, split = next(iter(self._splits.items()))
        try:
            batch = self.split_reader.fetch(split, self.batch_size)
        except ReadError as exc:
            self.remove_split(split_id)
            raise SplitFailed(str(exc), split_id=split_id) from exc
        if batch.finished:
            self._finished = split
            self.remove_split(split_id)
        else:
            self._splits[split_id] = split.at(batch.end.position)
        return batch

    def describe(self, split_id: str, position: int, *, line: int | None = None) -> str:
        split = self._splits.get(split_id)
        if split is None and self._finished is not None and self._finished.split_id == split_id:
            split = self._finished
        if split is None:
            return f"split {split_id} at position {position}"
        return self.split_reader.describe(split, position, line=line)

    def remove_split(self, split_id: str) -> None:
        if self._splits.pop(split_id, None) is not None:
            self.split_reader.close_split(split_id)

    def notify_no_more_splits(self) -> None:
        self._no_more_splits = True

    @property
    def no_more_splits(self) -> bool:
        return self._no_more_splits

    def has_splits(self) -> bool:
        return bool(self._splits)

    def snapshot_state(self) -> list[SplitT]:
        return list(self._splits.values())

    def close(self) -> None:
        self.split_reader.close()
