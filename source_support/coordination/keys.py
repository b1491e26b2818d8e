"""The Redis key layout of one run: every key the coordinator reads or writes, named here.

Running deployments keep their keys in Redis across an upgrade, so a name here never
changes: a process with another layout would not see the run's leases and marks.
"""

from __future__ import annotations

from enum import StrEnum

#: How long run-wide marks live in Redis at most (a run's keys are purged when it ends).
DAY_MS = 24 * 3600 * 1000


class Mark(StrEnum):
    """The run-wide marks and job leases; each value is its key's name under the run's
    prefix, so a value never changes."""

    #: The run is over: every reader stops.
    STOPPED = "stopped"
    #: Backpressure: the transform is behind, so every reader waits.
    BACKPRESSURE = "paused"
    #: A user paused the flow: every reader waits until the flow is resumed.
    USER_HOLD = "held"
    #: Lease of the tick that runs the enumerator.
    ENUMERATOR_LOCK = "enum-lock"
    #: A tick found the enumerator lock taken: its holder makes one more pass.
    ENUMERATOR_DIRTY = "enum-dirty"
    #: A tick of the run is queued.
    TICK_QUEUED = "tick-queued"
    #: Set for a metrics interval once the run's metrics were written.
    METRICS_DUE = "metrics-due"
    #: Set for a checkpoint interval once a stream's checkpoint was taken.
    CHECKPOINT_DUE = "checkpoint-due"
    #: When the run was first seen without a live reader (cleared when one is back).
    NO_READER_SINCE = "no-reader-since"
    #: Lease of the process that runs the transform (bounded or stream: a run has one).
    TRANSFORM_LEASE = "transform-lease"
    #: A transform (or a stream transform's next slice) is queued.
    TRANSFORM_QUEUED = "transform-queued"


class Keys:
    """The keys of one run, all under one prefix (``pattern`` finds them all)."""

    def __init__(self, namespace: str, run_key: str) -> None:
        # ``run_key`` must never repeat (a run's random uid, not its database id): a fresh or
        # restored database next to an old Redis must not meet an older run's marks.
        self.prefix = f"{namespace}:run:{run_key}:"
        #: Every key of the run, as a SCAN pattern.
        self.pattern = self.prefix + "*"
        #: Hash: subtask -> where its reader runs.
        self.locations = self.prefix + "locations"
        #: Set: the subtasks whose reader has no more splits.
        self.done = self.prefix + "done"
        #: List: subtasks that took a reader lease since the last enumerator pass.
        self.registrations = self.prefix + "registrations"
        #: List: subtasks that asked for splits since the last pass.
        self.requests = self.prefix + "requests"
        #: List: source events for the enumerator.
        self.enumerator_events = self.prefix + "events:enumerator"
        #: When a reader of the run was last alive (seconds since the epoch).
        self.reader_alive_at = self.prefix + "reader-alive-at"
        #: The reader tokens the last pass saw (JSON).
        self.live_at_last_pass = self.prefix + "live-at-last-pass"
        #: The count of records the run's readers committed.
        self.records_committed = self.prefix + "records-committed"
        #: List of at most one item: a reader committed since the transform last looked.
        self.committed = self.prefix + "committed"
        #: A count the streaming transform moves each time it waits for input: readers land
        #: and commit what they hold once they see it move.
        self.input_wanted = self.prefix + "input-wanted"

    def reader(self, subtask: int) -> str:
        """The lease of reader ``subtask``: the token of the instance that holds it."""
        return f"{self.prefix}reader:{subtask}"

    def spawned(self, subtask: int) -> str:
        """Set while a reader of ``subtask`` is queued, so it is not queued twice."""
        return f"{self.prefix}spawned:{subtask}"

    def assigned(self, subtask: int) -> str:
        """List: the assignment notices for reader ``subtask``."""
        return f"{self.prefix}assigned:{subtask}"

    def no_more_splits(self, subtask: int) -> str:
        """The token of reader ``subtask`` once the enumerator has no more splits for it."""
        return f"{self.prefix}nomore:{subtask}"

    def reader_events(self, subtask: int) -> str:
        """List: the source events for reader ``subtask``."""
        return f"{self.prefix}events:reader:{subtask}"

    def mark(self, mark: Mark) -> str:
        """A run-wide mark or job lease (see ``Marks``)."""
        return self.prefix + mark.value
