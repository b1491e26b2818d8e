"""Finds the shards of the stream and keeps each on exactly one reader, balanced and
sticky; a shard made by a reshard is handed out only once its parents are read to their
end (Flink's ``KinesisStreamsSourceEnumerator`` with its ``SplitTracker``)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from connectors.aws.session import AWS_ERRORS, aws_error_reason
from connectors.kinesis.reader import SHARD_FINISHED, SHARD_PROGRESS, STOP_SLACK_MS
from connectors.kinesis.shards import ShardInfo, list_shards
from connectors.kinesis.split import AFTER_SEQUENCE_NUMBER, AT_TIMESTAMP, TRIM_HORIZON, Anchor, ShardSplit
from source_support.api import SourceEvent, SplitEnumeratorContext
from source_support.assignment import place_splits
from source_support.streams.enumerator import DiscoveringEnumerator

if TYPE_CHECKING:
    from mypy_boto3_kinesis import KinesisClient

log = logging.getLogger("connectors.kinesis")


class ShardEnumerator(DiscoveringEnumerator[ShardSplit]):
    """Discovers the shards at start and every ``discovery_interval_ms``.

    The shards of the first discovery start at ``start`` (LATEST is fixed then as
    AT_TIMESTAMP of that moment, as Flink does, so every shard and every replay starts at
    the same place); shards found later, made by a reshard, start at TRIM_HORIZON. A
    shard is handed out once each of its parents is finished (read to its end and
    committed there, which its reader reports) or unknown (expired); so the records of a
    partition key are read in the order they were put across a reshard.

    A finished shard whose report was lost (its reader died between the commit and the
    report) is found at a later discovery: a closed shard whose children wait is taken
    back; if no reader held it, it was finished. A ``[stop]`` (latest: the first
    discovery's time; a time) ends each shard at the first record that arrived after it,
    and the enumerator is exhausted once a discovery after it is done and every shard is
    handed out.

    State: each known unfinished shard (parents, reader, anchor, position when it came
    back, when it was seen closed), the finished shards, the start and stop, and when
    discoveries ran.
    """

    def __init__(
        self,
        context: SplitEnumeratorContext[ShardSplit],
        *,
        client: Callable[[], KinesisClient],
        stream: str,
        start: str,
        start_timestamp_ms: int | None,
        discovery_interval_ms: int,
        stop: Mapping[str, Any],
        state: dict[str, Any] | None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(context, discovery_interval_ms=discovery_interval_ms, stop=stop, clock=clock)
        self.client = client
        self.stream = stream
        self.start_kind = start
        self.start_timestamp_ms = start_timestamp_ms
        state = state or {}
        #: shard id -> {"parents", "owner", "anchor", "position", "closed_ms"}
        self.shards: dict[str, dict[str, Any]] = {k: dict(v) for k, v in state.get("shards", {}).items()}
        self.finished: set[str] = set(state.get("finished", []))
        #: The first discovery's time (ms), which names the run's origin of positions.
        self.first_discovery_ms: int | None = state.get("first_discovery_ms")
        # ``last_discovery_clock_ms``, kept in the state as "last_discovery_ms".
        self.last_discovery_clock_ms = state.get("last_discovery_ms", 0)
        self.stop_ms: int | None = state.get("stop_ms")

    # The SplitEnumerator interface

    def start(self) -> None:
        if self._discovery_due():
            try:
                self._discover()
            except AWS_ERRORS as exc:
                log.warning(
                    "stream %s: discovery failed (%s); tried again at the next tick",
                    self.stream,
                    aws_error_reason(exc),
                )
        self._rebalance()

    def add_splits_back(self, splits: Sequence[ShardSplit], subtask: int) -> None:
        for split in splits:
            self.finished.discard(split.shard_id)
            known = self.shards.setdefault(split.shard_id, {"parents": [], "closed_ms": None})
            anchor = known.get("anchor")
            if anchor is None or Anchor.of(anchor).position > split.position:
                known["anchor"] = split.anchor.to_list()
            known.update(owner=None, position=split.position)
        self._rebalance()

    def handle_source_event(self, subtask: int, event: SourceEvent) -> None:
        shard = event.payload.get("shard")
        if shard not in self.shards:
            return
        if event.kind == SHARD_FINISHED:
            self._finished(shard)
            self._rebalance()
        elif event.kind == SHARD_PROGRESS:
            known = self.shards[shard]
            if event.payload["position"] > Anchor.of(known["anchor"]).position:
                known["anchor"] = Anchor(
                    AFTER_SEQUENCE_NUMBER, event.payload["seq"], event.payload["position"]
                ).to_list()

    def snapshot_state(self) -> dict[str, Any]:
        return {
            "shards": self.shards,
            "finished": sorted(self.finished),
            "first_discovery_ms": self.first_discovery_ms,
            "last_discovery_ms": self.last_discovery_clock_ms,
            "stop_ms": self.stop_ms,
        }

    def pending_count(self) -> int:
        return sum(1 for shard in self.shards.values() if shard["owner"] is None)

    # Discovery

    def _no_new_split_qualifies(self) -> bool:
        """Whether a discovery ran after the stop: any shard found later holds only
        records put after it."""
        return self.stop_ms is not None and self.last_discovery_clock_ms > self.stop_ms + STOP_SLACK_MS

    def _discovery_ran(self) -> bool:
        return self.first_discovery_ms is not None

    def _discover(self) -> None:
        now_ms = int(self.clock() * 1000)
        listed = list_shards(self.client(), self.stream)
        first = self.first_discovery_ms is None
        if first:
            self.first_discovery_ms = now_ms
            kind = self.stop.get("kind")
            if kind == "latest":
                self.stop_ms = now_ms
            elif kind == "time":
                self.stop_ms = int(self.stop["time_ms"])
        found = [s for s in listed if s.shard_id not in self.shards and s.shard_id not in self.finished]
        for shard in found:
            self.shards[shard.shard_id] = {
                "parents": list(shard.parents),
                "owner": None,
                "anchor": self._start_anchor(first).to_list(),
                "position": 0,
                "closed_ms": None,
            }
        for shard in listed:
            known = self.shards.get(shard.shard_id)
            if known is not None and shard.closed and known["closed_ms"] is None:
                known["closed_ms"] = now_ms
        self.last_discovery_clock_ms = now_ms
        if found and not first:
            log.info(
                "stream %s: %d new shard(s): %s",
                self.stream,
                len(found),
                ", ".join(s.shard_id for s in found),
            )
        self._take_back_finished(listed, now_ms)

    def _start_anchor(self, first: bool) -> Anchor:
        if not first or self.start_kind == TRIM_HORIZON:
            return Anchor(TRIM_HORIZON)
        if self.start_kind == AT_TIMESTAMP:
            return Anchor(AT_TIMESTAMP, str(self.start_timestamp_ms))
        return Anchor(AT_TIMESTAMP, str(self.first_discovery_ms))  # LATEST, fixed now

    def _take_back_finished(self, listed: list[ShardInfo], now_ms: int) -> None:
        """Finds closed shards that were finished without a report: a closed shard whose
        children wait, out with a reader for over a discovery interval, is taken back;
        if no reader held it, it was finished; else it goes back to its reader."""
        waiting = {p for s in self.shards.values() if s["owner"] is None for p in s["parents"]}
        suspects = [
            shard.shard_id
            for shard in listed
            if shard.shard_id in waiting
            and (known := self.shards.get(shard.shard_id)) is not None
            and known["owner"] is not None
            and known["closed_ms"] is not None
            and now_ms - known["closed_ms"] >= self.discovery_interval_ms
        ]
        if not suspects:
            return
        revoked = {split.shard_id: split for split in self.context.revoke_splits(suspects)}
        live = self.context.registered_readers()
        for shard_id in suspects:
            split = revoked.get(shard_id)
            if split is None:
                self._finished(shard_id)
                continue
            owner = self.shards[shard_id]["owner"]
            if owner in live:
                self.context.assign_splits({owner: [split]})
            else:
                self.shards[shard_id].update(owner=None, position=split.position)

    def _finished(self, shard_id: str) -> None:
        if self.shards.pop(shard_id, None) is not None:
            self.finished.add(shard_id)
            log.debug("stream %s: shard %s read to its end", self.stream, shard_id)

    # Assignment

    def _ready(self, shard: dict[str, Any]) -> bool:
        return all(parent in self.finished or parent not in self.shards for parent in shard["parents"])

    def _rebalance(self) -> None:
        """Spreads the shards that may be read over the live readers (``balance``): new
        and returned shards go to the least-loaded ones, and a reader that joined takes its
        share; a finished shard found on the way may release its children, so again."""
        while True:
            ready = {k: s["owner"] for k, s in self.shards.items() if self._ready(s)}
            placed, finished = place_splits(
                self.context, ready, new_split=self._new_split, split_id=lambda k: k
            )
            for key, owner in placed.items():
                self.shards[key]["owner"] = owner
            for key in finished:
                self._finished(key)
            if not finished:
                return

    def _new_split(self, shard_id: str) -> ShardSplit:
        known = self.shards[shard_id]
        return ShardSplit(
            self.stream,
            shard_id,
            known.get("position", 0),
            f"{self.start_kind}@{self.first_discovery_ms}",
            Anchor.of(known["anchor"]),
            self.stop_ms,
        )
