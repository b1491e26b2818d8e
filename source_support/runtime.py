"""The two loops every connector shares: an enumerator tick and a reader time slice.

Both are plain functions over a ``Source``, a ``RunCoordinator`` (Redis) and a ``RunStore``
(durable state), so the same code runs under Celery, in ``runflow``'s threads and in tests.

The order of a reader's steps is what makes a crash harmless at any point:
poll -> land the batch under a name fixed by (split, start position) -> commit the new
position and the landed file in one store transaction, fenced by the reader's token.
A crash before the commit replays the same positions into the same file name.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

from source_support.api import BadRecord, RecordBatch, Source
from source_support.coordination import (
    RedisEnumeratorContext,
    RedisReaderContext,
    RunCoordinator,
    SplitStore,
)
from source_support.landing import LandingZone

SPLIT_REQUEST_RETRY_S = 5.0


class RunStore(SplitStore, Protocol):
    """Durable state of one run, as the runtime needs it."""

    def load_enumerator_state(self) -> dict[str, Any] | None:
        """The last saved state, read fresh (None before the first tick)."""

    def save_enumerator_state(self, state: dict[str, Any], *, pending: int, exhausted: bool) -> None: ...

    def commit_batch(
        self,
        split_id: str,
        token: str,
        *,
        start: int,
        end: int,
        landed_path: str | None,
        records: int,
        bad_records: list[BadRecord],
        finished: bool,
    ) -> bool:
        """Moves the split's checkpoint to ``end`` if ``token`` still owns it."""

    def fail_split(self, split_id: str, token: str, message: str) -> None: ...


@dataclass
class TickResult:
    state: dict[str, Any]
    pending: int
    exhausted: bool
    live: dict[int, str]
    assigned: int


def enumerator_tick(
    *,
    source: Source,
    coordinator: RunCoordinator,
    store: RunStore,
    parallelism: int,
    atomic: Callable[[], AbstractContextManager],
) -> TickResult | None:
    """Runs the enumerator once over what readers asked and what expired.

    Returns None when another tick of the same run holds the lock; that tick then loops
    once more, so the request that caused this call is still served promptly.
    The state is loaded only once the lock is held, and assignments and the new state are
    saved in one ``atomic()`` block; readers are woken only after it. So a split is never
    both pending and assigned, whatever number of ticks race.
    """
    serializer = source.split_serializer
    with coordinator.enumerator_lock() as held:
        if not held:
            return None
        assigned = 0
        while True:
            live = coordinator.live_readers(parallelism)
            notices = _BufferedNotices(coordinator)
            with atomic():
                state = store.load_enumerator_state()
                context = RedisEnumeratorContext(
                    notices, store, serializer, parallelism=parallelism, live=live
                )
                enumerator = source.create_enumerator(context, state)
                enumerator.start()
                for subtask in coordinator.pop_registrations():
                    if subtask in live:
                        enumerator.add_reader(subtask)
                for subtask, rows in store.reclaim_expired(live).items():
                    splits = [serializer.deserialize(p).at(pos) for p, pos in rows]
                    enumerator.add_splits_back(splits, subtask)
                for origin, event in coordinator.pop_events("enumerator"):
                    enumerator.handle_source_event(origin, event)
                requests = [s for s in coordinator.pop_split_requests() if s in live]
                locations = coordinator.reader_locations() if requests else {}
                for subtask in requests:
                    enumerator.handle_split_request(subtask, locations.get(subtask, ""))
                context.flush()
                state = enumerator.snapshot_state()
                pending, exhausted = (
                    enumerator.pending_count(),
                    enumerator.is_exhausted(),
                )
                store.save_enumerator_state(state, pending=pending, exhausted=exhausted)
                enumerator.close()
            assigned += notices.flush()
            if not coordinator.take_dirty():
                return TickResult(state, pending, exhausted, live, assigned)


class _BufferedNotices:
    """Holds back reader wake-ups until the assignments they announce are committed."""

    def __init__(self, coordinator: RunCoordinator) -> None:
        self.coordinator = coordinator
        self.calls: list[tuple[Callable, tuple]] = []

    def __getattr__(self, name: str):
        return getattr(self.coordinator, name)

    def notify_assigned(self, subtask: int, split_ids) -> None:
        self.calls.append((self.coordinator.notify_assigned, (subtask, list(split_ids))))

    def signal_no_more_splits(self, subtask: int, token: str) -> None:
        self.calls.append((self.coordinator.signal_no_more_splits, (subtask, token)))

    def send_event(self, *args) -> None:
        self.calls.append((self.coordinator.send_event, args))

    def flush(self) -> int:
        assigned = 0
        for call, args in self.calls:
            call(*args)
            if call == self.coordinator.notify_assigned:
                assigned += len(args[1])
        self.calls.clear()
        return assigned


