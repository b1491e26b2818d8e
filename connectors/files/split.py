"""A byte range of one file: the unit of work of the files source."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from source_support.api import OffsetEntry, SourceSplit, SplitSerializer

WHOLE_FILE = 2**62  # the end of a range that runs to the end of the file (gzip)


@dataclass(frozen=True)
class FileSplit(SourceSplit):
    """Records of ``path`` whose first byte lies in ``[start, end)``, read up to ``position``.

    A gzip file cannot be cut, so it is one split over the whole file and its positions
    count uncompressed bytes.
    """

    path: str
    start: int
    end: int
    position: int
    compressed: bool = False

    @property
    def split_id(self) -> str:
        return f"{self.path}@{self.start}"

    @property
    def offset(self) -> OffsetEntry:
        return OffsetEntry(key=self.split_id, position=self.position)

    def at(self, position: int) -> FileSplit:
        return replace(self, position=position)


class FileSplitSerializer(SplitSerializer[FileSplit]):
    def serialize(self, split: FileSplit) -> dict[str, Any]:
        return {
            "path": split.path,
            "start": split.start,
            "end": split.end,
            "position": split.position,
            "compressed": split.compressed,
        }

    def deserialize(self, data: dict[str, Any]) -> FileSplit:
        return FileSplit(**data)
