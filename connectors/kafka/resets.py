"""Offsets that went backwards: a partition whose log is no longer the one a split read up
to its checkpoint (its topic deleted and made again, its broker restarted empty), found as
the Redis Streams source finds a stream made again (issue 25).

A split's partition was reset when the high watermark its fetches report is below the
split's position (offsets only grow in one log), or its log's start is above it; a topic the brokers no longer know is said at once and fails
the split after ``TOPIC_GONE_S``; so is a topic whose id (KIP-516, where the brokers tell
it) is not the one the split was found with: a topic deleted and made again under its name,
even one whose new log already reaches past the checkpoint (``topic_id_resets``: before a
split's first fetch, and with the other checks). Each is checked for a split with nothing
fetched waiting (a reset partition fetches nothing past its checkpoint), at most every
``CHECK_EVERY_S``;
and when the brokers answer a fetch at the checkpoint "offset out of range"
(``out_of_range``), at once.

What a reset does is the flow's ``source.on_reset``: ``fail`` fails the split; ``restart``
ends it and reads the partition's new log from its first offset as the split's next
generation (``PARTITION_RESET``, sent to the enumerator once the old split's end is
committed).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from confluent_kafka import Consumer, TopicPartition

from connectors.kafka.brokers import TRANSIENT, topic_ids
from connectors.kafka.connection import error_reason
from connectors.kafka.split import PartitionSplit

log = logging.getLogger("connectors.kafka")

#: How often a split's partition is asked for its log's ends and its topic.
CHECK_EVERY_S = 3.0
#: How long one check waits for the brokers (a reader waits while it checks).
CHECK_TIMEOUT_S = 2.0
#: How long a topic the brokers no longer know may stay away before its splits fail.
TOPIC_GONE_S = 10.0
#: The event a reader sends the enumerator once the split of a partition that was reset
#: is committed as finished (``source.on_reset = "restart"``): the partition's next
#: generation is to be read from ``start`` (at once; or, for a topic that is gone, from
#: its first offset once a discovery finds it again).
PARTITION_RESET = "partition-reset"


@dataclass(frozen=True)
class Reset:
    """How a split's partition shows its log is not the one the split read."""

    split: PartitionSplit
    #: What was seen, in words naming the offsets.
    seen: str
    #: Whether the topic is gone from the brokers (no new log to read yet).
    gone: bool = False

    def words(self) -> str:
        split = self.split
        return (
            f"topic {split.topic} partition {split.partition} went back below the checkpoint: "
            f"{self.seen} (the topic was deleted and made again, or its broker lost its log); "
            "records past the checkpoint may be lost"
        )


@dataclass
class _Seen:
    next_check: float = 0.0
    #: When the topic was first found missing (monotonic), None while it exists.
    gone_since: float | None = None


