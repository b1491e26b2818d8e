"""``RedisRunCoordinator``: the Redis side of one run (a ``RunCoordinator``), composed of
its reader leases, its message queues and its marks; the methods here are what runtimes
and services call."""

from __future__ import annotations

import copy
from collections.abc import Generator, Sequence
from contextlib import contextmanager

import redis

from source_support.api import SourceEvent
from source_support.coordination.keys import DAY_MS, Keys, Mark
from source_support.coordination.leases import HeldLease, LeaseScripts, ReaderLeases
from source_support.coordination.marks import Marks
from source_support.coordination.messages import AssignedSplit, Messages, PassInputs, ReaderInbox
from source_support.coordination.redis_commands import RedisCommands


class RedisRunCoordinator:
    """Redis keys and operations of one run of one flow (a ``RunCoordinator`` for a fleet
    of processes)."""

    def __init__(
        self, client: redis.Redis, run_key: str, *, lease_ms: int = 10_000, namespace: str = "adf"
    ) -> None:
        #: The client as given (for what the coordinator has no command of its own).
        self.redis = client
        self.run_key, self.namespace, self.lease_ms = run_key, namespace, lease_ms
        self.keys = Keys(namespace, run_key)
        self._use(RedisCommands(client))

    def _use(self, commands: RedisCommands) -> None:
        scripts = LeaseScripts(commands)
        self._commands = commands
        self._readers = ReaderLeases(commands, self.keys, scripts, self.lease_ms)
        self._messages = Messages(commands, self.keys)
        self._marks = Marks(commands, self.keys, scripts)

    @contextmanager
    def batched(self) -> Generator[RedisRunCoordinator]:
        """A coordinator of the same run whose commands are queued and sent in one round
        trip when the block ends without an error. For writes: what it reads is not there."""
        pipe = self._commands.pipeline(transaction=False)
        batch = copy.copy(self)
        batch._use(pipe)
        yield batch
        pipe.execute()

    # Reader instances (``ReaderLeases``).

    def acquire_reader(self, subtask: int, token: str | None, location: str = "") -> str | None:
        """Takes (or, with ``token``, keeps) the subtask; None if another instance holds it."""
        return self._readers.acquire(subtask, token, location)

    def heartbeat(self, subtask: int, token: str, *, ttl_ms: int | None = None) -> bool:
        """Renews the reader's lease, for ``ttl_ms`` if given (e.g. while it waits in a queue)."""
        return self._readers.heartbeat(subtask, token, ttl_ms=ttl_ms)

    def note_reader_alive(self, at: float | None = None) -> None:
        """Records that a reader was alive (or is expected from) ``at`` (on ``now``'s
        clock), by default now."""
        self._readers.note_alive(at)

    def reader_alive_at(self) -> float | None:
        """When a reader of the run was last alive (on ``now``'s clock); None if unknown."""
        return self._readers.alive_at()

    def reader_alive_since(self) -> float:
        """When a reader of the run was last alive (on ``now``'s clock); from now on if
        nothing says (Redis lost the key)."""
        return self._readers.alive_since()

    def now(self) -> float:
        """Seconds since the epoch on Redis's clock: the one clock on which every process
        of a fleet measures leases, heartbeats and stalls (their own clocks may disagree)."""
        return self._commands.time()

    def release_reader(self, subtask: int, token: str, *, done: bool) -> None:
        self._readers.release(subtask, token, done=done)

    def live_readers(self, parallelism: int) -> dict[int, str]:
        return self._readers.live(parallelism)

    def reader_locations(self) -> dict[int, str]:
        return self._readers.locations()

    def done_readers(self) -> set[int]:
        return self._readers.done()

    def claim_spawn(self, subtask: int) -> bool:
        """True at most once per lease period per subtask, so a queued reader is not doubled."""
        return self._readers.claim_spawn(subtask)

    # The enumerator's passes.

    def collect_pass(self, parallelism: int) -> PassInputs:
        """What an enumerator pass works on, taken off Redis in one round trip."""
        return self._messages.collect_pass(parallelism)

    def remember_live(self, live: dict[int, str]) -> None:
        """Records the readers a pass saw (after its assignments are committed)."""
        self._messages.remember_live(live)

    @contextmanager
    def enumerator_lock(self) -> Generator[bool]:
        """Holds the run's enumerator lock, yielding False when another tick has it.

        The lock lives for a reader lease and is renewed while held, so a tick whose
        process dies or loses Redis frees it as soon as a lost reader's splits could go
        elsewhere. (Ticks are also serialized by the store, which locks the run's state.)
        A tick that finds the lock taken leaves a ``dirty`` mark; the holder loops once
        more before it lets go, so no request waits for the next periodic tick.
        """
        with self._marks.held_lease(Mark.ENUMERATOR_LOCK, self.lease_ms) as held:
            if not held:
                self._marks.set(Mark.ENUMERATOR_DIRTY)
            yield bool(held)

    def is_dirty(self) -> bool:
        """Whether a tick found the enumerator lock taken (or a pass left requests) since
        the last ``take_dirty``."""
        return self._marks.is_set(Mark.ENUMERATOR_DIRTY)

    def take_dirty(self) -> bool:
        """Whether a tick found the enumerator lock taken since the last call."""
        return self._marks.clear(Mark.ENUMERATOR_DIRTY)

    # Split requests, assignment notices and source events (``Messages``).

    def request_split(self, subtask: int) -> None:
        self._messages.request_split(subtask)

    def push_back_split_requests(self, subtasks: Sequence[int]) -> None:
        """Returns requests a pass did not serve to the head of the queue, for the next pass."""
        self._messages.push_back_split_requests(subtasks)

    def notify_assigned(self, subtask: int, splits: Sequence[AssignedSplit]) -> None:
        """Hands the reader its new splits, waking it; an empty list only wakes it."""
        self._messages.notify_assigned(subtask, splits)

    def wait_assigned(self, subtask: int, timeout_s: float) -> list[AssignedSplit]:
        """Splits assigned since the last call, waiting up to ``timeout_s`` for the first."""
        return self._messages.wait_assigned(subtask, timeout_s)

    def signal_no_more_splits(self, subtask: int, token: str) -> None:
        self._messages.signal_no_more_splits(subtask, token)

    def no_more_splits(self, subtask: int, token: str) -> bool:
        return self._messages.no_more_splits(subtask, token)

    def send_to_enumerator(self, event: SourceEvent, origin: int) -> None:
        self._messages.send_to_enumerator(event, origin)

    def send_to_reader(self, subtask: int, event: SourceEvent) -> None:
        self._messages.send_to_reader(subtask, event)

    def reader_inbox(self, subtask: int) -> ReaderInbox:
        """What reached reader ``subtask`` since the last call, in one round trip."""
        return self._messages.reader_inbox(subtask)

    def count_committed(self, records: int) -> None:
        """Adds to the run's count of committed records (for ``after_records``)."""
        self._messages.count_committed(records)

    def note_committed(self) -> None:
        """Says that a reader committed landed batches, waking the streaming transform."""
        self._messages.note_committed()

    def want_input(self) -> None:
        """Asks the run's readers to land and commit what lingers (``ReaderInbox.input_wanted``)."""
        self._messages.want_input()

    def take_committed(self) -> bool:
        """Whether a reader committed since the last look, forgetting it: a commit made
        after this call wakes the next ``wait_committed``."""
        return self._messages.take_committed()

    def wait_committed(self, timeout_s: float) -> bool:
        """Waits up to ``timeout_s`` for a reader's commit since the last look; True if one came."""
        return self._messages.wait_committed(timeout_s)

    # Run-wide flags and marks (``Marks``).

    def stop(self) -> None:
        """Tells every reader of the run to stop; the mark expires after a day."""
        self._marks.set(Mark.STOPPED, ttl_ms=DAY_MS)

    def is_stopped(self) -> bool:
        return self._marks.is_set(Mark.STOPPED)

    # Readers wait while either of two marks is set, kept apart so that the transform
    # catching up (backpressure off) never ends a user's pause.

    def backpressure_set(self, on: bool) -> None:
        """Backpressure: the transform is behind, so every reader waits (on) or goes on."""
        if on:
            self._marks.set(Mark.BACKPRESSURE, ttl_ms=DAY_MS)
        else:
            self._marks.clear(Mark.BACKPRESSURE)

    def backpressure_on(self) -> bool:
        """Whether backpressure makes the run's readers wait."""
        return self._marks.is_set(Mark.BACKPRESSURE)

    def user_hold_set(self, on: bool) -> None:
        """A user's pause of the flow: every reader waits (on) until it is resumed; kept
        until the run's keys are purged, and set again from the database by each tick."""
        if on:
            self._marks.set(Mark.USER_HOLD)
        else:
            self._marks.clear(Mark.USER_HOLD)

    def user_hold_on(self) -> bool:
        """Whether a user's pause makes the run's readers wait."""
        return self._marks.is_set(Mark.USER_HOLD)

    def mark_once(self, mark: Mark, ttl_ms: int) -> bool:
        """Sets ``mark`` unless it is set; True if this call set it."""
        return self._marks.once(mark, ttl_ms)

    def first_seen(self, mark: Mark) -> float:
        """The time ``mark`` was first set (now if it is not set yet), on ``now``'s clock."""
        return self._marks.first_seen(mark)

    def clear_mark(self, mark: Mark) -> None:
        self._marks.clear(mark)

    def is_set(self, mark: Mark) -> bool:
        return self._marks.is_set(mark)

    @contextmanager
    def held_lease(self, mark: Mark, ttl_ms: int) -> Generator[HeldLease]:
        """Holds lease ``mark`` while the block runs, renewed by a thread; yields a
        ``HeldLease`` that is false if another process holds it, and whose ``lost`` is set
        once another process has taken it (see ``leases.hold_lease``)."""
        with self._marks.held_lease(mark, ttl_ms) as lease:
            yield lease

    def purge(self) -> None:
        """Deletes every key of this run."""
        for key in self._commands.scan_iter(match=self.keys.pattern, count=1000):
            self._commands.delete(key)
