"""A range of numbers ``[start, end)``, read up to ``position``."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Self

from source_support.api import OffsetEntry, SourceSplit, SplitSerializer


@dataclass(frozen=True)
class NumberRangeSplit(SourceSplit):
    index: int
    start: int
    end: int
    position: int

    @property
    def split_id(self) -> str:
        return f"range-{self.index}"

    @property
    def offset(self) -> OffsetEntry:
        return OffsetEntry(key=self.split_id, position=self.position)

    def at(self, position: int) -> Self:
        return replace(self, position=position)


class NumberRangeSerializer(SplitSerializer[NumberRangeSplit]):
    def serialize(self, split: NumberRangeSplit) -> dict[str, Any]:
        return {"index": split.index, "start": split.start, "end": split.end, "position": split.position}

    def deserialize(self, data: dict[str, Any]) -> NumberRangeSplit:
        return NumberRangeSplit(**data)
