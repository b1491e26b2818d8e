"""The two loops every connector shares: an enumerator tick and a reader time slice.

Both are plain functions over a ``Source``, a ``RunCoordinator`` (shared state: Redis, or
memory in the conformance kit) and a ``RunStore`` (durable state), so the same code runs
under Celery, in ``runflow``'s threads and in the kit (``source_support.testing``), which
steps a ``ReaderLoop`` under a manual clock.

The order of a reader's steps is what makes a crash harmless at any point:
poll -> land the batch under a name fixed by (split, start, end position) -> commit the new
position and the landed file in one store transaction, fenced by the reader's token.
A crash before the commit replays the same positions into the same file name.
"""

from __future__ import annotations

import enum
import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from typing import Any, Generic, Protocol

import pyarrow as pa

from source_support.api import (
    BadRecord,
    RecordBatch,
    SchemaChange,
    Source,
    SourceEvent,
    SplitEnumerator,
    SplitT,
)
from source_support.coordination import (
    SPLITS_REVOKED,
    AssignedSplit,
    ReaderInbox,
    RunCoordinator,
    RunEnumeratorContext,
    RunReaderContext,
    SplitStore,
)
from source_support.errors import SplitFailed
from source_support.landing import LandingZone

log = logging.getLogger(__name__)

SPLIT_REQUEST_RETRY_S = 5.0
#: A pass of the enumerator assigns at most this many splits (four full grants); requests
#: beyond it wait for the next pass, so one transaction stays small however many readers
#: ask at once, and a pass stays well under half a second on a busy machine.
MAX_SPLITS_PER_PASS = 1_024


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
    #: The size of the batch's records in memory (Arrow), for throughput metrics.
    bytes_read: int = 0
    #: The connector's note on the split (its stream was deleted, replaced, or lost with
    #: its server), kept on the split and said in the run's message.
    note: str = ""
    #: The schema changes seen in the batch, each with where it was seen.
    schema_changes: Sequence[SchemaChange] = ()


