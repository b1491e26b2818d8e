"""Finds the subject filters of the stream and keeps each on exactly one reader, balanced
and sticky."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from connectors.nats.config import start_position
from connectors.nats.connection import CHECK_TIMEOUT_S, NatsClient
from connectors.nats.jetstream import TRANSIENT, position_before_time, stream_seen
from connectors.nats.reader import STOP_PLACED, STREAM_RESET
from connectors.nats.split import SubjectSplit, subject_split_id
from source_support.api import SourceEvent, SplitEnumeratorContext
from source_support.streams.enumerator import KeyedSplitEnumerator
from source_support.streams.split import generation_split_id

log = logging.getLogger("connectors.nats")


class SubjectEnumerator(KeyedSplitEnumerator[SubjectSplit]):
    """Discovers the subject filters at start and every ``discovery_interval_ms``: the
    explicit ``subjects``, or the stream's own subjects (a subject added to the stream
    becomes a new split, read from its start). Filters of the first discovery start at
    ``start``.

    A ``[stop]`` rule is scoped to the whole stream: ``latest`` is the stream's last
    sequence at the first discovery, a sequence number is itself, and a time is placed on
    a sequence by the first reader that sees a message after it (``STOP_PLACED``), which
    the enumerator passes on to every reader. Once no filter added later can have a
    message before the stop and every split is assigned, the enumerator is exhausted.

    State: each known filter with its start, stop and reader, the filters that are done,
    the stop once placed, and when the last discovery ran.
    """

    def __init__(
        self,
        context: SplitEnumeratorContext[SubjectSplit],
        *,
        client: NatsClient,
        stream: str,
        subjects: list[str] | None,
        start: str,
        discovery_interval_ms: int,
        stop: Mapping[str, Any],
        state: dict[str, Any] | None,
        allowed: Callable[[str], bool] = lambda subject: True,
        clock: Callable[[], float] = time.time,
    ) -> None:
        # ``splits``: subject -> {"start": position, "stop": position | None, "owner",
        # "created": the stream's creation time when the split was found}
        super().__init__(
            context, discovery_interval_ms=discovery_interval_ms, stop=stop, state=state, clock=clock
        )
        self.client = client
        self.stream = stream
        self.subjects = subjects
        self.start_kind, self.start_at = start_position(start)
        #: Whether the source's connection allows a subject filter (its patterns).
        self.allowed = allowed
        state = state or {}
        self.discovered: bool = state.get("discovered", False)
        #: The stop rule's stream sequence once known (None: no stop, or a time not placed yet).
        self.stop_seq: int | None = state.get("stop_seq")
        #: The stream's last sequence at the last discovery.
        self.last_seq: int = state.get("last_seq", 0)

    # The SplitEnumerator interface

    def start(self) -> None:
        if self._discovery_due():
            try:
                self._discover()
            except TRANSIENT as exc:
                log.warning(
                    "stream %s: discovery failed (%s); tried again at the next tick", self.stream, exc
                )
        self._rebalance()

    def add_splits_back(self, splits: Sequence[SubjectSplit], subtask: int) -> None:
        for split in splits:
            known = self.splits.get(split.subject)
            if known is not None and known.get("generation", 0) > split.generation:
                continue  # an older generation, ended already
            self.done.discard(split.subject)
            known = self.splits.setdefault(
                split.subject,
                {
                    "start": split.position,
                    "stop": split.stop_position,
                    "owner": None,
                    "created": split.created,
                },
            )
            if split.generation:
                known["generation"] = split.generation
            known["owner"] = None
        self._rebalance()

    def handle_source_event(self, subtask: int, event: SourceEvent) -> None:
        """A reader placed a ``[stop] at`` time on a sequence: every split stops there. Or
        it ended the split of a stream created again (``STREAM_RESET``, under ``on_reset =
        "restart"``): the new stream is the split's next generation, from its first
        sequence."""
        if event.kind == STREAM_RESET:
            self._next_generation(event.payload)
            return
        if event.kind != STOP_PLACED:
            return
        seq = event.payload["seq"]
        if self.stop_seq is not None and self.stop_seq <= seq:
            return
        self.stop_seq = seq
        for split in self.splits.values():
            split["stop"] = seq
        for reader in self.context.registered_readers():
            self.context.send_event_to_source_reader(reader, SourceEvent(STOP_PLACED, {"seq": seq}))

    def _next_generation(self, payload: dict[str, Any]) -> None:
        subject, generation = payload["subject"], payload["generation"]
        known = self.splits.get(subject)
        if known is None or known.get("generation", 0) != generation:
            return  # told twice (a replayed commit): the next generation exists already
        self.splits[subject] = {
            "start": 0,
            "stop": payload["stop"],
            "owner": None,
            "created": payload["created"],
            "generation": generation + 1,
        }
        log.info(
            "stream %s was created again: subject filter %s is read as generation %d",
            self.stream,
            subject,
            generation + 2,
        )
        self._rebalance()

    def snapshot_state(self) -> dict[str, Any]:
        return {
            "splits": self.splits,
            "done": sorted(self.done),
            "discovered": self.discovered,
            "stop_seq": self.stop_seq,
            "last_seq": self.last_seq,
            "last_discovery_clock_ms": self.last_discovery_clock_ms,
        }

    # Discovery

    def _no_new_split_qualifies(self) -> bool:
        """Whether a filter found later could only hold messages past the stop (a stream's
        new subject gets messages with later sequences than the stream's last)."""
        kind = self.stop.get("kind")
        if not self.discovered or kind is None or kind == "records":
            return False
        if kind == "time":
            return self.last_discovery_clock_ms > self.stop["time_ms"]
        return self.stop_seq is not None and self.last_seq >= self.stop_seq

    def _discovery_ran(self) -> bool:
        return self.discovered

    def _discover(self) -> None:
        clock_ms = int(self.clock() * 1000)
        seen = self.client.run(stream_seen(self.client.nc, self.stream, CHECK_TIMEOUT_S))
        if seen is None:
            log.info("stream %s does not exist yet", self.stream)
            return
        info = seen.info
        last_seq = info.state.last_seq
        listed = self.subjects if self.subjects is not None else list(info.config.subjects or [])
        filters = [s for s in listed if self.allowed(s)]
        first = not self.discovered
        if first:
            kind = self.stop.get("kind")
            if kind == "latest":
                self.stop_seq = last_seq
            elif kind == "position":
                self.stop_seq = int(self.stop["at"])
        found = [s for s in filters if s not in self.splits and s not in self.done]
        for subject in found:
            start = self._start_for(subject, last_seq) if first else 0
            if self.stop_seq is not None and start >= self.stop_seq:
                self.done.add(subject)
                continue
            # The stream's creation time: the split's checkpoint is of this stream only.
            self.splits[subject] = {
                "start": start,
                "stop": self.stop_seq,
                "owner": None,
                "created": seen.created,
            }
        self.discovered = True
        self.last_seq = last_seq
        self.last_discovery_clock_ms = clock_ms
        if found:
            log.info("stream %s: %d new subject filter(s): %s", self.stream, len(found), ", ".join(found))

    def _start_for(self, subject: str, last_seq: int) -> int:
        if self.start_kind == "earliest":
            return 0
        if self.start_kind == "latest":
            return last_seq
        if self.start_kind == "seq":
            return self.start_at or 0
        return self.client.run(position_before_time(self.client.js, self.stream, subject, self.start_at or 0))

    # Assignment

    def _split_id(self, key: str) -> str:
        return generation_split_id(subject_split_id(self.stream, key), self.splits[key].get("generation", 0))

    def _new_split(self, subject: str) -> SubjectSplit:
        known = self.splits[subject]
        stop_time = (
            self.stop.get("time_ms") if self.stop.get("kind") == "time" and known["stop"] is None else None
        )
        return SubjectSplit(
            self.stream,
            subject,
            known["start"],
            known["stop"],
            stop_time,
            known.get("created"),
            known.get("generation", 0),
        )
