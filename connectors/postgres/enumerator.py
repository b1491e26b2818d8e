"""Cuts a table into chunks once, when the run starts, and hands them out on request.

The cut (``ChunkPlan``) is computed inside the exported snapshot (``snapshot``), so it sees
the rows the chunks will read: an integer key is cut into ``count`` even ranges of ``step``
keys from its minimum (Flink CDC's evenly-sized chunks: ``step = (max - min + 1) x
chunk_rows / rows``), the last one open above; a table without a usable key into ctid
page ranges of ``step`` pages (PeerDB), the last one open above too, so rows on pages
past the estimate are read. The state is the plan, the next chunk's index and the chunks
that came back: O(1) in the number of chunks (chunk ``i`` is computed from ``i``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from connectors.postgres.split import ChunkSplit, ChunkSplitSerializer
from source_support.api import SplitEnumerator, SplitEnumeratorContext, splits_per_request


@dataclass(frozen=True)
class ChunkPlan:
    """How a table is cut: ``count`` chunks of ``kind`` from ``low``, ``step`` wide each
    (keys or pages), about ``estimate`` rows each, all reading ``snapshot``."""

    kind: str
    low: int
    step: int
    count: int
    estimate: int
    snapshot: str | None = None
    #: Incremental: the rows read have ``mark_low < cursor <= mark_high`` (the marks as
    #: text; ``mark_low`` None: from the first row). ``mark_high`` None: no row to read.
    mark_low: str | None = None
    mark_high: str | None = None
    #: cdc: the slot's consistent point; the change stream is one more split after the chunks.
    stream_lsn: int | None = None

    @property
    def splits(self) -> int:
        return self.count + (1 if self.stream_lsn is not None else 0)

    def chunk(self, index: int) -> ChunkSplit:
        if self.stream_lsn is not None and index == self.count:
            return ChunkSplit("cdc", index, self.stream_lsn, None, lsn=self.stream_lsn)
        low = self.low + index * self.step
        high = None if index == self.count - 1 else low + self.step
        if self.kind == "query":
            low, high = 0, None
        return ChunkSplit(
            self.kind,
            index,
            low,
            high,
            0,
            self.estimate,
            self.snapshot,
            self.mark_low,
            self.mark_high,
            self.stream_lsn,
        )


class ChunkEnumerator(SplitEnumerator[ChunkSplit]):
    """Hands out the plan's chunks in order; chunks that come back first."""

    def __init__(
        self,
        context: SplitEnumeratorContext[ChunkSplit],
        *,
        plan: Callable[[], ChunkPlan],
        state: dict[str, Any] | None,
    ) -> None:
        self.context = context
        self.make_plan = plan
        state = state or {}
        self.plan = ChunkPlan(**state["plan"]) if state.get("plan") else None
        self.next_index: int = state.get("next_index", 0)
        serializer = ChunkSplitSerializer()
        self.returned = [serializer.deserialize(s) for s in state.get("returned", [])]

    def start(self) -> None:
        if self.plan is None:
            self.plan = self.make_plan()

    @property
    def count(self) -> int:
        return self.plan.splits if self.plan is not None else 0

    def handle_split_request(self, subtask: int, requester_location: str = "") -> None:
        if self.is_exhausted():
            self.context.signal_no_more_splits(subtask)
            return
        assert self.plan is not None
        share = splits_per_request(self.pending_count(), self.context.current_parallelism)
        given, self.returned = self.returned[:share], self.returned[share:]
        fresh = min(share - len(given), self.count - self.next_index)
        given += [self.plan.chunk(i) for i in range(self.next_index, self.next_index + fresh)]
        self.next_index += fresh
        self.context.assign_splits({subtask: given})

    def add_splits_back(self, splits: Sequence[ChunkSplit], subtask: int) -> None:
        self.returned[:0] = list(splits)

    def add_reader(self, subtask: int) -> None:
        """Readers ask for chunks themselves."""

    def snapshot_state(self) -> dict[str, Any]:
        serializer = ChunkSplitSerializer()
        return {
            "plan": asdict(self.plan) if self.plan is not None else None,
            "next_index": self.next_index,
            "returned": [serializer.serialize(s) for s in self.returned],
        }

    def is_exhausted(self) -> bool:
        return self.plan is not None and self.next_index >= self.count and not self.returned

    def pending_count(self) -> int:
        return self.count - self.next_index + len(self.returned)
