"""Finds the partitions of the topics read and keeps each on exactly one reader, balanced
and sticky (Flink's ``KafkaSourceEnumerator``, without its hash-based owner: splits move
only when readers come and go)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from connectors.kafka.brokers import TRANSIENT, KafkaMetadata
from connectors.kafka.config import start_position, topic_matches
from connectors.kafka.resets import PARTITION_RESET
from connectors.kafka.split import PartitionSplit, partition_split_id
from source_support.api import SourceEvent, SplitEnumeratorContext
from source_support.streams.enumerator import KeyedSplitEnumerator
from source_support.streams.split import generation_split_id

log = logging.getLogger("connectors.kafka")


class PartitionEnumerator(KeyedSplitEnumerator[PartitionSplit]):
    """Discovers the partitions at start and every ``discovery_interval_ms``: of the listed
    ``topics``, or of every topic matching ``topic_pattern`` (a partition or a matching topic
    added later becomes a new split, read from its first offset). Partitions of the first
    discovery start at ``start_offsets`` where named, else at ``start``; each start is
    resolved to an offset once, so a replay starts at the same place; a start time goes with
    the split too, whose reader drops records before it at the split's start (a broker may
    answer an offset before the time).

    Stops (bounded runs): ``latest`` and ``stop_offsets`` fix each partition's end offset at
    the first discovery (the end it had then, or the offset named); a partition found later
    has nothing before that stop and is never read. A time is carried by each split: its
    reader ends it at the first record after the time.

    A partition whose offsets went back under ``source.on_reset = "restart"`` ends its
    split; the reader that saw it says so (``PARTITION_RESET``) once that end is committed,
    and the partition's new log is the split's next generation, read from its first offset
    (at once; for a topic that is gone, once a discovery finds it again).

    State: each known partition (by ``topic:partition``) with its start, stop, reader and
    generation (left out for the first), the partitions that are done, the generation each
    gone partition comes back as, and when the last discovery ran.
    """

    def __init__(
        self,
        context: SplitEnumeratorContext[PartitionSplit],
        *,
        brokers: KafkaMetadata,
        topics: list[str] | None,
        topic_pattern: str | None,
        start: str,
        start_offsets: Mapping[str, int] | None,
        stop_offsets: Mapping[str, int] | None,
        discovery_interval_ms: int,
        stop: Mapping[str, Any],
        state: dict[str, Any] | None,
        allowed: Callable[[str], bool] = lambda topic: True,
        clock: Callable[[], float] = time.time,
    ) -> None:
        # ``splits``: split id -> {"topic", "partition", "start", "stop": offset | None, "owner"}
        super().__init__(
            context, discovery_interval_ms=discovery_interval_ms, stop=stop, state=state, clock=clock
        )
        self.brokers = brokers
        self.topics = topics
        self.topic_pattern = topic_pattern
        self.start_kind, self.start_ms = start_position(start)
        self.start_offsets = dict(start_offsets or {})
        self.stop_offsets = dict(stop_offsets or {})
        #: Whether the source's connection allows a topic (its patterns).
        self.allowed = allowed
        self.discovered: bool = (state or {}).get("discovered", False)
        #: ``topic:partition`` -> the generation its partition is read as when it is back
        self.gone: dict[str, int] = dict((state or {}).get("gone", {}))

    # The SplitEnumerator interface

    def start(self) -> None:
        if self._discovery_due():
            try:
                self._discover()
            except TRANSIENT as exc:
                log.warning("partition discovery failed (%s); tried again at the next tick", exc)
        self._rebalance()

    def add_splits_back(self, splits: Sequence[PartitionSplit], subtask: int) -> None:
        for split in splits:
            known = self.splits.get(split.place)
            if known is not None and known.get("generation", 0) > split.generation:
                continue  # an older generation, ended already
            self.done.discard(split.place)
            known = self.splits.setdefault(
                split.place,
                {
                    "topic": split.topic,
                    "partition": split.partition,
                    "start": split.position,
                    "stop": split.stop_offset,
                    "owner": None,
                },
            )
            if split.generation:
                known["generation"] = split.generation
            if split.topic_id is not None:
                known["topic_id"] = split.topic_id
            known["start"] = split.position  # where its last commit left it
            known["owner"] = None
        self._rebalance()

    def handle_source_event(self, subtask: int, event: SourceEvent) -> None:
        """A reader ended the split of a partition that was reset (``PARTITION_RESET``):
        its new log is the split's next generation, from the offset the reader found it
        starting at, or, for a topic that is gone, from its first once it is back."""
        if event.kind != PARTITION_RESET:
            return
        payload = event.payload
        key = partition_split_id(payload["topic"], payload["partition"])
        generation = payload["generation"]
        known = self.splits.get(key)
        if known is None or known.get("generation", 0) != generation:
            return  # told twice (a replayed commit): the next generation exists already
        del self.splits[key]
        if payload["start"] is None:
            self.gone[key] = generation + 1
        else:
            self.splits[key] = {
                "topic": payload["topic"],
                "partition": payload["partition"],
                "start": payload["start"],
                "stop": payload["stop"],
                "owner": None,
                "generation": generation + 1,
            }
            try:
                topic_id = self.brokers.topic_ids([payload["topic"]]).get(payload["topic"])
            except TRANSIENT:
                topic_id = None  # its offsets are still checked
            if topic_id is not None:
                self.splits[key]["topic_id"] = topic_id
            if payload["stop"] is not None and payload["start"] >= payload["stop"]:
                del self.splits[key]
                self.done.add(key)  # nothing before its stop in the new log
        log.info("partition %s was reset: its new log is read as generation %d", key, generation + 2)
        self._rebalance()

    def snapshot_state(self) -> dict[str, Any]:
        return {
            "splits": self.splits,
            "done": sorted(self.done),
            "discovered": self.discovered,
            "gone": self.gone,
            "last_discovery_clock_ms": self.last_discovery_clock_ms,
        }

    # Discovery

    @property
    def _fixed_stop(self) -> bool:
        """Whether each partition's end offset is fixed at the first discovery."""
        return self.stop.get("kind") == "latest" or bool(self.stop_offsets)

    def _no_new_split_qualifies(self) -> bool:
        """Whether a partition found later could only hold records past the stop."""
        if not self.discovered:
            return False
        if self._fixed_stop:
            return True
        if self.stop.get("kind") == "time":
            return self.last_discovery_clock_ms > self.stop["time_ms"]
        return False

    def _discovery_ran(self) -> bool:
        return self.discovered

    def _discover(self) -> None:
        clock_ms = int(self.clock() * 1000)
        listed = self.brokers.partitions()
        first = not self.discovered
        new: list[tuple[str, int]] = []
        for topic in sorted(listed):
            if not topic_matches(topic, self.topics, self.topic_pattern) or not self.allowed(topic):
                continue
            for partition in range(listed[topic]):
                split_id = partition_split_id(topic, partition)
                if split_id in self.splits or split_id in self.done:
                    continue
                if not first and self._fixed_stop:
                    self.done.add(split_id)  # made after the run's stop was fixed: nothing before it
                    continue
                new.append((topic, partition))
        ends = self.brokers.ends(new) if new else {}
        ids = self.brokers.topic_ids({topic for topic, _ in new}) if new else {}
        for topic, partition in new:
            self._add(topic, partition, *ends[topic, partition], first=first, topic_id=ids.get(topic))
        if first and self.topics is not None:
            missing = [t for t in self.topics if t not in listed]
            if missing:
                log.info("topic(s) %s do not exist yet", ", ".join(missing))
        self.discovered = True
        self.last_discovery_clock_ms = clock_ms
        if new:
            log.info("%d new partition(s): %s", len(new), ", ".join(partition_split_id(*k) for k in new))

    def _add(
        self, topic: str, partition: int, low: int, high: int, *, first: bool, topic_id: str | None
    ) -> None:
        split_id = partition_split_id(topic, partition)
        start = self._start_for(topic, partition, low, high) if first else low
        stop: int | None = None
        if first and self._fixed_stop:
            stop = self.stop_offsets.get(split_id, high)
        if stop is not None and start >= stop:
            self.done.add(split_id)
            return
        self.splits[split_id] = {
            "topic": topic,
            "partition": partition,
            "start": start,
            "stop": stop,
            "owner": None,
        }
        if split_id in self.gone:  # a partition reset while its topic was gone is back
            self.splits[split_id]["generation"] = self.gone.pop(split_id)
        if topic_id is not None:  # the split reads this topic, not one made again under its name
            self.splits[split_id]["topic_id"] = topic_id
        if first and self.start_kind == "time" and split_id not in self.start_offsets:
            self.splits[split_id]["start_time_ms"] = self.start_ms

    def _start_for(self, topic: str, partition: int, low: int, high: int) -> int:
        named = self.start_offsets.get(partition_split_id(topic, partition))
        if named is not None:
            return named
        if self.start_kind == "earliest":
            return low
        if self.start_kind == "latest":
            return high
        found = self.brokers.offset_for_time(topic, partition, self.start_ms or 0)
        return high if found is None else max(found, low)

    # Assignment

    def _split_id(self, key: str) -> str:
        return generation_split_id(key, self.splits[key].get("generation", 0))

    def _new_split(self, key: str) -> PartitionSplit:
        known = self.splits[key]
        stop_time = self.stop.get("time_ms") if self.stop.get("kind") == "time" else None
        return PartitionSplit(
            known["topic"],
            known["partition"],
            known["start"],
            known["stop"],
            stop_time,
            known.get("start_time_ms"),
            known.get("generation", 0),
            known.get("topic_id"),
        )