class SliceOutcome(enum.Enum):
    CONTINUE = "continue"  # time is up; the same reader goes on in a new slice
    DONE = "done"  # no more splits for this reader
    LOST = "lost"  # another instance owns the subtask, or our lease lapsed
    STOPPED = "stopped"  # the run was stopped or failed


@dataclass
class SliceReport:
    outcome: SliceOutcome
    token: str | None
    batches: int = 0
    records: int = 0


@dataclass
class ReaderSettings:
    slice_seconds: float
    poll_interval_s: float
    skip_errors: bool
    location: str = ""
    #: How long the lease of a reader lasts between two slices, while its next slice waits
    #: in the queue behind other flows' work. It bounds how long a lost continuation
    #: (its worker died holding the message) keeps the reader's splits.
    park_seconds: float = 60.0


def reader_slice(
    *,
    source: Source,
    coordinator: RunCoordinator,
    store: RunStore,
    landing: LandingZone,
    run_key: str,
    subtask: int,
    token: str | None,
    settings: ReaderSettings,
    on_split_request: Callable[[], None],
) -> SliceReport:
    """Reads for one time slice as reader ``subtask``; returns why it stopped.

    ``token`` is None for a new reader instance, or the token of the previous slice of
    the same instance, which then keeps its splits.
    """
    token = coordinator.acquire_reader(subtask, token, settings.location)
    if token is None:
        return SliceReport(SliceOutcome.LOST, None)
    report = SliceReport(SliceOutcome.CONTINUE, token)
    context = RedisReaderContext(coordinator, subtask, on_split_request)
    reader = source.create_reader(context)
    serializer = source.split_serializer
    heartbeat_every = coordinator.lease_ms / 3000
    deadline = time.monotonic() + settings.slice_seconds
    last_beat = time.monotonic()
    requested_at: float | None = None

    def adopt() -> None:
        held = {s.split_id for s in reader.snapshot_state()}
        fresh = [serializer.deserialize(p).at(pos) for p, pos in store.owned_splits(subtask, token)]
        reader.add_splits(s for s in fresh if s.split_id not in held)

    try:
        adopt()
        while True:
            now = time.monotonic()
            if now - last_beat >= heartbeat_every:
                if not coordinator.heartbeat(subtask, token):
                    report.outcome = SliceOutcome.LOST
                    return report
                last_beat = now
            if coordinator.is_stopped():
                report.outcome = SliceOutcome.STOPPED
                return report
            if now >= deadline:
                coordinator.heartbeat(subtask, token, ttl_ms=int(settings.park_seconds * 1000))
                return report
            if not reader.has_splits():
                if coordinator.no_more_splits(subtask, token):
                    adopt()  # a split assigned before the signal may not be adopted yet
                    if reader.has_splits():
                        continue
                    reader.notify_no_more_splits()
                    coordinator.release_reader(subtask, token, done=True)
                    report.outcome = SliceOutcome.DONE
                    return report
                if requested_at is None or now - requested_at > SPLIT_REQUEST_RETRY_S:
                    context.send_split_request()
                    requested_at = now
                coordinator.wait_assigned(subtask, min(settings.poll_interval_s, deadline - now))
                adopt()
                continue
            batch = reader.poll()
            if batch is None:
                time.sleep(settings.poll_interval_s)
                continue
            if batch.bad_records and not settings.skip_errors:
                first = batch.bad_records[0]
                where = reader.describe(batch.split_id, first.position)
                raw = f": {first.raw[:200]!r}" if first.raw else ""
                store.fail_split(batch.split_id, token, f"{where}: {first.reason}{raw}")
                coordinator.stop()
                report.outcome = SliceOutcome.STOPPED
                return report
            if not _land_and_commit(batch, store, landing, run_key, token):
                reader.remove_split(batch.split_id)  # the split went to another reader
            report.batches += 1
            report.records += batch.records.num_rows
            if batch.finished:
                requested_at = None
    finally:
        reader.close()


def _land_and_commit(
    batch: RecordBatch, store: RunStore, landing: LandingZone, run_key: str, token: str
) -> bool:
    path = None
    if batch.records.num_rows:
        path = landing.batch_path(run_key, batch.split_id, batch.start.position)
        landing.land(path, batch.records)
    return store.commit_batch(
        batch.split_id,
        token,
        start=batch.start.position,
        end=batch.end.position,
        landed_path=str(path) if path else None,
        records=batch.records.num_rows,
        bad_records=batch.bad_records,
        finished=batch.finished,
    )
