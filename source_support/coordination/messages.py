"""Messages between a run's readers and its enumerator, on Redis lists: split requests,
assignment notices, source events both ways, and what a reader finds in its inbox."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from source_support.api import SourceEvent
from source_support.coordination.keys import DAY_MS, Keys, Mark
from source_support.coordination.redis_commands import RedisCommands

#: The event that tells a reader to drop splits that were moved to another reader; the
#: runtime handles it, a connector never sees it.
SPLITS_REVOKED = "splits-revoked"

#: A split as assigned: (split_id, serialized split, checkpointed position).
AssignedSplit = tuple[str, dict[str, Any], int]


def decode_notices(raw: Sequence[bytes]) -> list[AssignedSplit]:
    """The splits in assignment notices; an empty notice is only a wake-up.

    A notice holds every split of one assignment (a JSON list of splits), so a grant of
    hundreds of splits costs one encode and one list item; a notice of one split alone
    (``[split_id, payload, position]``, as earlier versions sent) is read too.
    """
    splits: list[AssignedSplit] = []
    for notice in raw:
        if not notice:
            continue
        body = json.loads(notice)
        if body and isinstance(body[0], str):
            splits.append((body[0], body[1], body[2]))
        else:
            splits += [(split_id, payload, position) for split_id, payload, position in body]
    return splits


@dataclass
class ReaderInbox:
    stopped: bool
    #: Readers wait: backpressure, or a user's hold (``RunCoordinator.user_hold_set``).
    paused: bool
    #: Records the run's readers committed (counted where a rule needs it; 0 otherwise).
    records_committed: int
    events: list[SourceEvent]
    assigned: list[AssignedSplit]
    #: How many times the run's transform asked for input (``want_input``): a reader
    #: that sees it move lands and commits what it holds.
    input_wanted: int = 0


@dataclass
class PassInputs:
    live: dict[int, str]
    #: True if a reader seen by the last pass has no lease any more (or no pass ran yet)
    readers_gone: bool
    registrations: list[int]
    events: list[tuple[int | None, SourceEvent]]
    #: subtasks of live readers that asked for splits, each once, in order
    requests: list[int]


class Messages:
    """The message queues of one run."""

    def __init__(self, client: RedisCommands, keys: Keys) -> None:
        self.redis, self.keys = client, keys

    # What the enumerator reads.

    def collect_pass(self, parallelism: int) -> PassInputs:
        """What an enumerator pass works on, taken from Redis in one round trip: the live
        readers, and the registrations, source events and split requests since the last
        pass (taken off their queues)."""
        pipe = self.redis.pipeline()
        pipe.mget([self.keys.reader(i) for i in range(parallelism)])
        pipe.get(self.keys.live_at_last_pass)
        queues = [self.keys.registrations, self.keys.enumerator_events, self.keys.requests]
        for key in queues:
            pipe.lrange(key, 0, -1)
        pipe.delete(*queues)
        tokens, last, registrations, events, requests, _ = pipe.execute()
        live = {i: t.decode() for i, t in enumerate(tokens) if t is not None}
        return PassInputs(
            live=live,
            readers_gone=last is None or not set(json.loads(last)) <= set(live.values()),
            registrations=[int(s) for s in registrations],
            events=[_decode_event(raw) for raw in events],
            requests=[s for s in dict.fromkeys(int(s) for s in requests) if s in live],
        )

    def remember_live(self, live: dict[int, str]) -> None:
        """Records the readers a pass saw (after its assignments are committed): the next
        pass looks for expired leases only if one of them is gone."""
        self.redis.set(self.keys.live_at_last_pass, json.dumps(sorted(live.values())), px=DAY_MS)

    # Split requests and assignment notices.

    def request_split(self, subtask: int) -> None:
        self.redis.rpush(self.keys.requests, subtask)

    def push_back_split_requests(self, subtasks: Sequence[int]) -> None:
        """Returns requests a pass did not serve to the head of the queue, for the next pass."""
        pipe = self.redis.pipeline()
        pipe.lpush(self.keys.requests, *reversed(subtasks))
        pipe.set(self.keys.mark(Mark.ENUMERATOR_DIRTY), 1)
        pipe.execute()

    def notify_assigned(self, subtask: int, splits: Sequence[AssignedSplit]) -> None:
        """Hands the reader its new splits (payload and checkpoint as stored), waking it;
        an empty list only wakes it (e.g. no more splits). One notice carries them all."""
        self.redis.rpush(self.keys.assigned(subtask), json.dumps(splits) if splits else "")

    def wait_assigned(self, subtask: int, timeout_s: float) -> list[AssignedSplit]:
        """Splits assigned since the last call, waiting up to ``timeout_s`` for the first."""
        key = self.keys.assigned(subtask)
        first = self.redis.blpop([key], timeout=max(timeout_s, 0.01)) if timeout_s > 0 else None
        rest = self._drain(key)
        return decode_notices(([first[1]] if first else []) + rest)

    def signal_no_more_splits(self, subtask: int, token: str) -> None:
        self.redis.set(self.keys.no_more_splits(subtask), token, px=DAY_MS)

    def no_more_splits(self, subtask: int, token: str) -> bool:
        value = self.redis.get(self.keys.no_more_splits(subtask))
        return value is not None and value.decode() == token

    # Source events, both ways.

    def send_to_enumerator(self, event: SourceEvent, origin: int) -> None:
        self._send(self.keys.enumerator_events, event, origin)

    def send_to_reader(self, subtask: int, event: SourceEvent) -> None:
        self._send(self.keys.reader_events(subtask), event, None)

    def _send(self, key: str, event: SourceEvent, origin: int | None) -> None:
        body = {"kind": event.kind, "payload": event.payload, "origin": origin}
        self.redis.rpush(key, json.dumps(body))

    # What a reader reads.

    def reader_inbox(self, subtask: int) -> ReaderInbox:
        """What reached reader ``subtask`` since the last call, taken off its queues in one
        round trip: whether the run was stopped or paused (backpressure or a user's hold),
        the enumerator's events and new assignments (a reader of a stream holds its splits
        for good, so it must see a new split while it reads the others)."""
        events, assigned = self.keys.reader_events(subtask), self.keys.assigned(subtask)
        pipe = self.redis.pipeline()
        pipe.exists(self.keys.mark(Mark.STOPPED))
        pipe.exists(self.keys.mark(Mark.BACKPRESSURE), self.keys.mark(Mark.USER_HOLD))
        pipe.get(self.keys.records_committed)
        pipe.lrange(events, 0, -1)
        pipe.lrange(assigned, 0, -1)
        pipe.delete(events, assigned)
        pipe.get(self.keys.input_wanted)
        stopped, paused, committed, raw_events, notices, _, wanted = pipe.execute()
        return ReaderInbox(
            stopped=bool(stopped),
            paused=bool(paused),
            records_committed=int(committed or 0),
            events=[_decode_event(item)[1] for item in raw_events],
            assigned=decode_notices(notices),
            input_wanted=int(wanted or 0),
        )

    def count_committed(self, records: int) -> None:
        """Adds to the run's count of committed records (for ``after_records``)."""
        pipe = self.redis.pipeline()
        pipe.incrby(self.keys.records_committed, records)
        pipe.pexpire(self.keys.records_committed, DAY_MS)
        pipe.execute()

    # Commits, for the streaming transform: an epoch starts once a commit lands.

    def note_committed(self) -> None:
        """Says that a reader committed landed batches: wakes a waiting ``wait_committed``
        (one item at most waits, however many commits come)."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.lpush(self.keys.committed, 1)
        pipe.ltrim(self.keys.committed, 0, 0)
        pipe.pexpire(self.keys.committed, DAY_MS)
        pipe.execute()

    def want_input(self) -> None:
        """Asks the run's readers to land and commit what they hold (the transform is
        about to wait for input): moves the count their inbox shows."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.incrby(self.keys.input_wanted, 1)
        pipe.pexpire(self.keys.input_wanted, DAY_MS)
        pipe.execute()

    def take_committed(self) -> bool:
        """Whether a reader committed since the last call (or ``wait_committed``), forgetting it."""
        return bool(self.redis.delete(self.keys.committed))

    def wait_committed(self, timeout_s: float) -> bool:
        """Waits up to ``timeout_s`` for a reader to commit (or takes a commit that came since
        the last call); True if one did."""
        if timeout_s <= 0:
            return self.take_committed()
        return self.redis.blpop([self.keys.committed], timeout=max(timeout_s, 0.01)) is not None

    def _drain(self, key: str) -> list[bytes]:
        pipe = self.redis.pipeline()
        pipe.lrange(key, 0, -1)
        pipe.delete(key)
        items, _ = pipe.execute()
        return items


def _decode_event(raw: bytes) -> tuple[int | None, SourceEvent]:
    body = json.loads(raw)
    return body["origin"], SourceEvent(body["kind"], body["payload"])
