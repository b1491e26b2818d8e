"""The two loops every connector shares: an enumerator tick and a reader time slice.

Both are plain functions over a ``Source``, a ``RunCoordinator`` (Redis) and a ``RunStore``
(durable state), so the same code runs under Celery, in ``runflow``'s threads and in tests.

The order of a reader's steps is what makes a crash harmless at any point:
poll -> land the batch under a name fixed by (split, start position) -> commit the new
position and the landed file in one store transaction, fenced by the reader's token.
A crash before the commit replays the same positions into the same file name.
"""

from __future__ import annotations

import copy
import enum
import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

from source_support.api import BadRecord, RecordBatch, Source, SplitEnumerator
from source_support.coordination import (
    AssignedSplit,
    RedisEnumeratorContext,
    RedisReaderContext,
    RunCoordinator,
    SplitStore,
)
from source_support.errors import SplitFailed
from source_support.landing import LandingZone

log = logging.getLogger(__name__)

SPLIT_REQUEST_RETRY_S = 5.0
#: A pass of the enumerator assigns at most this many splits; requests beyond it wait for
#: the next pass, so one transaction stays small however many readers ask at once.
MAX_SPLITS_PER_PASS = 2_000


@dataclass(frozen=True)
class BatchCommit:
    """One landed batch of one split, as a reader commits it."""

    split_id: str
    start: int
    end: int
    landed_path: str | None
    records: int
    bad_records: list[BadRecord]
    finished: bool


class RunStore(SplitStore, Protocol):
    """Durable state of one run, as the runtime needs it."""

    def load_enumerator_state(self) -> dict[str, Any] | None:
        """The last saved state, read fresh (None before the first tick)."""

    def save_enumerator_state(self, state: dict[str, Any], *, pending: int, exhausted: bool) -> None: ...

    def commit_batches(self, token: str, commits: Sequence[BatchCommit]) -> set[str]:
        """Moves each split's checkpoint past its batches, in one transaction, where
        ``token`` still owns the split and the first batch starts at the checkpoint;
        returns the ids of the splits that moved."""

    def fail_split(self, split_id: str, token: str, message: str) -> None: ...


@dataclass
class TickResult:
    state: dict[str, Any]
    pending: int
    exhausted: bool
    live: dict[int, str]
    assigned: int
    #: The longest single pass (a tick loops while requests keep arriving).
    slowest_pass_s: float = 0.0
    #: Requests arrived that this tick left to the next one (its time budget ran out).
    more: bool = False


def enumerator_start(
    *,
    source: Source,
    coordinator: RunCoordinator,
    store: RunStore,
    parallelism: int,
) -> None:
    """Starts the run's enumerator once, when the run starts (Flink starts it in the
    JobManager when the job starts): a static source discovers its splits here, so ticks
    only hand them out. Call it in the transaction that creates the run."""
    context = RedisEnumeratorContext(
        coordinator, store, source.split_serializer, parallelism=parallelism, live={}
    )
    state = store.load_enumerator_state()
    enumerator = (
        source.create_enumerator(context) if state is None else source.restore_enumerator(context, state)
    )
    enumerator.start()
    context.flush()
    _save_state(store, enumerator)
    enumerator.close()


def _save_state(store: RunStore, enumerator: SplitEnumerator) -> tuple[dict[str, Any], int, bool]:
    state, pending, exhausted = (
        enumerator.snapshot_state(),
        enumerator.pending_count(),
        enumerator.is_exhausted(),
    )
    store.save_enumerator_state(state, pending=pending, exhausted=exhausted)
    return state, pending, exhausted


