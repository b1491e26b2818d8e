"""A split of a stream whose progress is one integer kept in the split itself."""

from __future__ import annotations

from dataclasses import Field, replace
from typing import Any, ClassVar, Self

from source_support.api import OffsetEntry, SourceSplit

#: What a stream source does when the log a split read is not there any more under its
#: name (``source.on_reset``, one vocabulary for every source that has it): ``fail`` fails
#: the split naming both logs; ``restart`` reads the new log from its start as the split's
#: next generation (``generation_split_id``).
ON_RESET_POLICIES = ("fail", "restart")


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


def generation_split_id(key: str, generation: int) -> str:
    """The split id of a generation of the split of ``key`` (a stream, a partition): the
    key itself for the first. A later generation reads a new log under the same name (a
    stream or topic deleted and made again, a server restarted empty) from its start, as a
    split of its own, so its landed files and checkpoint never mix with the old one's."""
    return key if not generation else f"{key} (generation {generation + 1})"


def generation_key(split_id: str) -> str:
    """The key of a split id that ``generation_split_id`` made (keys hold no `` (``)."""
    return split_id.split(" (generation ", 1)[0]
