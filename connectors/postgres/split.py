"""A chunk of a table: the unit of work of the postgres source.

A chunk is a key range ``[low, high)`` of an integer key, a ``ctid`` page range
``[low, high)`` (a table without a usable key, as PeerDB cuts them), or the whole result
of a ``query``. ``high`` None: no upper bound (the last chunk). ``position`` counts how far
the chunk was read, so that it only grows from 0 (nothing read):

- key: ``last key landed - low + 1`` (the next read takes ``key >= low + position``);
- ctid: ``(block << 16 | line) - (low << 16) + 1`` of the last row landed;
- query: the rows landed (the next read skips them: exact when the query orders its rows
  by a unique column and reads the held snapshot);
- cdc (the change stream of a cdc source, ``low`` the slot's consistent point): ``P - low``
  where every transaction committed below LSN ``P`` has landed (``connectors.postgres.cdc``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Self

from source_support.api import OffsetEntry, SourceSplit, SplitSerializer

KINDS = ("key", "ctid", "query", "cdc")
#: The id of a cdc source's one change-stream split.
STREAM_SPLIT_ID = "changes"
#: A ctid as one integer: its block number shifted past its line number (16 bits).
LINE_BITS = 16


@dataclass(frozen=True)
class ChunkSplit(SourceSplit):
    """Rows of ``relation`` (``schema.table``; the query's text for a query) in ``[low,
    high)`` of ``kind``, read up to ``position``; ``snapshot``: the exported snapshot every
    chunk reads (None: each reads its own); ``estimate``: about how many rows it holds."""

    kind: str
    index: int
    low: int
    high: int | None
    position: int = 0
    estimate: int = 0
    snapshot: str | None = None
    #: Incremental: only rows with ``mark_low < cursor <= mark_high`` (text forms).
    mark_low: str | None = None
    mark_high: str | None = None
    #: cdc: the slot's consistent point (the LSN of the snapshot rows), None otherwise.
    lsn: int | None = None

    @property
    def split_id(self) -> str:
        return STREAM_SPLIT_ID if self.kind == "cdc" else f"chunk-{self.index}"

    @property
    def offset(self) -> OffsetEntry:
        return OffsetEntry(key=self.split_id, position=self.position)

    def at(self, position: int) -> Self:
        return replace(self, position=position)

    @property
    def resume_after(self) -> int | None:
        """The key (key chunk) or encoded ctid (ctid chunk) of the last row landed; None
        before the first."""
        if self.position == 0 or self.kind == "query":
            return None
        base = self.low if self.kind == "key" else self.low << LINE_BITS
        return base + self.position - 1

    def position_of(self, last: int) -> int:
        """The position after the row whose key (or encoded ctid) is ``last``."""
        base = self.low if self.kind == "key" else self.low << LINE_BITS
        return last - base + 1


class ChunkSplitSerializer(SplitSerializer[ChunkSplit]):
    def serialize(self, split: ChunkSplit) -> dict[str, Any]:
        return {
            "kind": split.kind,
            "index": split.index,
            "low": split.low,
            "high": split.high,
            "position": split.position,
            "estimate": split.estimate,
            "snapshot": split.snapshot,
            **({"mark_low": split.mark_low} if split.mark_low is not None else {}),
            **({"mark_high": split.mark_high} if split.mark_high is not None else {}),
            **({"lsn": split.lsn} if split.lsn is not None else {}),
        }

    def deserialize(self, data: dict[str, Any]) -> ChunkSplit:
        return ChunkSplit(**data)