def enumerator_tick(
    *,
    source: Source,
    coordinator: RunCoordinator,
    store: RunStore,
    parallelism: int,
    atomic: Callable[[], AbstractContextManager],
    budget_s: float | None = None,
) -> TickResult | None:
    """Runs the enumerator over what readers asked and what expired, in passes.

    Returns None when another tick of the same run holds the lock; that tick then makes
    one more pass, so the request that caused this call is still served promptly. Passes
    go on while requests keep arriving, for at most ``budget_s`` if given; the result then
    says whether requests were left for another tick (``more``).
    Each pass loads the state only once the lock is held, and saves assignments and the
    new state in one ``atomic()`` block; readers are woken only after it. So a split is
    never both pending and assigned, whatever number of ticks race.
    """
    serializer = source.split_serializer
    with coordinator.enumerator_lock() as held:
        if not held:
            return None
        assigned, slowest, started = 0, 0.0, time.perf_counter()
        while True:
            began = time.perf_counter()
            inputs = coordinator.collect_pass(parallelism)
            live = inputs.live
            notices = _BufferedNotices(coordinator)
            with atomic():
                state = store.load_enumerator_state()
                context = RedisEnumeratorContext(
                    notices, store, serializer, parallelism=parallelism, live=live
                )
                if state is None:
                    enumerator = source.create_enumerator(context)
                else:
                    enumerator = source.restore_enumerator(context, state)
                enumerator.start()
                for subtask in inputs.registrations:
                    if subtask in live:
                        enumerator.add_reader(subtask)
                if inputs.readers_gone:
                    for subtask, rows in store.reclaim_expired(live).items():
                        splits = [serializer.deserialize(payload).at(pos) for _, payload, pos in rows]
                        enumerator.add_splits_back(splits, subtask)
                for origin, event in inputs.events:
                    enumerator.handle_source_event(origin, event)
                for served, subtask in enumerate(inputs.requests):
                    if context.queued >= MAX_SPLITS_PER_PASS:
                        coordinator.push_back_split_requests(inputs.requests[served:])
                        break
                    enumerator.handle_split_request(subtask, context.locations().get(subtask, ""))
                context.flush()
                state, pending, exhausted = _save_state(store, enumerator)
                enumerator.close()
            notices.remember_live(live)
            assigned += notices.flush()
            slowest = max(slowest, time.perf_counter() - began)
            if budget_s is not None and time.perf_counter() - started >= budget_s:
                more = coordinator.is_set("enum-dirty")
                return TickResult(state, pending, exhausted, live, assigned, slowest, more)
            if not coordinator.take_dirty():
                return TickResult(state, pending, exhausted, live, assigned, slowest)


class _BufferedNotices:
    """Holds back what a pass tells readers until its assignments are committed, then
    sends it all in one pipeline."""

    BUFFERED = ("notify_assigned", "signal_no_more_splits", "send_event", "remember_live")

    def __init__(self, coordinator: RunCoordinator) -> None:
        self.coordinator = coordinator
        self.calls: list[tuple[str, tuple]] = []

    def __getattr__(self, name: str):
        if name in self.BUFFERED:
            return lambda *args: self.calls.append((name, args))
        return getattr(self.coordinator, name)

    def flush(self) -> int:
        """Sends what was buffered; returns how many splits were announced."""
        pipelined = copy.copy(self.coordinator)
        pipelined.redis = self.coordinator.redis.pipeline(transaction=False)
        for name, args in self.calls:
            getattr(pipelined, name)(*args)
        pipelined.redis.execute()
        assigned = sum(len(args[1]) for name, args in self.calls if name == "notify_assigned")
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
    #: A batch that ends its split is committed with the next ones, at most this long
    #: after it: many small splits cost one transaction. A batch in the middle of a split
    #: is committed at once (with any that wait), so a long split's checkpoint keeps up.
    commit_interval_s: float = 0.5
    #: ... or once this many batches wait, whichever comes first.
    max_batches_per_commit: int = 256


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
    context.bad_record_fails_split = not settings.skip_errors
    reader = source.create_reader(context)
    serializer = source.split_serializer
    commits = _Commits(store, token, settings)
    lease = LeaseKeeper(coordinator, subtask, token)
    deadline = time.monotonic() + settings.slice_seconds
    requested_at: float | None = None

    def adopt(splits: Iterable[AssignedSplit]) -> None:
        held = {s.split_id for s in reader.snapshot_state()}
        fresh = [serializer.deserialize(p).at(pos) for split_id, p, pos in splits if split_id not in held]
        reader.add_splits(fresh)

    def commit() -> None:
        committed, refused = commits.flush()
        for split_id in refused:
            reader.remove_split(split_id)  # it went to another reader
        reader.notify_checkpoint_complete(committed)

    def adopt_stored() -> None:
        """Takes what the store says this reader owns (after a commit, so a split that is
        finished but not yet committed is not read twice)."""
        commit()
        coordinator.wait_assigned(subtask, 0)  # what the notices say, the store says too
        adopt(store.owned_splits(subtask, token))

    lease.start()
    try:
        adopt_stored()
        while True:
            now = time.monotonic()
            if lease.lost.is_set():
                report.outcome = SliceOutcome.LOST
                return report
            stopped, events = coordinator.reader_inbox(subtask)
            for event in events:
                reader.handle_source_event(event)
            if stopped:
                commit()
                report.outcome = SliceOutcome.STOPPED
                return report
            if now >= deadline:
                commit()
                lease.stop()  # so no renewal shortens the parked lease below
                coordinator.heartbeat(subtask, token, ttl_ms=int(settings.park_seconds * 1000))
                return report
            if not reader.has_buffered() and (commits.due(now) or (commits and not reader.has_splits())):
                commit()
                continue
            if not reader.has_splits():
                if coordinator.no_more_splits(subtask, token):
                    adopt_stored()  # a split assigned before the signal may not be adopted yet
                    if reader.has_splits():
                        continue
                    reader.notify_no_more_splits()
                    coordinator.release_reader(subtask, token, done=True)
                    report.outcome = SliceOutcome.DONE
                    return report
                if requested_at is None or now - requested_at > SPLIT_REQUEST_RETRY_S:
                    if requested_at is not None:
                        adopt_stored()  # in case a notice was lost
                    context.send_split_request()
                    requested_at = now
                adopt(coordinator.wait_assigned(subtask, min(settings.poll_interval_s, deadline - now)))
                continue
            try:
                batch = reader.poll(max(0.0, min(settings.poll_interval_s, deadline - now)))
            except SplitFailed as failed:  # even with skip_errors: nothing it read can be trusted
                commit()
                store.fail_split(failed.split_id, token, str(failed))
                coordinator.stop()
                report.outcome = SliceOutcome.STOPPED
                return report
            if batch is None:
                continue  # the poll waited for data where the source can
            if batch.bad_records and not settings.skip_errors:
                commit()
                first = batch.bad_records[0]
                where = reader.describe(batch.split_id, first.position, line=first.line)
                raw = f": {first.raw[:200]!r}" if first.raw else ""
                store.fail_split(batch.split_id, token, f"{where}: {first.reason}{raw}")
                coordinator.stop()
                report.outcome = SliceOutcome.STOPPED
                return report
            commits.add(batch, _land(batch, landing, run_key), now)
            report.batches += 1
            report.records += batch.records.num_rows
            if batch.finished:
                requested_at = None
    finally:
        lease.stop()
        reader.close()


