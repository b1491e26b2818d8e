"""Finds the streams of the topic and keeps each on exactly one reader, balanced and sticky."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import redis

from connectors.redis_streams.config import is_pattern, start_position
from connectors.redis_streams.reader import STREAM_REPLACED
from connectors.redis_streams.split import (
    StreamSplit,
    encode_id,
    generation_split_id,
    last_position_before_ms,
    last_position_of_ms,
    position_ms,
)
from source_support.api import SourceEvent, SplitEnumeratorContext
from source_support.connections import key_allowed, key_reserved
from source_support.streams.enumerator import KeyedSplitEnumerator
from source_support.typed_redis import execute, pipeline, scan_keys, server_time_ms

log = logging.getLogger("connectors.redis_streams")

#: The longest stream key read: the database keeps split ids of 1,024 characters
#: (``Split.split_id``), and a later generation's id adds `` (generation N)``.
MAX_KEY_CHARS = 1000
SCAN_COUNT = 1000


class StreamEnumerator(KeyedSplitEnumerator[StreamSplit]):
    """Discovers the streams matching ``streams`` at start and every ``discovery_interval_ms``
    and assigns each to one live reader (``source_support.assignment.balance``).

    Streams of the first discovery start at ``start``; streams found later are read from
    their beginning (as Flink's Kafka source reads new partitions). A ``[stop]`` rule at
    a place (latest, a time, an entry id) gives every split its stop position, and once
    no stream can still appear with entries before it and every split is assigned, the
    enumerator is exhausted: readers that ask are told there are no more splits.

    A stream deleted while it was read, or replaced by another under its key (deleted
    and created again, or lost with a server that restarted empty), ends its split; the
    reader that saw it says so (``STREAM_REPLACED``), and the key's next stream is a new
    generation of the split, read from its start (at once if the key holds one, else once
    a discovery finds it).

    State: each known stream with its start, stop, reader and generation, the streams
    that are done, the generation each gone stream comes back as, and the Redis server
    time of the first and last discoveries.
    """

    def __init__(
        self,
        context: SplitEnumeratorContext[StreamSplit],
        *,
        client: redis.Redis,
        streams: str,
        start: str,
        discovery_interval_ms: int,
        stop: Mapping[str, Any],
        state: dict[str, Any] | None,
        key_patterns: tuple[str, ...] = (),
        reserved_keys: tuple[str, ...] = (),
        clock: Callable[[], float] = time.time,
    ) -> None:
        # ``splits``: key -> {"start": position, "stop": position | None, "owner",
        # "generation": n (left out for the first)}
        super().__init__(
            context, discovery_interval_ms=discovery_interval_ms, stop=stop, state=state, clock=clock
        )
        #: The keys the source's connection allows (empty: any); the ``streams`` glob was
        #: checked against them when the flow was saved, and each key found is here again.
        self.key_patterns = tuple(key_patterns)
        self.reserved_keys = tuple(reserved_keys)
        self.client = client
        self.streams = streams
        self.start_kind, self.start_at = start_position(start)
        state = state or {}
        #: key -> the generation its stream is read as when it appears again
        self.gone: dict[str, int] = dict(state.get("gone", {}))
        self.first_discovery_ms: int | None = state.get("first_discovery_ms")
        self.last_discovery_ms: int | None = state.get("last_discovery_ms")

    # The SplitEnumerator interface

    def start(self) -> None:
        if self._discovery_due():
            self._discover()
        self._rebalance()

    def add_splits_back(self, splits: Sequence[StreamSplit], subtask: int) -> None:
        for split in splits:
            known = self.splits.get(split.key)
            if known is not None and known.get("generation", 0) > split.generation:
                continue  # an older generation, ended already
            self.done.discard(split.key)  # held after all: it was not finished
            known = self.splits.setdefault(
                split.key, {"start": split.position, "stop": split.stop_position, "owner": None}
            )
            if split.generation:
                known["generation"] = split.generation
            known["owner"] = None
        self._rebalance()

    def handle_source_event(self, subtask: int, event: SourceEvent) -> None:
        """A reader ended the split of a stream that is gone or was replaced: the key's
        next stream is the split's next generation, from its start."""
        if event.kind != STREAM_REPLACED:
            return
        key, generation = event.payload["key"], event.payload["generation"]
        known = self.splits.get(key)
        if known is None or known.get("generation", 0) != generation:
            return  # told twice (a replayed commit): the next generation exists already
        del self.splits[key]
        if event.payload["exists"]:
            self.splits[key] = self._split_entry(key, generation + 1)
            log.info("stream %s was replaced: reading generation %d from its start", key, generation + 2)
        else:
            self.gone[key] = generation + 1
        self._rebalance()

    def snapshot_state(self) -> dict[str, Any]:
        return {
            "splits": self.splits,
            "done": sorted(self.done),
            "gone": self.gone,
            "first_discovery_ms": self.first_discovery_ms,
            "last_discovery_ms": self.last_discovery_ms,
            "last_discovery_clock_ms": self.last_discovery_clock_ms,
        }

    # Discovery

    def _stop_bound_ms(self) -> int | None:
        """The last millisecond a new stream's entries may have to be read (None: no stop
        at a place). Streams created after that cannot qualify: their ids are later."""
        kind = self.stop.get("kind")
        if kind == "time":
            return self.stop["time_ms"]
        if kind == "position":
            return position_ms(encode_id(self.stop["at"], last_seq=True))
        if kind == "latest" and self.first_discovery_ms is not None:
            return self.first_discovery_ms - 1
        return None

    def _no_new_split_qualifies(self) -> bool:
        """True with a stop at a place, once a discovery ran after no new stream could
        qualify."""
        bound = self._stop_bound_ms()
        return bound is not None and self.last_discovery_ms is not None and self.last_discovery_ms > bound

    def _discovery_ran(self) -> bool:
        return self.last_discovery_ms is not None

    def _discover(self) -> None:
        now_ms = server_time_ms(self.client)  # before the scan: later streams have later ids
        first = self.first_discovery_ms is None
        found = [k for k in self._matching_keys() if k not in self.splits and k not in self.done]
        infos = self._stream_infos(found) if first and self._needs_infos() else {}
        if first:
            self.first_discovery_ms = now_ms
        for key in found:
            if first and self._needs_infos() and key not in infos:
                continue  # deleted since the scan
            if key in self.gone:  # a stream that was deleted is back: its next generation
                self.splits[key] = self._split_entry(key, self.gone.pop(key))
                log.info("stream %s is back: reading it from its start", key)
                continue
            start = self._start_for(key, infos.get(key)) if first else 0
            stop = self._stop_for(key, infos.get(key) if first else None)
            if stop is not None and start >= stop:
                self.done.add(key)  # nothing to read before its stop
                continue
            self.splits[key] = {"start": start, "stop": stop, "owner": None}
        self.last_discovery_ms = now_ms
        self.last_discovery_clock_ms = int(self.clock() * 1000)
        if found:
            log.info("discovered %d new stream(s) matching %s", len(found), self.streams)

    def _split_entry(self, key: str, generation: int) -> dict[str, Any]:
        """A new generation of ``key``'s split: the whole new stream, up to the stop."""
        return {"start": 0, "stop": self._stop_for(key, None), "owner": None, "generation": generation}

    def _allowed(self, key: str) -> bool:
        return key_allowed(key, self.key_patterns) and not key_reserved(key, self.reserved_keys)

    def _matching_keys(self) -> list[str]:
        if not is_pattern(self.streams):
            if not self._allowed(self.streams):
                return []
            return [self.streams] if self.client.type(self.streams) == b"stream" else []
        keys: list[str] = []
        for raw in scan_keys(self.client, match=self.streams, count=SCAN_COUNT, type_name="stream"):
            key = _split_key(raw)
            if key is not None and self._allowed(key):
                keys.append(key)
        return sorted(set(keys))

    def _needs_infos(self) -> bool:
        return self.start_kind == "latest" or self.stop.get("kind") == "latest"

    def _stream_infos(self, keys: list[str]) -> dict[str, int]:
        """Each stream's last generated id, as a position."""
        pipe = pipeline(self.client, transaction=False)
        for key in keys:
            pipe.xinfo_stream(key)
        last: dict[str, int] = {}
        for key, info in zip(keys, execute(pipe, raise_on_error=False), strict=True):
            if not isinstance(info, Exception):
                last[key] = encode_id(info["last-generated-id"])
        return last

    def _start_for(self, key: str, last_generated: int | None) -> int:
        if self.start_kind == "earliest":
            return 0
        if self.start_kind == "latest":
            return last_generated or 0
        return self.start_at or 0  # an entry id or a time: a position

    def _stop_for(self, key: str, last_generated: int | None) -> int | None:
        kind = self.stop.get("kind")
        if kind == "time":
            return last_position_of_ms(self.stop["time_ms"])
        if kind == "position":
            return encode_id(self.stop["at"], last_seq=True)
        if kind == "latest":
            if last_generated is not None:
                return last_generated
            if self.first_discovery_ms is None:
                raise RuntimeError("a split's stop at latest is fixed by the first discovery, which ran")
            return last_position_before_ms(self.first_discovery_ms)
        return None

    # Assignment

    def _new_split(self, key: str) -> StreamSplit:
        split = self.splits[key]
        return StreamSplit(key, split["start"], split["stop"], generation=split.get("generation", 0))

    def _split_id(self, key: str) -> str:
        return generation_split_id(key, self.splits[key].get("generation", 0))


def _split_key(raw: bytes) -> str | None:
    """A stream key as a split id; None (with a warning) for keys a split id cannot be."""
    try:
        key = raw.decode("utf-8")
    except UnicodeDecodeError:
        log.warning("stream key %r is not UTF-8: it is not read", raw)
        return None
    if "\x00" in key or len(key) > MAX_KEY_CHARS:
        log.warning(
            "stream key %r is longer than %d characters or holds a NUL: not read", raw[:80], MAX_KEY_CHARS
        )
        return None
    return key
