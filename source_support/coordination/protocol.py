"""``RunCoordinator``: what the runtime needs of a run's short-lived shared state (reader
leases, split requests, assignment notices, source events, run-wide stop), as a protocol.

``RedisRunCoordinator`` keeps it in Redis for a fleet of processes;
``source_support.testing.MemoryRunCoordinator`` keeps it in memory for the conformance kit,
which so runs the runtime's own enumerator tick and reader loop.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Protocol

from source_support.api import SourceEvent
from source_support.coordination.messages import AssignedSplit, PassInputs, ReaderInbox


class ReaderNotices(Protocol):
    """What an enumerator pass tells readers, and where they run."""

    def reader_locations(self) -> dict[int, str]:
        """Where each subtask's reader runs (or last ran)."""
        ...

    def notify_assigned(self, subtask: int, splits: Sequence[AssignedSplit]) -> None:
        """Hands the reader its new splits, waking it; an empty list only wakes it."""

    def signal_no_more_splits(self, subtask: int, token: str) -> None: ...

    def send_to_reader(self, subtask: int, event: SourceEvent) -> None: ...


class RunCoordinator(ReaderNotices, Protocol):
    """The shared, short-lived state of one run: what its readers and enumerator tell each
    other. What must survive a crash is the ``SplitStore``'s."""

    #: How long a reader's lease lasts without a heartbeat.
    lease_ms: int

    # Reader instances.

    def acquire_reader(self, subtask: int, token: str | None, location: str = "") -> str | None:
        """Takes (or, with ``token``, keeps) the subtask; None if another instance holds it."""
        ...

    def heartbeat(self, subtask: int, token: str, *, ttl_ms: int | None = None) -> bool:
        """Renews the reader's lease, for ``ttl_ms`` if given; False once another owns it."""
        ...

    def release_reader(self, subtask: int, token: str, *, done: bool) -> None: ...

    # What a reader sends and receives.

    def request_split(self, subtask: int) -> None: ...

    def send_to_enumerator(self, event: SourceEvent, origin: int) -> None: ...

    def wait_assigned(self, subtask: int, timeout_s: float) -> list[AssignedSplit]:
        """Splits assigned since the last call, waiting up to ``timeout_s`` for the first."""
        ...

    def no_more_splits(self, subtask: int, token: str) -> bool: ...

    def reader_inbox(self, subtask: int) -> ReaderInbox:
        """What reached reader ``subtask`` since the last call."""
        ...

    def count_committed(self, records: int) -> None:
        """Adds to the run's count of committed records (for ``after_records``)."""

    def note_committed(self) -> None:
        """Says that a reader committed landed batches."""

    def stop(self) -> None:
        """Tells every reader of the run to stop."""

    # The enumerator's passes.

    def enumerator_lock(self) -> AbstractContextManager[bool]:
        """Holds the run's enumerator lock, yielding False when another tick has it (which
        then makes one more pass: see ``is_dirty``)."""
        ...

    def collect_pass(self, parallelism: int) -> PassInputs:
        """What an enumerator pass works on, taken off the queues."""
        ...

    def push_back_split_requests(self, subtasks: Sequence[int]) -> None:
        """Returns requests a pass did not serve to the head of the queue, for the next pass."""

    def is_dirty(self) -> bool:
        """Whether requests arrived that call for another pass (left as they are)."""
        ...

    def take_dirty(self) -> bool:
        """Whether requests arrived that call for another pass, forgetting it."""
        ...

    def remember_live(self, live: dict[int, str]) -> None:
        """Records the readers a pass saw (after its assignments are committed)."""

    def batched(self) -> AbstractContextManager[RunCoordinator]:
        """A coordinator of the same run whose writes are sent together when the block ends."""
        ...