class ResetWatch:
    """Checks the partitions of a reader's ``consumer`` for resets (``check``)."""

    def __init__(
        self,
        consumer: Callable[[], Consumer],
        *,
        servers: str | None = None,
        answered: Callable[[], None] = lambda: None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``answered``: told when the brokers answer a request (an outage is over);
        ``servers``: the brokers, asked for topic ids (None: ids are not compared)."""
        self.consumer = consumer
        self.servers = servers
        #: Each topic's id as last told, and when (ids are asked at most every CHECK_EVERY_S).
        self._ids: dict[str, tuple[float, str | None]] = {}
        self.answered = answered
        self.clock = clock
        self._seen: dict[str, _Seen] = {}
        #: The brokers' topics and their partitions, and when they were listed.
        self._listed: tuple[float, dict[str, set[int]] | None] | None = None

    def forget(self, split_id: str) -> None:
        self._seen.pop(split_id, None)

    def check(self, split: PartitionSplit, *, fetched: bool = True) -> Reset | None:
        """A reset of ``split``'s partition, if one shows; a topic gone for longer than
        ``TOPIC_GONE_S`` is one. ``fetched``: whether the consumer's last fetch of the
        partition is about its assignment at the split's position (not a figure kept from
        an earlier assignment of the partition to the same consumer)."""
        seen = self._seen.setdefault(split.split_id, _Seen())
        tp = TopicPartition(split.topic, split.partition)
        # What the last fetch response said costs no request: checked every time.
        _, high = self.consumer().get_watermark_offsets(tp, cached=True) if fetched else (-1, -1)
        if 0 <= high < split.position:
            return Reset(
                split,
                f"a fetch reports high watermark {high}, the checkpoint is at offset {split.position}",
            )
        now = self.clock()
        if now < seen.next_check:
            return None
        seen.next_check = now + CHECK_EVERY_S
        try:
            topics = self._topics(now)
            if topics is None:
                return None  # the brokers did not answer this round's listing
            if split.partition not in topics.get(split.topic, ()):
                return self._gone(split, seen, now)
            seen.gone_since = None
            replaced = self._replaced(split, now)
            if replaced is not None:
                return replaced
            # Its end as ListOffsets answers it is not checked: some brokers (Tansu 0.6) answer
            # it short by the last producer batch. A fetch's high watermark is (above).
            low, _ = self.consumer().get_watermark_offsets(tp, timeout=CHECK_TIMEOUT_S, cached=False)
        except TRANSIENT as exc:
            log.info("split %s: %s; checked again", split.split_id, error_reason(exc))
            return None
        return _starts_after(split, low)

    def topic_id_resets(self, splits: list[PartitionSplit]) -> list[Reset]:
        """The resets of ``splits`` (those found with a topic id) whose topic now has
        another id, asked now for all their topics at once."""
        known = [s for s in splits if s.topic_id is not None]
        if not known or self.servers is None:
            return []
        now = self.clock()
        try:
            found = topic_ids(self.servers, {s.topic for s in known})
        except TRANSIENT as exc:
            log.info("could not ask for topic ids: %s; checked again", error_reason(exc))
            return []
        for topic in {s.topic for s in known}:
            self._ids[topic] = (now, found.get(topic))
        return [r for s in known if (r := self._replaced(s, now)) is not None]

    def _replaced(self, split: PartitionSplit, now: float) -> Reset | None:
        """A reset if the split's topic now has another id than the one it was found with."""
        if split.topic_id is None or self.servers is None:
            return None
        asked = self._ids.get(split.topic)
        if asked is None or now - asked[0] >= CHECK_EVERY_S:
            asked = (now, topic_ids(self.servers, [split.topic]).get(split.topic))
            self._ids[split.topic] = asked
        current = asked[1]
        if current is None or current == split.topic_id:
            return None
        return Reset(
            split,
            f"its topic's id is now {current}, and the checkpoint (offset {split.position}) is of "
            f"the topic whose id was {split.topic_id}",
        )

    def _topics(self, now: float) -> dict[str, set[int]] | None:
        """The topics the brokers know, listed at most every ``CHECK_EVERY_S`` (one request
        for every split of the reader); None if that listing failed."""
        if self._listed is None or now - self._listed[0] >= CHECK_EVERY_S:
            # Tried once a round whatever the answer: brokers away are not asked per split.
            self._listed = (now, None)
            listed = self.consumer().list_topics(timeout=CHECK_TIMEOUT_S)
            self.answered()
            topics = {name: set(t.partitions) for name, t in listed.topics.items() if t.error is None}
            self._listed = (now, topics)
        return self._listed[1]

    def _gone(self, split: PartitionSplit, seen: _Seen, now: float) -> Reset | None:
        if seen.gone_since is None:
            seen.gone_since = now
            log.warning(
                "topic %s partition %d is gone from the brokers (the split is at offset %d); "
                "the split fails unless it is back within %.0f s",
                split.topic,
                split.partition,
                split.position,
                TOPIC_GONE_S,
            )
            return None
        if now - seen.gone_since < TOPIC_GONE_S:
            return None
        return Reset(
            split,
            f"the brokers have not known it for {now - seen.gone_since:.0f} s; the checkpoint is at "
            f"offset {split.position}",
            gone=True,
        )

    def out_of_range(self, split: PartitionSplit) -> Reset | None:
        """Why the brokers answered a fetch at the split's position "offset out of range":
        its log starts after the position, or ends before it (ListOffsets asked now: the
        brokers said the position is outside the log); None if neither shows or they do
        not answer."""
        tp = TopicPartition(split.topic, split.partition)
        try:
            low, high = self.consumer().get_watermark_offsets(tp, timeout=CHECK_TIMEOUT_S, cached=False)
        except TRANSIENT as exc:
            log.info("split %s: %s; checked again", split.split_id, error_reason(exc))
            return None
        if (starts_after := _starts_after(split, low)) is not None:
            return starts_after
        if 0 <= high < split.position:
            return Reset(
                split, f"its log ends at offset {high}, the checkpoint is at offset {split.position}"
            )
        return None


def _starts_after(split: PartitionSplit, low: int) -> Reset | None:
    """A reset when the partition's log starts after the split's checkpoint (``low``: its
    first kept offset, as ListOffsets answers it now)."""
    if low > split.position:
        return Reset(split, f"its log starts at offset {low}, the checkpoint is at offset {split.position}")
    return None
