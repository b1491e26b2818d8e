"""A run's shared and durable state kept in memory, for the conformance kit to run the
runtime's own enumerator tick and reader loop (``source_support.runtime``) without Redis
or a database.

- ``MemoryRunCoordinator``: a ``RunCoordinator`` (reader leases, requests, notices, events);
- ``MemoryRunStore``: a ``RunStore`` with the rules of the database's (an assignment
  refuses a split that is out with a reader or finished, a commit is fenced by the reader's
  token and the checkpoint), which also checks the reader contract (``ContractViolation``);
- ``MemoryLandingZone``: a landing zone that keeps each landed batch's table.

A split and the enumerator's state travel through JSON, as they do through the database.
"""

from __future__ import annotations

import copy
import json
import os
import threading
import time
import uuid
from collections.abc import Generator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from source_support.api import BadRecord, SchemaChange, SourceEvent
from source_support.coordination import AssignedSplit, PassInputs, ReaderInbox
from source_support.landing import LandingZone
from source_support.runtime import BatchCommit


class ContractViolation(AssertionError):
    """A connector broke a promise of the source model; the message says which."""


def json_round_trip(data: Any) -> Any:
    """``data`` as it comes back from the database (a JSON column)."""
    return json.loads(json.dumps(data))


class ManualClock:
    """A clock (seconds) that moves only when told to."""

    def __init__(self, start: float | None = None) -> None:
        self.now = time.time() if start is None else start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class MemoryRunCoordinator:
    """The ``RunCoordinator`` of one run in one process. A lease lapses only when the kit
    says so (``expire_reader``: the reader's process died), never by the clock."""

    def __init__(self, *, lease_ms: int = 10_000) -> None:
        self.lease_ms = lease_ms
        self._lock = threading.Lock()  # heartbeats come from the readers' lease threads
        self.leases: dict[int, str] = {}
        self.locations: dict[int, str] = {}
        self.done: set[int] = set()
        self.registrations: list[int] = []
        self.requests: list[int] = []
        self.enumerator_events: list[tuple[int | None, SourceEvent]] = []
        self.notices: dict[int, list[list[AssignedSplit]]] = {}
        self.reader_events: dict[int, list[SourceEvent]] = {}
        self.no_more: dict[int, str] = {}
        self.live_at_last_pass: list[str] | None = None
        self.stopped = False
        self.paused = False
        self.records_committed = 0
        self.commits_noted = 0
        #: How often the transform asked for input (``want_input``).
        self.inputs_wanted = 0
        self.dirty = False
        self.locked = False
        #: Each subtask told there are no more splits, in order.
        self.no_more_signals: list[int] = []

    # Reader instances.

    def acquire_reader(self, subtask: int, token: str | None, location: str = "") -> str | None:
        with self._lock:
            if token is not None:
                if self.leases.get(subtask) != token:
                    return None
                self.locations[subtask] = location
                return token
            if subtask in self.leases:
                return None
            token = uuid.uuid4().hex
            self.leases[subtask] = token
            self.locations[subtask] = location
            self.done.discard(subtask)
            self.registrations.append(subtask)
            return token

    def heartbeat(self, subtask: int, token: str, *, ttl_ms: int | None = None) -> bool:
        with self._lock:
            return self.leases.get(subtask) == token

    def release_reader(self, subtask: int, token: str, *, done: bool) -> None:
        with self._lock:
            if done:
                self.done.add(subtask)
            if self.leases.get(subtask) == token:
                del self.leases[subtask]

    def expire_reader(self, subtask: int) -> None:
        """The lease of ``subtask``'s reader lapses (its process died)."""
        with self._lock:
            self.leases.pop(subtask, None)

    def reader_locations(self) -> dict[int, str]:
        return dict(self.locations)

    # What a reader sends and receives.

    def request_split(self, subtask: int) -> None:
        self.requests.append(subtask)

    def send_to_enumerator(self, event: SourceEvent, origin: int) -> None:
        self.enumerator_events.append((origin, json_event(event)))

    def notify_assigned(self, subtask: int, splits: Sequence[AssignedSplit]) -> None:
        self.notices.setdefault(subtask, []).append(json_round_trip(list(splits)))

    def wait_assigned(self, subtask: int, timeout_s: float) -> list[AssignedSplit]:
        """What was assigned since the last call, at once (one process: nothing comes while
        a reader would wait)."""
        notices = self.notices.pop(subtask, [])
        return [(split_id, payload, position) for notice in notices for split_id, payload, position in notice]

    def signal_no_more_splits(self, subtask: int, token: str) -> None:
        self.no_more[subtask] = token
        self.no_more_signals.append(subtask)

    def no_more_splits(self, subtask: int, token: str) -> bool:
        return self.no_more.get(subtask) == token

    def send_to_reader(self, subtask: int, event: SourceEvent) -> None:
        self.reader_events.setdefault(subtask, []).append(json_event(event))

    def reader_inbox(self, subtask: int) -> ReaderInbox:
        return ReaderInbox(
            stopped=self.stopped,
            paused=self.paused,
            records_committed=self.records_committed,
            events=self.reader_events.pop(subtask, []),
            assigned=self.wait_assigned(subtask, 0),
            input_wanted=self.inputs_wanted,
        )

    def count_committed(self, records: int) -> None:
        self.records_committed += records

    def note_committed(self) -> None:
        self.commits_noted += 1

    def want_input(self) -> None:
        """The run's transform asks readers to land what lingers, as the stream's driver does."""
        self.inputs_wanted += 1

    def stop(self) -> None:
        self.stopped = True

    # The enumerator's passes.

    @contextmanager
    def enumerator_lock(self) -> Generator[bool]:
        if self.locked:
            self.dirty = True
            yield False
            return
        self.locked = True
        try:
            yield True
        finally:
            self.locked = False

    def collect_pass(self, parallelism: int) -> PassInputs:
        with self._lock:
            live = {s: t for s, t in self.leases.items() if s < parallelism}
        last = self.live_at_last_pass
        registrations, self.registrations = self.registrations, []
        events, self.enumerator_events = self.enumerator_events, []
        requests, self.requests = self.requests, []
        return PassInputs(
            live=live,
            readers_gone=last is None or not set(last) <= set(live.values()),
            registrations=registrations,
            events=events,
            requests=[s for s in dict.fromkeys(requests) if s in live],
        )

    def push_back_split_requests(self, subtasks: Sequence[int]) -> None:
        self.requests[:0] = subtasks
        self.dirty = True

    def is_dirty(self) -> bool:
        return self.dirty

    def take_dirty(self) -> bool:
        dirty, self.dirty = self.dirty, False
        return dirty

    def remember_live(self, live: dict[int, str]) -> None:
        self.live_at_last_pass = sorted(live.values())

    @contextmanager
    def batched(self) -> Generator[MemoryRunCoordinator]:
        yield self


