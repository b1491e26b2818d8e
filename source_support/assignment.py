"""Balanced, sticky assignment of unbounded splits to readers (what Kafka's cooperative
sticky assignor does for partitions): every split on exactly one live reader, loads that
differ by at most one, and as few moves as that allows when readers come and go."""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence


def balance(owners: Mapping[str, int | None], readers: Sequence[int]) -> dict[str, int]:
    """The moves (split id -> new reader) that balance ``owners`` over ``readers``.

    ``owners`` maps each split to the reader that holds it; None, or a reader not among
    ``readers``, means the split needs one. Each reader keeps what it holds up to its
    share (readers that hold the most get the larger shares, so fewest splits move); what
    is over a share, and every split without a live reader, goes to the least-loaded
    reader below its share. Deterministic: the same input gives the same moves. No
    readers: no moves.
    """
    live = sorted(set(readers))
    if not live:
        return {}
    held: dict[int, list[str]] = {reader: [] for reader in live}
    free: list[str] = []
    for split_id in sorted(owners):
        owner = owners[split_id]
        (held[owner] if owner is not None and owner in held else free).append(split_id)
    base, extra = divmod(len(owners), len(live))
    ranked = sorted(live, key=lambda reader: (-len(held[reader]), reader))
    share = {reader: base + (rank < extra) for rank, reader in enumerate(ranked)}
    for reader in live:
        excess = len(held[reader]) - share[reader]
        if excess > 0:
            free.extend(held[reader][-excess:])
            del held[reader][-excess:]
    room = [(len(held[r]), r) for r in live if len(held[r]) < share[r]]
    heapq.heapify(room)
    moves: dict[str, int] = {}
    for split_id in free:
        load, reader = heapq.heappop(room)
        moves[split_id] = reader
        if load + 1 < share[reader]:
            heapq.heappush(room, (load + 1, reader))
    return moves