class LeaseKeeper:
    """Renews a reader's lease from a thread every third of the lease, so a long block (a
    slow parse, a slow disk) never lets it lapse; ``lost`` is set once a renewal is refused
    (another instance owns the reader), and the reader loop then stops."""

    def __init__(self, coordinator: RunCoordinator, subtask: int, token: str) -> None:
        self.coordinator, self.subtask, self.token = coordinator, subtask, token
        self.every_s = coordinator.lease_ms / 3000
        self.lost = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"lease-{subtask}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            try:
                renewed = self.coordinator.heartbeat(self.subtask, self.token)
            except Exception:  # noqa: BLE001 - Redis away for a moment: the next beat retries
                log.warning("reader %s: lease renewal failed", self.subtask, exc_info=True)
                continue
            if not renewed:
                log.warning("reader %s: lease lost", self.subtask)
                self.lost.set()
                return


class _Commits:
    """Landed batches waiting for their commit, which ``flush`` makes in one transaction."""

    def __init__(self, store: RunStore, token: str, settings: ReaderSettings) -> None:
        self.store, self.token, self.settings = store, token, settings
        self.waiting: list[BatchCommit] = []
        self.since = 0.0

    def __bool__(self) -> bool:
        return bool(self.waiting)

    def add(self, batch: RecordBatch, landed_path: str | None, now: float) -> None:
        if not self.waiting:
            self.since = now
        self.waiting.append(
            BatchCommit(
                batch.split_id,
                batch.start.position,
                batch.end.position,
                landed_path,
                batch.records.num_rows,
                batch.bad_records,
                batch.finished,
            )
        )

    def due(self, now: float) -> bool:
        return bool(self.waiting) and (
            not self.waiting[-1].finished
            or now - self.since >= self.settings.commit_interval_s
            or len(self.waiting) >= self.settings.max_batches_per_commit
        )

    def flush(self) -> tuple[dict[str, int], set[str]]:
        """Commits what waits; returns the committed position of each split that moved,
        and the splits that were refused (they went to another reader), which the reader
        must drop."""
        if not self.waiting:
            return {}, set()
        waiting, self.waiting = self.waiting, []
        moved = self.store.commit_batches(self.token, waiting)
        committed = {c.split_id: c.end for c in waiting if c.split_id in moved}
        return committed, {c.split_id for c in waiting} - moved


def _land(batch: RecordBatch, landing: LandingZone, run_key: str) -> str | None:
    """Writes the batch's records under a name fixed by (split, start position)."""
    if not batch.records.num_rows:
        return None
    path = landing.batch_path(run_key, batch.split_id, batch.start.position)
    landing.land(path, batch.records)
    return str(path)