def json_event(event: SourceEvent) -> SourceEvent:
    """``event`` as it comes off a queue (its payload through JSON)."""
    return SourceEvent(event.kind, json_round_trip(event.payload))


@dataclass
class StoredSplit:
    """A split's row: its payload, checkpoint, owner (a reader instance's token) and counts."""

    payload: dict[str, Any]
    position: int
    owner: str | None = None
    owner_subtask: int | None = None
    finished: bool = False
    failed: str = ""
    records_read: int = 0
    bytes_read: int = 0
    batches: int = 0
    note: str = ""


@dataclass(frozen=True)
class Assignment:
    """A split handed to a reader instance, at its checkpoint (the store's journal)."""

    subtask: int
    token: str
    split_id: str
    position: int


@dataclass(frozen=True)
class DeadLetter:
    split_id: str
    record: BadRecord


@dataclass
class StoreState:
    """Everything a ``MemoryRunStore`` keeps, copied whole for a transaction."""

    splits: dict[str, StoredSplit] = field(default_factory=dict[str, StoredSplit])
    backlog: dict[int, dict[str, Any]] = field(default_factory=dict[int, dict[str, Any]])
    enumerator_state: dict[str, Any] | None = None
    pending: int = 0
    exhausted: bool = False
    #: Committed batches, in commit order, with the token that committed them.
    committed: list[tuple[str, BatchCommit]] = field(default_factory=list[tuple[str, BatchCommit]])
    dead_letters: list[DeadLetter] = field(default_factory=list[DeadLetter])
    assignments: list[Assignment] = field(default_factory=list[Assignment])
    #: Splits given back to the enumerator after their reader was gone: (subtask, split id, position).
    returned: list[tuple[int, str, int]] = field(default_factory=list[tuple[int, str, int]])
    #: Splits an assignment named that were out with a reader or finished (refused).
    refused: list[str] = field(default_factory=list[str])


