"""What the readers of container files (Avro blocks, Parquet row groups) share: each held
split's open file, kept between polls, checked against the file that was discovered, and
closed with its split."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, Generic, Protocol, TypeVar

import pyarrow as pa

from connectors.files.split import FileSplit
from source_support.api import BadRecord, RecordBatch
from source_support.errors import SplitFailed
from source_support.reader_base import SequentialSplitReader


def fail_if_changed(split: FileSplit, file: Any, close_split: Callable[[str], None]) -> None:
    """Fails the split if its open ``file`` is not the one discovered (replaced, or its size
    or mtime differ): records of two versions of a file must not mix in one run."""
    change = split.change_in(os.fstat(file.fileno()))
    if change is not None:
        close_split(split.split_id)
        raise SplitFailed(change, split_id=split.split_id)


class OpenFile(Protocol):
    """A split's open file and where the reader is in it."""

    @property
    def file(self) -> Any: ...


class EmptyFormat(Protocol):
    def empty(self) -> pa.Table: ...


S = TypeVar("S", bound=OpenFile)
F = TypeVar("F", bound=EmptyFormat)


class OpenFileSplitReader(SequentialSplitReader[FileSplit], Generic[S, F]):
    """Reads held file splits one after the other, each from the file it keeps open
    (``open``) between polls."""

    def __init__(self, fmt: F, *, first_bad_record_only: bool = False) -> None:
        super().__init__()
        self.fmt = fmt
        #: Stop at a block's first bad record (it fails the split; the rest do not matter).
        self.first_bad_record_only = first_bad_record_only
        self.open: dict[str, S] = {}

    def _open(self, split: FileSplit) -> S:
        """Opens ``split``'s file at the split's position (FileNotFoundError if it is gone)."""
        raise NotImplementedError

    def _held(self, split: FileSplit, at: Callable[[S], int]) -> S | None:
        """The split's open file as the last poll left it, if the reader stands at the split's
        position there (``at(state)``), else opened again at that position; None if the file
        was deleted after it was discovered."""
        state = self.open.get(split.split_id)
        if state is not None and at(state) == split.position:
            return state
        self.close_split(split.split_id)
        try:
            state = self._open(split)
        except FileNotFoundError:
            return None
        self.open[split.split_id] = state
        return state

    def _check_unchanged(self, split: FileSplit, state: S) -> None:
        fail_if_changed(split, state.file, self.close_split)

    def _gone(self, split: FileSplit) -> RecordBatch:
        return RecordBatch(
            split_id=split.split_id,
            start=split.offset,
            end=split.offset,
            records=self.fmt.empty(),
            bad_records=[BadRecord(split.position, "", "the file was deleted after it was discovered")],
            finished=True,
        )

    def close_split(self, split_id: str) -> None:
        state = self.open.pop(split_id, None)
        if state is not None:
            state.file.close()

    def close(self) -> None:
        super().close()
        for split_id in list(self.open):
            self.close_split(split_id)
