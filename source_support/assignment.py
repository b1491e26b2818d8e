"""Balanced, sticky assignment of unbounded splits to readers (what Kafka's cooperative
sticky assignor does for partitions): every split on exactly one live reader, loads that
differ by at most one, and as few moves as that allows when readers come and go."""

from __future__ import annotations

import heapq
from collections.abc import Callable, Mapping, Sequence

from source_support.api import SplitEnumeratorContext, SplitT


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


def place_splits(
    context: SplitEnumeratorContext[SplitT],
    owners: Mapping[str, int | None],
    *,
    new_split: Callable[[str], SplitT],
    split_id: Callable[[str], str],
) -> tuple[dict[str, int], set[str]]:
    """Spreads an unbounded source's splits over the live readers (``balance``) and
    assigns the moves: new and returned splits (owner None) go to the least-loaded
    readers, and a reader that joined takes its share, revoked from the others. Splits of
    a reader that is gone wait until the runtime gives them back.

    ``owners`` maps each split's key to its reader; ``new_split(key)`` is the split of a
    key that has none yet, ``split_id(key)`` its id. Returns the new reader of each key
    assigned, and the keys found finished (to move, but no reader held them)."""
    live = sorted(context.registered_readers())
    if not live:
        return {}, set()
    movable = {k: owner for k, owner in owners.items() if owner is None or owner in live}
    moves = balance(movable, live)
    if not moves:
        return {}, set()
    splits = {k: new_split(k) for k in moves if movable[k] is None}
    held = [k for k in moves if movable[k] is not None]
    finished: set[str] = set()
    if held:
        ids = {split_id(k): k for k in held}
        revoked = {ids[s.split_id]: s for s in context.revoke_splits(list(ids))}
        for key in held:
            if key in revoked:
                splits[key] = revoked[key]
            else:
                finished.add(key)
    assignment: dict[int, list[SplitT]] = {}
    for key, split in splits.items():
        assignment.setdefault(moves[key], []).append(split)
    if assignment:
        context.assign_splits(assignment)
    return {key: moves[key] for key in splits}, finished