class MemoryRunStore:
    """The ``RunStore`` of one run, with the database store's rules (see ``dataflow.store``)."""

    def __init__(self) -> None:
        self.state = StoreState()

    @contextmanager
    def atomic(self) -> Generator[object]:
        """A transaction: what the block changed is undone if it raises."""
        saved = copy.deepcopy(self.state)
        try:
            yield self
        except BaseException:
            self.state = saved
            raise

    # SplitStore

    def record_assignments(
        self,
        assignments: dict[int, list[AssignedSplit]],
        tokens: dict[int, str],
        locations: dict[int, str],
    ) -> dict[int, list[AssignedSplit]]:
        out: dict[int, list[AssignedSplit]] = {}
        state = self.state
        for subtask, rows in assignments.items():
            for split_id, payload, position in rows:
                stored = state.splits.get(split_id)
                if stored is None:
                    stored = state.splits[split_id] = StoredSplit(json_round_trip(payload), position)
                elif stored.owner is not None or stored.finished or stored.failed:
                    state.refused.append(split_id)
                    continue
                stored.owner, stored.owner_subtask = tokens[subtask], subtask
                state.assignments.append(Assignment(subtask, tokens[subtask], split_id, stored.position))
                out.setdefault(subtask, []).append((split_id, stored.payload, stored.position))
        return out

    def owned_splits(self, subtask: int, token: str) -> list[AssignedSplit]:
        return [
            (split_id, s.payload, s.position)
            for split_id, s in self.state.splits.items()
            if s.owner == token and not s.finished and not s.failed
        ]

    def reclaim_expired(self, live: dict[int, str]) -> dict[int, list[AssignedSplit]]:
        reclaimed: dict[int, list[AssignedSplit]] = {}
        tokens = set(live.values())
        for split_id, stored in self.state.splits.items():
            subtask = stored.owner_subtask
            if stored.owner is None or stored.owner in tokens or subtask is None:
                continue
            if stored.finished or stored.failed:
                continue
            reclaimed.setdefault(subtask, []).append((split_id, stored.payload, stored.position))
            self.state.returned.append((subtask, split_id, stored.position))
            stored.owner, stored.owner_subtask = None, None
        return reclaimed

    def revoke_splits(self, split_ids: Sequence[str]) -> list[tuple[int, AssignedSplit]]:
        revoked: list[tuple[int, AssignedSplit]] = []
        for split_id in split_ids:
            stored = self.state.splits.get(split_id)
            if stored is None or stored.owner_subtask is None or stored.finished or stored.failed:
                continue
            revoked.append((stored.owner_subtask, (split_id, stored.payload, stored.position)))
            stored.owner, stored.owner_subtask = None, None
        return revoked

    def backlog_add(self, payloads: Sequence[dict[str, Any]], *, front: bool) -> None:
        backlog = self.state.backlog
        start = min(backlog, default=0) - len(payloads) if front else max(backlog, default=-1) + 1
        for index, payload in enumerate(payloads):
            backlog[start + index] = json_round_trip(payload)

    def backlog_head(self, count: int) -> list[tuple[int, dict[str, Any]]]:
        return [(key, self.state.backlog[key]) for key in sorted(self.state.backlog)[:count]]

    def backlog_remove(self, keys: Sequence[int]) -> None:
        for key in keys:
            self.state.backlog.pop(key, None)

    # RunStore

    def load_enumerator_state(self) -> dict[str, Any] | None:
        return json_round_trip(self.state.enumerator_state)

    def save_enumerator_state(self, state: dict[str, Any], *, pending: int, exhausted: bool) -> None:
        self.state.enumerator_state = json_round_trip(state)
        self.state.pending, self.state.exhausted = pending, exhausted

    def commit_batches(self, token: str, commits: Sequence[BatchCommit]) -> set[str]:
        """Moves each split owned by ``token`` past its batches, all or nothing per split;
        a split another reader owns now is refused. A batch of a split ``token`` owns that
        does not follow on from its checkpoint is a ``ContractViolation``: in the kit no
        stale instance commits, so only the connector can have lost the position."""
        by_split: dict[str, list[BatchCommit]] = {}
        for commit in commits:
            by_split.setdefault(commit.split_id, []).append(commit)
        moved: set[str] = set()
        for split_id, batches in by_split.items():
            stored = self.state.splits.get(split_id)
            if stored is None or stored.owner != token or stored.finished or stored.failed:
                continue
            position = stored.position
            for batch in batches:
                _check_batch(split_id, batch, position)
                position = batch.end
            stored.position, stored.finished = position, batches[-1].finished
            stored.records_read += sum(b.records for b in batches)
            stored.bytes_read += sum(b.bytes_read for b in batches)
            stored.batches += len(batches)
            stored.note = next((b.note for b in reversed(batches) if b.note), stored.note)
            self.state.committed += [(token, b) for b in batches]
            self.state.dead_letters += [DeadLetter(split_id, bad) for b in batches for bad in b.bad_records]
            moved.add(split_id)
        return moved

    def fail_split(
        self, split_id: str, token: str, message: str, schema_changes: Sequence[SchemaChange] = ()
    ) -> None:
        stored = self.state.splits.get(split_id)
        if stored is not None and stored.owner == token and not stored.finished:
            stored.failed = message

    # What the kit reads.

    def checkpoint(self, split_id: str) -> int | None:
        stored = self.state.splits.get(split_id)
        return None if stored is None else stored.position

    def backlog_payloads(self) -> list[dict[str, Any]]:
        """The serialized splits that wait, head first."""
        return [self.state.backlog[key] for key in sorted(self.state.backlog)]


def _check_batch(split_id: str, batch: BatchCommit, position: int) -> None:
    where = f"a batch of split {split_id}"
    if batch.start != position:
        raise ContractViolation(
            f"{where} starts at {batch.start}, but the split was at {position} (its checkpoint or "
            "the end of its last batch): records would be lost or read twice"
        )
    if batch.end < batch.start:
        raise ContractViolation(f"{where} ends at {batch.end}, before its start {batch.start}")
    if batch.end == batch.start and batch.records:
        raise ContractViolation(
            f"{where} holds {batch.records} records but does not move the position "
            f"({batch.start}): a replay from the checkpoint would read them again"
        )


class MemoryLandingZone(LandingZone):
    """A landing zone that keeps each landed table by its path instead of writing it."""

    def __init__(self) -> None:
        super().__init__("/nonexistent/memory-landing", fsync=False)
        self.tables: dict[str, pa.Table] = {}

    def land(self, path: Path, table: pa.Table) -> None:
        self.tables[str(path)] = table

    def remove(self, path: str | os.PathLike[str]) -> None:
        self.tables.pop(str(path), None)
