"""A split of a stream whose progress is one integer kept in the split itself."""

from __future__ import annotations

from dataclasses import Field, replace
from typing import Any, ClassVar, Self

from source_support.api import OffsetEntry, SourceSplit


class PositionedSplit(SourceSplit):
    """A split whose progress is its field ``position`` (an offset, a stream sequence, a
    count of records): its checkpoint entry is its split id at that position, and ``at``
    is a copy of it at another.

    A subclass is a frozen dataclass that declares ``position`` among its own fields (in
    its own order, which its serializer and callers rely on); a split whose data lives
    under another name than its id overrides ``offset``.
    """

    #: Set by ``@dataclass`` on each subclass (what ``dataclasses.replace`` needs).
    __dataclass_fields__: ClassVar[dict[str, Field[Any]]]
    position: int

    @property
    def offset(self) -> OffsetEntry:
        return OffsetEntry(key=self.split_id, position=self.position)

    def at(self, position: int) -> Self:
        return replace(self, position=position)
