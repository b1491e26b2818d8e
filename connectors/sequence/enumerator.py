"""Hands out range splits in order; the state is the next index plus splits that came back."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from connectors.sequence.split import NumberRangeSerializer, NumberRangeSplit
from source_support.api import SplitEnumerator, SplitEnumeratorContext, splits_per_request


class NumberSequenceEnumerator(SplitEnumerator[NumberRangeSplit]):
    def __init__(
        self,
        context: SplitEnumeratorContext[NumberRangeSplit],
        *,
        count: int,
        splits: int,
        state: dict[str, Any] | None,
    ) -> None:
        self.context = context
        self.count = count
        self.splits = splits
        self.next_index = (state or {}).get("next_index", 0)
        serializer = NumberRangeSerializer()
        self.returned = [serializer.deserialize(s) for s in (state or {}).get("returned", [])]

    def start(self) -> None:
        """Nothing to discover: split i is computed from i."""

    def split(self, index: int) -> NumberRangeSplit:
        start = index * self.count // self.splits
        return NumberRangeSplit(index, start, (index + 1) * self.count // self.splits, start)

    def handle_split_request(self, subtask: int, requester_location: str = "") -> None:
        if self.is_exhausted():
            self.context.signal_no_more_splits(subtask)
            return
        count = splits_per_request(self.pending_count(), self.context.current_parallelism)
        given, self.returned = self.returned[:count], self.returned[count:]
        fresh = min(count - len(given), self.splits - self.next_index)
        given += [self.split(i) for i in range(self.next_index, self.next_index + fresh)]
        self.next_index += fresh
        self.context.assign_splits({subtask: given})

    def add_splits_back(self, splits: Sequence[NumberRangeSplit], subtask: int) -> None:
        self.returned[:0] = list(splits)

    def add_reader(self, subtask: int) -> None:
        """Readers ask for splits themselves."""

    def snapshot_state(self) -> dict[str, Any]:
        serializer = NumberRangeSerializer()
        return {"next_index": self.next_index, "returned": [serializer.serialize(s) for s in self.returned]}

    def is_exhausted(self) -> bool:
        return self.next_index >= self.splits and not self.returned

    def pending_count(self) -> int:
        return self.splits - self.next_index + len(self.returned)
