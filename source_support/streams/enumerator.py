"""The enumerators of stream sources: splits kept balanced and sticky over the live readers,
found by a discovery that runs at the start and on an interval, until a ``[stop]`` rule
means no split found later could hold anything before it."""

from __future__ import annotations

import time
from abc import abstractmethod
from collections.abc import Callable, Mapping
from typing import Any

from source_support.api import SplitEnumerator, SplitEnumeratorContext, SplitT
from source_support.assignment import place_splits


class DiscoveringEnumerator(SplitEnumerator[SplitT]):
    """An unbounded source's enumerator that discovers its splits at the start and every
    ``discovery_interval_ms`` on ``clock``, and keeps them spread over the live readers
    (``_rebalance``) when a reader joins and when one asks for splits.

    A ``[stop]`` rule (``stop``) ends the input once no split found from then on could
    hold anything before it (``_no_new_split_qualifies``): discovery stops, and once
    every split is assigned a reader that asks is told there are no more.

    A connector restores ``last_discovery_clock_ms`` (when the last discovery ran, in ms
    of ``clock``) from its state, says whether a discovery ran (``_discovery_ran``), and
    counts the splits that wait for a reader (``pending_count``).
    """

    #: When the last discovery ran, in ms of ``clock``.
    last_discovery_clock_ms: int

    def __init__(
        self,
        context: SplitEnumeratorContext[SplitT],
        *,
        discovery_interval_ms: int,
        stop: Mapping[str, Any],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.context = context
        self.discovery_interval_ms = discovery_interval_ms
        self.stop = dict(stop or {})
        self.clock = clock

    def handle_split_request(self, subtask: int, requester_location: str = "") -> None:
        self._rebalance()
        if self.is_exhausted():
            # A reader adopts what it was assigned before it takes this as its end.
            self.context.signal_no_more_splits(subtask)

    def add_reader(self, subtask: int) -> None:
        self._rebalance()

    def is_exhausted(self) -> bool:
        """True once no split found later could qualify and every split has been assigned."""
        return self._no_new_split_qualifies() and self.pending_count() == 0

    @abstractmethod
    def pending_count(self) -> int: ...

    # Discovery

    @abstractmethod
    def _discovery_ran(self) -> bool:
        """Whether a discovery ran in this run."""

    @abstractmethod
    def _no_new_split_qualifies(self) -> bool:
        """Whether a split found from now on could only hold records past the stop."""

    def _discovery_due(self) -> bool:
        """At the start, then every ``discovery_interval_ms`` while a split found later
        could still qualify."""
        if not self._discovery_ran():
            return True
        if self._no_new_split_qualifies():
            return False
        return self.clock() * 1000 - self.last_discovery_clock_ms >= self.discovery_interval_ms

    # Assignment

    @abstractmethod
    def _rebalance(self) -> None:
        """Assigns the splits that wait, and moves some to a reader that has too few."""


class KeyedSplitEnumerator(DiscoveringEnumerator[SplitT]):
    """A ``DiscoveringEnumerator`` whose splits are named by a key (a topic partition, a
    subject filter, a stream key).

    ``splits`` maps the key of each split not done to what the enumerator knows of it
    (its ``owner``: the reader that holds it, None while it waits; beside what the
    connector keeps, such as its start and stop); ``done`` holds the keys of splits read
    to their end (or with nothing before the stop). Both, and the time of the last
    discovery, are restored from ``state`` (``"splits"``, ``"done"``,
    ``"last_discovery_clock_ms"``), which ``snapshot_state`` must give back.

    A connector says what the split of a key is (``_new_split``, and ``_split_id`` where
    its id is not its key).
    """

    def __init__(
        self,
        context: SplitEnumeratorContext[SplitT],
        *,
        discovery_interval_ms: int,
        stop: Mapping[str, Any],
        state: dict[str, Any] | None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(context, discovery_interval_ms=discovery_interval_ms, stop=stop, clock=clock)
        state = state or {}
        self.splits: dict[str, dict[str, Any]] = {k: dict(v) for k, v in state.get("splits", {}).items()}
        self.done: set[str] = set(state.get("done", []))
        self.last_discovery_clock_ms = state.get("last_discovery_clock_ms", 0)

    def pending_count(self) -> int:
        return sum(1 for split in self.splits.values() if split["owner"] is None)

    # Assignment

    @abstractmethod
    def _new_split(self, key: str, /) -> SplitT:
        """The split of ``key`` from its start (a split read before resumes from its
        checkpoint, which the runtime keeps)."""

    def _split_id(self, key: str, /) -> str:
        """The id of the split of ``key``: the key itself, unless the connector says."""
        return key

    def _rebalance(self) -> None:
        """Spreads the splits over the live readers (``place_splits``): new and returned
        splits go to the least-loaded ones, and a reader that joined takes its share from
        the others. Splits of a reader that is gone wait until the runtime gives them
        back; a split found finished on the way is done."""
        placed, finished = place_splits(
            self.context,
            {k: s["owner"] for k, s in self.splits.items()},
            new_split=self._new_split,
            split_id=self._split_id,
        )
        for key in finished:
            del self.splits[key]
            self.done.add(key)
        for key, owner in placed.items():
            self.splits[key]["owner"] = owner
