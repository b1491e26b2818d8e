"""One text file, read up to byte ``position`` of the ``size`` it had when it was found."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from source_support.api import OffsetEntry, SourceSplit, SplitSerializer


@dataclass(frozen=True)
class LineFileSplit(SourceSplit):
    path: str
    size: int
    position: int = 0

    @property
    def split_id(self) -> str:
        return self.path

    @property
    def offset(self) -> OffsetEntry:
        return OffsetEntry(key=self.path, position=self.position)

    def at(self, position: int) -> LineFileSplit:
        return replace(self, position=position)


class LineFileSerializer(SplitSerializer[LineFileSplit]):
    def serialize(self, split: LineFileSplit) -> dict[str, Any]:
        return {"path": split.path, "size": split.size, "position": split.position}

    def deserialize(self, data: dict[str, Any]) -> LineFileSplit:
        return LineFileSplit(**data)