class RunStore(SplitStore, Protocol):
    """Durable state of one run, as the runtime needs it."""

    def load_enumerator_state(self) -> dict[str, Any] | None:
        """The last saved state, read fresh (None before the first tick)."""

    def save_enumerator_state(self, state: dict[str, Any], *, pending: int, exhausted: bool) -> None: ...

    def commit_batches(self, token: str, commits: Sequence[BatchCommit]) -> set[str]:
        """Moves each split's checkpoint past its batches, in one transaction, where
        ``token`` still owns the split and the first batch starts at the checkpoint;
        returns the ids of the splits that moved."""
        ...

    def fail_split(
        self, split_id: str, token: str, message: str, schema_changes: Sequence[SchemaChange] = ()
    ) -> None:
        """Fails the split (and so its run) with ``message``; ``schema_changes``: the
        change that failed it, recorded with the run's other changes."""
        ...


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
    source: Source[SplitT],
    coordinator: RunCoordinator,
    store: RunStore,
    parallelism: int,
) -> None:
    """Starts the run's enumerator once, when the run starts (Flink starts it in the
    JobManager when the job starts): a static source discovers its splits here, so ticks
    only hand them out. Call it in the transaction that creates the run."""
    context = RunEnumeratorContext(
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


def _save_state(store: RunStore, enumerator: SplitEnumerator[SplitT]) -> tuple[dict[str, Any], int, bool]:
    state, pending, exhausted = (
        enumerator.snapshot_state(),
        enumerator.pending_count(),
        enumerator.is_exhausted(),
    )
    store.save_enumerator_state(state, pending=pending, exhausted=exhausted)
    return state, pending, exhausted


def enumerator_tick(
    *,
    source: Source[SplitT],
    coordinator: RunCoordinator,
    store: RunStore,
    parallelism: int,
    atomic: Callable[[], AbstractContextManager[object]],
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
                context = RunEnumeratorContext(notices, store, serializer, parallelism=parallelism, live=live)
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
                    if origin is not None:  # a reader's event says which reader sent it
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
                more = coordinator.is_dirty()
                return TickResult(state, pending, exhausted, live, assigned, slowest, more)
            if not coordinator.take_dirty():
                return TickResult(state, pending, exhausted, live, assigned, slowest)


class _BufferedNotices:
    """What one pass tells readers (new splits, no more splits, events, the readers it
    saw), held back until its assignments are committed; ``flush`` then sends it all in
    one batch (a pipeline on Redis). Where readers run is read at once."""

    def __init__(self, coordinator: RunCoordinator) -> None:
        self.coordinator = coordinator
        self.held: list[Callable[[RunCoordinator], None]] = []
        self.assigned = 0

    def reader_locations(self) -> dict[int, str]:
        return self.coordinator.reader_locations()

    def notify_assigned(self, subtask: int, splits: Sequence[AssignedSplit]) -> None:
        self.held.append(lambda coordinator: coordinator.notify_assigned(subtask, splits))
        self.assigned += len(splits)

    def signal_no_more_splits(self, subtask: int, token: str) -> None:
        self.held.append(lambda coordinator: coordinator.signal_no_more_splits(subtask, token))

    def send_to_reader(self, subtask: int, event: SourceEvent) -> None:
        self.held.append(lambda coordinator: coordinator.send_to_reader(subtask, event))

    def remember_live(self, live: dict[int, str]) -> None:
        self.held.append(lambda coordinator: coordinator.remember_live(live))

    def flush(self) -> int:
        """Sends what was held back; returns how many splits were announced."""
        with self.coordinator.batched() as batch:
            for send in self.held:
                send(batch)
        assigned = self.assigned
        self.held.clear()
        self.assigned = 0
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
    #: ``[stop] after_records``: readers stop once the run has committed this many.
    stop_after_records: int | None = None
    #: A split's batches that a reader polled are landed together, in one file, once the
    #: first of them has waited this long (0: each at once), or sooner: once they hold
    #: ``max_batch_records`` records, the last one ends its split, or the run's streaming
    #: transform asks for input (``ReaderInbox.input_wanted``, as its epoch ends). A
    #: stream read one entry at a time would otherwise land a file (and commit it) per
    #: entry or two, and each epoch would read hundreds of tiny files.
    linger_s: float = 0.0
    #: The most records lingering batches are merged into (the flow's ``batch_size``).
    max_batch_records: int | None = None
    #: ``flow.max_errors`` under ``skip_errors``: once the bad records that wait to be
    #: committed are more than this, they are committed at once, so the store fails the
    #: split that went past the run's limit before the reader reads the rest of it (a
    #: wrong schema then costs about ``max_errors`` dead letters, not one per row).
    max_errors: int | None = None


def reader_slice(
    *,
    source: Source[SplitT],
    coordinator: RunCoordinator,
    store: RunStore,
    landing: LandingZone,
    run_key: str,
    subtask: int,
    token: str | None,
    settings: ReaderSettings,
    on_split_request: Callable[[], None],
    clock: Callable[[], float] = time.monotonic,
) -> SliceReport:
    """Reads for one time slice as reader ``subtask``; returns why it stopped.

    ``token`` is None for a new reader instance, or the token of the previous slice of
    the same instance, which then keeps its splits. ``clock`` (seconds) times the slice,
    commits and split requests.
    """
    token = coordinator.acquire_reader(subtask, token, settings.location)
    if token is None:
        return SliceReport(SliceOutcome.LOST, None)
    loop = ReaderLoop(
        source, coordinator, store, landing, run_key, subtask, token, settings, on_split_request, clock
    )
    return loop.run()


class ReaderLoop(Generic[SplitT]):
    """One slice of one reader: lease, adopt splits, poll, land, commit, heartbeat.

    The order of the steps makes a crash harmless at any point: a batch is landed under a
    name fixed by its split and positions before the commit that moves the checkpoint, and
    only a committed position is acknowledged upstream.

    ``run`` is ``open``, ``step`` until an outcome, ``close``; the conformance kit makes the
    same calls one at a time, under its clock.
    """

    def __init__(
        self,
        source: Source[SplitT],
        coordinator: RunCoordinator,
        store: RunStore,
        landing: LandingZone,
        run_key: str,
        subtask: int,
        token: str,
        settings: ReaderSettings,
        on_split_request: Callable[[], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.coordinator, self.store, self.landing, self.clock = coordinator, store, landing, clock
        self.run_key, self.subtask, self.token, self.settings = run_key, subtask, token, settings
        self.source = source
        self.report = SliceReport(SliceOutcome.CONTINUE, token)
        self.context = RunReaderContext(coordinator, subtask, on_split_request)
        self.context.bad_record_fails_split = not settings.skip_errors
        self.reader = source.create_reader(self.context)
        self.serializer = source.split_serializer
        self.commits = _Commits(store, token, settings)
        self.lingering = _Lingering(settings.linger_s, settings.max_batch_records)
        #: Bad records polled since the last commit (``ReaderSettings.max_errors``).
        self.waiting_bad = 0
        self.lease = LeaseKeeper(coordinator, subtask, token)
        self.deadline = clock() + settings.slice_seconds
        self.requested_at: float | None = None
        #: The transform's last request for input that this reader served.
        self.input_served = 0

    def run(self) -> SliceReport:
        try:
            self.open()
            while True:
                outcome = self.step(self.clock())
                if outcome is not None:
                    self.report.outcome = outcome
                    return self.report
        finally:
            self.close()

    def open(self) -> None:
        """Starts renewing the lease, and takes the splits the store says this reader owns."""
        self.lease.start()
        self.adopt_stored()

    def close(self) -> None:
        """Stops renewing the lease (a parked slice's lease lapses on its own) and releases
        the connector's reader; commits nothing."""
        self.lease.stop()
        self.reader.close()

    def step(self, now: float) -> SliceOutcome | None:
        """One turn of the loop; an outcome ends the slice."""
        if self.lease.lost.is_set():
            return SliceOutcome.LOST
        inbox = self.coordinator.reader_inbox(self.subtask)
        self.take_inbox(inbox)
        limit = self.settings.stop_after_records
        if inbox.stopped or (limit and inbox.records_committed >= limit):
            # After ``after_records``: every reader stops after its current batch; the tick
            # then ends the input (it counts from the database, so a lost count is harmless).
            self.commit()
            return SliceOutcome.STOPPED
        if now >= self.deadline:
            return self.park()
        if self.lingering.due(now):
            self.land_lingering(now)
        reader = self.reader
        if not reader.has_buffered() and (
            self.commits.due(now) or (self.commits and not reader.has_splits())
        ):
            self.commit_landed()  # what lingers lands at its own time
            return None
        if inbox.paused:  # backpressure, or a user's pause: read nothing for a while
            time.sleep(min(self.settings.poll_interval_s, max(0.0, self.deadline - now)))
            return None
        if not reader.has_splits():
            return self.wait_for_splits(now)
        return self.read(now)

    def take_inbox(self, inbox: ReaderInbox) -> None:
        for event in inbox.events:
            if event.kind == SPLITS_REVOKED:
                self.commit()  # what was read of them lands under their new reader instead
                for split_id in event.payload["split_ids"]:
                    self.reader.remove_split(split_id)
            else:
                self.reader.handle_source_event(event)
        if inbox.assigned:
            self.adopt(inbox.assigned)
        if inbox.input_wanted != self.input_served:
            # The transform waits for input: what lingers goes into its next epoch.
            self.input_served = inbox.input_wanted
            if self.lingering:
                self.commit()

    def park(self) -> SliceOutcome:
        """The slice's time is up: commit, and keep the lease while the next slice waits."""
        self.commit()
        self.lease.stop()  # so no renewal shortens the parked lease below
        self.coordinator.heartbeat(self.subtask, self.token, ttl_ms=int(self.settings.park_seconds * 1000))
        return SliceOutcome.CONTINUE

    def wait_for_splits(self, now: float) -> SliceOutcome | None:
        coordinator, subtask, token = self.coordinator, self.subtask, self.token
        if coordinator.no_more_splits(subtask, token):
            self.adopt_stored()  # a split assigned before the signal may not be adopted yet
            if self.reader.has_splits():
                return None
            self.reader.notify_no_more_splits()
            coordinator.release_reader(subtask, token, done=True)
            return SliceOutcome.DONE
        if self.requested_at is None or now - self.requested_at > SPLIT_REQUEST_RETRY_S:
            if self.requested_at is not None:
                self.adopt_stored()  # in case a notice was lost
            self.context.send_split_request()
            self.requested_at = now
        self.adopt(
            coordinator.wait_assigned(subtask, min(self.settings.poll_interval_s, self.deadline - now))
        )
        return None

    def read(self, now: float) -> SliceOutcome | None:
        reader, settings = self.reader, self.settings
        wait_s = min(settings.poll_interval_s, self.deadline - now, self.lingering.deadline - now)
        try:
            batch = reader.poll(max(0.0, wait_s))
        except SplitFailed as failed:  # even with skip_errors: nothing it read can be trusted
            return self.fail(failed.split_id, str(failed), failed.schema_changes)
        if batch is None:
            return None  # the poll waited for data where the source can
        if batch.bad_records and not settings.skip_errors:
            first = batch.bad_records[0]
            where = reader.describe(batch.split_id, first.position, line=first.line)
            raw = f": {first.raw[:200]!r}" if first.raw else ""
            return self.fail(batch.split_id, f"{where}: {first.reason}{raw}")
        for bad in batch.bad_records:
            bad.offset = self.source.format_position(bad.position)
        batch.schema_changes = [
            replace(c, where=reader.describe(batch.split_id, c.position)) for c in batch.schema_changes
        ]
        for ready in self.lingering.add(batch, now):
            self.commits.add(ready, _land(ready, self.landing, self.run_key), now)
        self.waiting_bad += len(batch.bad_records)
        if settings.max_errors is not None and self.waiting_bad > settings.max_errors:
            self.commit()  # the store fails the split past the run's limit now
        self.report.batches += 1
        self.report.records += batch.records.num_rows
        if batch.finished:
            self.requested_at = None
        return None

    def fail(self, split_id: str, message: str, schema_changes: Sequence[SchemaChange] = ()) -> SliceOutcome:
        """Fails the split (and so the run), after committing what came before it."""
        self.commit()
        self.store.fail_split(split_id, self.token, message, schema_changes)
        self.coordinator.stop()
        return SliceOutcome.STOPPED

    def adopt(self, splits: Iterable[AssignedSplit]) -> None:
        held = {s.split_id for s in self.reader.snapshot_state()}
        serializer = self.serializer
        fresh = [serializer.deserialize(p).at(pos) for split_id, p, pos in splits if split_id not in held]
        refused = [(split, why) for split in fresh if (why := self.source.split_refusal(split))]
        for split, why in refused:  # its connection changed since it was found: never read it
            self.store.fail_split(split.split_id, self.token, f"split {split.split_id}: {why}")
        if refused:
            self.coordinator.stop()
        self.reader.add_splits([split for split in fresh if all(split is not r for r, _ in refused)])

    def land_lingering(self, now: float) -> None:
        """Lands every split's lingering batches (each split's in one file)."""
        for ready in self.lingering.drain():
            self.commits.add(ready, _land(ready, self.landing, self.run_key), now)

    def commit(self) -> None:
        """Lands what lingers, then commits every landed batch that waits."""
        self.land_lingering(self.clock())
        self.commit_landed()

    def commit_landed(self) -> None:
        """Commits the landed batches that wait, then tells the reader what is durable."""
        committed, refused = self.commits.flush()
        self.waiting_bad = 0
        for split_id in refused:
            self.reader.remove_split(split_id)  # it went to another reader
            self.lingering.drop(split_id)
        if committed and self.settings.stop_after_records:
            self.coordinator.count_committed(self.commits.records)
        if committed:
            self.coordinator.note_committed()  # a stream's transform starts its next epoch now
        self.reader.notify_checkpoint_complete(committed)

    def adopt_stored(self) -> None:
        """Takes what the store says this reader owns (after a commit, so a split that is
        finished but not yet committed is not read twice)."""
        self.commit()
        self.coordinator.wait_assigned(self.subtask, 0)  # what the notices say, the store says too
        self.adopt(self.store.owned_splits(self.subtask, self.token))


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


class _Lingering:
    """Batches polled but not landed yet, merged per split (``ReaderSettings.linger_s``).

    A split's next batch joins its lingering one when it starts where that one ends and
    the two hold at most ``max_records`` records together; otherwise the lingering one is
    let go first. A batch that ends its split, or that is full, is let go at once, and
    with ``linger_s`` 0 every batch is."""

    def __init__(self, linger_s: float, max_records: int | None) -> None:
        self.linger_s, self.max_records = linger_s, max_records
        self.batches: dict[str, RecordBatch] = {}
        #: When the oldest lingering batch was polled (the clock's time); inf while none lingers.
        self.since = math.inf

    @property
    def deadline(self) -> float:
        """When what lingers must be landed (inf while nothing lingers)."""
        return self.since + self.linger_s

    def due(self, now: float) -> bool:
        return now >= self.deadline

    def __bool__(self) -> bool:
        return bool(self.batches)

    def add(self, batch: RecordBatch, now: float) -> list[RecordBatch]:
        """Takes ``batch``; returns the batches to land now, in the order they were read."""
        ready: list[RecordBatch] = []
        held = self.batches.pop(batch.split_id, None)
        if held is not None:
            if self._joins(held, batch):
                batch = _merged(held, batch)
            else:
                ready.append(held)
        full = self.max_records is not None and batch.records.num_rows >= self.max_records
        if self.linger_s <= 0 or batch.finished or full:
            ready.append(batch)
        else:
            self.batches[batch.split_id] = batch
            self.since = min(self.since, now)
        if not self.batches:
            self.since = math.inf
        return ready

    def drop(self, split_id: str) -> None:
        """Forgets what lingers of a split this reader no longer holds."""
        self.batches.pop(split_id, None)
        if not self.batches:
            self.since = math.inf

    def drain(self) -> list[RecordBatch]:
        """Every lingering batch, to land now."""
        ready, self.batches, self.since = list(self.batches.values()), {}, math.inf
        return ready

    def _joins(self, held: RecordBatch, batch: RecordBatch) -> bool:
        rows = held.records.num_rows + batch.records.num_rows
        return (
            held.end == batch.start
            and held.records.schema.equals(batch.records.schema)
            and (self.max_records is None or rows <= self.max_records)
        )


def _merged(first: RecordBatch, second: RecordBatch) -> RecordBatch:
    """One batch of ``first`` and ``second`` (which starts where ``first`` ends)."""
    return RecordBatch(
        first.split_id,
        first.start,
        second.end,
        pa.concat_tables([first.records, second.records]),
        first.bad_records + second.bad_records,
        second.finished,
        "; ".join(note for note in (first.note, second.note) if note),
        first.schema_changes + second.schema_changes,
    )


class _Commits:
    """Landed batches waiting for their commit, which ``flush`` makes in one transaction."""

    def __init__(self, store: RunStore, token: str, settings: ReaderSettings) -> None:
        self.store, self.token, self.settings = store, token, settings
        self.waiting: list[BatchCommit] = []
        self.since = 0.0
        #: Records the last ``flush`` committed.
        self.records = 0

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
                batch.records.nbytes,
                batch.note,
                batch.schema_changes,
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
        self.records = sum(c.records for c in waiting if c.split_id in moved)
        return committed, {c.split_id for c in waiting} - moved


def _land(batch: RecordBatch, landing: LandingZone, run_key: str) -> str | None:
    """Writes the batch's records under a name fixed by (split, start and end position)."""
    if not batch.records.num_rows:
        return None
    path = landing.batch_path(run_key, batch.split_id, batch.start.position, batch.end.position)
    landing.land(path, batch.records)
    return str(path)
