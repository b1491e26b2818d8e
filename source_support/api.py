"""The interfaces of the Flink source model (FLIP-27), one class per Flink concept.

``Source`` is the factory; a ``SplitEnumerator`` discovers and assigns ``SourceSplit``s and
runs once per flow; ``SourceReader``s run in parallel and read the splits they are given.
Both sides talk only through their contexts, so a connector never sees Redis or a database.
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Self, TypeVar

import pyarrow as pa


class Boundedness(enum.Enum):
    BOUNDED = "bounded"
    CONTINUOUS_UNBOUNDED = "continuous_unbounded"


@dataclass(frozen=True)
class OffsetEntry:
    """Where a split's data lives (``key``) and how far it has been read (``position``).

    ``position`` is connector-defined but always a non-negative integer that only grows
    (a byte offset in a file, a sequence number in a stream), so checkpoints compare.
    """

    key: str
    position: int


class SourceSplit(ABC):
    """A unit of work a single reader reads from start to end (Flink ``SourceSplit``)."""

    @property
    @abstractmethod
    def split_id(self) -> str: ...

    @property
    @abstractmethod
    def offset(self) -> OffsetEntry:
        """Where this split's data lives and how far it has been read."""

    @abstractmethod
    def at(self, position: int) -> Self:
        """The same split, read up to ``position``."""


SplitT = TypeVar("SplitT", bound=SourceSplit)


class SplitSerializer(ABC, Generic[SplitT]):
    """Turns a split (with its current position) into JSON-able data and back."""

    @abstractmethod
    def serialize(self, split: SplitT) -> dict[str, Any]: ...

    @abstractmethod
    def deserialize(self, data: dict[str, Any]) -> SplitT: ...


@dataclass(frozen=True)
class ReaderInfo:
    """A registered reader: its subtask index and where it runs."""

    subtask: int
    location: str = ""


@dataclass(frozen=True)
class SourceEvent:
    """A message between the enumerator and a reader (Flink ``SourceEvent``)."""

    kind: str
    payload: dict[str, Any] = field(default_factory=dict[str, Any])


class SplitBacklog(ABC, Generic[SplitT]):
    """Discovered splits that wait for a reader, in order, kept by the runtime outside the
    enumerator's state (Flink's ``FileSplitAssigner``, with its queue in the store): a
    tick then reads and writes only the splits it hands out, however long the backlog."""

    @abstractmethod
    def append(self, splits: Sequence[SplitT]) -> None: ...

    @abstractmethod
    def prepend(self, splits: Sequence[SplitT]) -> None:
        """Puts splits at the head, in order (splits that came back go first)."""

    @abstractmethod
    def take(self, count: int) -> list[SplitT]:
        """Removes and returns up to ``count`` splits from the head."""


class SplitEnumeratorContext(ABC, Generic[SplitT]):
    """What an enumerator may do to the running readers (Flink ``SplitEnumeratorContext``)."""

    @property
    @abstractmethod
    def current_parallelism(self) -> int: ...

    @abstractmethod
    def registered_readers(self) -> dict[int, ReaderInfo]: ...

    @abstractmethod
    def assign_splits(self, assignment: Mapping[int, Sequence[SplitT]]) -> None: ...

    def assign_split(self, split: SplitT, subtask: int) -> None:
        self.assign_splits({subtask: [split]})

    @abstractmethod
    def signal_no_more_splits(self, subtask: int) -> None: ...

    def revoke_splits(self, split_ids: Sequence[str]) -> list[SplitT]:
        """Takes splits back from the readers that hold them (to move them: a rescale, a
        reader that joined) and returns them at their committed positions, to be assigned
        again in the same pass; their old readers drop them. Splits not held are skipped.
        The default refuses: only contexts of unbounded runs need it."""
        raise NotImplementedError(f"{type(self).__name__} cannot revoke splits")

    @abstractmethod
    def send_event_to_source_reader(self, subtask: int, event: SourceEvent) -> None: ...

    @abstractmethod
    def backlog(self) -> SplitBacklog[SplitT]:
        """The run's durable queue of splits waiting for readers (not Flink's: an
        enumerator here is rebuilt each tick, so a large queue must not live in its state)."""


#: The most splits one request is answered with (see ``splits_per_request``).
MAX_SPLITS_PER_REQUEST = 256


def splits_per_request(pending: int, parallelism: int) -> int:
    """How many splits to give a reader that asks: its share of half the backlog.

    Flink's file enumerator answers a request with one split; with many small splits the
    round trips then cost more than the reading. Handing out ``pending / (2 x readers)``
    at a time (factoring, a self-scheduling rule for parallel loops) makes a large backlog
    cost few requests, while no reader takes more than half of a fair share and the last
    splits still go one by one, so the readers finish together.
    """
    return max(1, min(MAX_SPLITS_PER_REQUEST, pending // (2 * max(1, parallelism))))


class SplitEnumerator(ABC, Generic[SplitT]):
    """Discovers splits and hands them to readers on request (Flink ``SplitEnumerator``).

    An enumerator is rebuilt from ``snapshot_state()`` at each tick, so every method must
    leave the state it needs in that snapshot.
    """

    @abstractmethod
    def start(self) -> None:
        """Called on every rebuilt enumerator before it is used, so it must be idempotent:
        work done once (a first discovery) is recorded in the state and not done again."""

    @abstractmethod
    def handle_split_request(self, subtask: int, requester_location: str = "") -> None: ...

    @abstractmethod
    def add_splits_back(self, splits: Sequence[SplitT], subtask: int) -> None: ...

    @abstractmethod
    def add_reader(self, subtask: int) -> None: ...

    @abstractmethod
    def snapshot_state(self) -> dict[str, Any]: ...

    def handle_source_event(self, subtask: int, event: SourceEvent) -> None:
        """Reacts to a reader's event; the default ignores it."""

    def is_exhausted(self) -> bool:
        """True once a bounded enumerator has nothing left to assign, now or later."""
        return False

    def pending_count(self) -> int:
        """How many discovered splits wait for a reader."""
        return 0

    def close(self) -> None:
        """Releases what ``start`` opened."""


class SourceReaderContext(ABC):
    """What a reader may ask of the coordinator (Flink ``SourceReaderContext``)."""

    @property
    @abstractmethod
    def subtask(self) -> int: ...

    @abstractmethod
    def send_split_request(self) -> None: ...

    @abstractmethod
    def send_source_event_to_coordinator(self, event: SourceEvent) -> None: ...

    #: True when a bad record fails its split (``skip_errors = false``): a reader then stops
    #: looking at the first bad record instead of locating them all. Set by the runtime.
    bad_record_fails_split: bool = False


@dataclass
class BadRecord:
    """A record that could not be parsed, kept for the dead-letter store."""

    position: int
    raw: str
    reason: str
    #: 1-based line where the record starts, where the source has lines.
    line: int | None = None
    #: ``position`` in the source's own words (``Source.format_position``), set by the runtime.
    offset: str = ""


ADDED, MISSING, CHANGED_TYPE = "added", "missing", "retyped"


@dataclass(frozen=True)
class SchemaChange:
    """A column that stopped fitting: ``kind`` is added, missing or retyped; ``position``
    the first record it was seen at (bytes from the parsed block's start; -1: the file's
    header); ``records`` how many records of the batch it touched."""

    column: str
    kind: str
    old_type: str
    new_type: str
    policy: str
    position: int = -1
    records: int = 0
    #: ``position`` in words a person can act on (file and line, entry id), set by the runtime.
    where: str = ""

    def describe(self) -> str:
        """The change as a person reads it (without its position)."""
        if self.kind == ADDED:
            return f"a new column {self.column!r} ({self.new_type})"
        if self.kind == MISSING:
            return f"the column {self.column!r} ({self.old_type}) is missing"
        return f"the column {self.column!r} holds a {self.new_type} value, not {self.old_type}"


@dataclass
class RecordBatch:
    """What one ``poll`` returns: records of one split from ``start`` up to ``end``.

    ``end`` is the checkpoint to commit once ``records`` are durably landed; ``finished``
    says the split has no data past ``end``.
    """

    split_id: str
    start: OffsetEntry
    end: OffsetEntry
    records: pa.Table
    bad_records: list[BadRecord] = field(default_factory=list[BadRecord])
    finished: bool = False
    #: What the operator should know of this split besides its records (a stream deleted
    #: while it was read, replaced by another, or lost with its server): kept on the
    #: split's row and said in the run's message once the batch is committed; empty
    #: otherwise.
    note: str = ""
    #: The schema changes seen in the records (``format.on_schema_change``), each at a
    #: position of the split.
    schema_changes: list[SchemaChange] = field(default_factory=list[SchemaChange])


class SourceReader(ABC, Generic[SplitT]):
    """Reads the splits it is given, one batch per ``poll`` (Flink ``SourceReader``)."""

    @abstractmethod
    def add_splits(self, splits: Iterable[SplitT]) -> None: ...

    @abstractmethod
    def poll(self, timeout_s: float = 0.0) -> RecordBatch | None:
        """Returns the next batch, or None when no assigned split has data now (after
        waiting up to ``timeout_s`` where the source can wait for data)."""

    def has_buffered(self) -> bool:
        """True while batches already read wait to be polled (commit after them)."""
        return False

    def wake_up(self) -> None:
        """Makes a blocked ``poll`` return soon (from another thread)."""

    def notify_checkpoint_complete(self, positions: Mapping[str, int]) -> None:
        """``positions`` (split id -> position) are durably committed (Flink
        ``notifyCheckpointComplete``): only now may the connector acknowledge upstream."""

    @abstractmethod
    def notify_no_more_splits(self) -> None: ...

    @abstractmethod
    def snapshot_state(self) -> list[SplitT]:
        """The assigned, unfinished splits, each at its current position."""

    @property
    @abstractmethod
    def no_more_splits(self) -> bool: ...

    @abstractmethod
    def has_splits(self) -> bool: ...

    def remove_split(self, split_id: str) -> None:
        """Drops a split this reader no longer owns (its lease went elsewhere)."""

    def describe(self, split_id: str, position: int, *, line: int | None = None) -> str:
        """Where ``position`` of a held (or just finished) split is, on ``line`` if known,
        in words a person can act on."""
        return f"split {split_id} at position {position}"

    def handle_source_event(self, event: SourceEvent) -> None:
        """Reacts to an enumerator's event; the default ignores it."""

    def close(self) -> None:
        """Releases open files and connections."""


class Source(ABC, Generic[SplitT]):
    """A connector's factory for enumerators and readers (Flink ``Source``)."""

    @property
    @abstractmethod
    def boundedness(self) -> Boundedness: ...

    @property
    @abstractmethod
    def split_serializer(self) -> SplitSerializer[SplitT]: ...

    @abstractmethod
    def create_enumerator(self, context: SplitEnumeratorContext[SplitT]) -> SplitEnumerator[SplitT]:
        """A new enumerator, for a run that starts (Flink ``createEnumerator``)."""

    @abstractmethod
    def restore_enumerator(
        self, context: SplitEnumeratorContext[SplitT], state: dict[str, Any]
    ) -> SplitEnumerator[SplitT]:
        """The enumerator of a running run, from the state its last ``snapshot_state``
        returned (Flink ``restoreEnumerator``); every tick rebuilds it so."""

    @abstractmethod
    def create_reader(self, context: SourceReaderContext) -> SourceReader[SplitT]: ...

    def infer_schema(self) -> pa.Schema | None:
        """The schema of the data as sampled now; None where the source cannot tell."""
        return None

    def format_position(self, position: int) -> str:
        """A split position in the connector's own words (an entry id, a byte offset)."""
        return str(position)

    def parse_position(self, text: str) -> int:
        """The inverse of ``format_position``; ValueError with the accepted forms otherwise."""
        try:
            return int(text)
        except ValueError:
            raise ValueError(f"{text!r} is not a position (a whole number)") from None

    def position_time_ms(self, position: int) -> int | None:
        """When the record at ``position`` was written (ms since the Unix epoch), where the
        position says it (a stream entry id does); for end-to-end latency."""
        return None

    def split_lags(self, splits: Mapping[str, tuple[dict[str, Any], int]]) -> dict[str, int | None]:
        """For each split id -> (serialized split, committed position): how many records
        wait past the position (a stream's lag), None where the connector cannot tell."""
        return {}

    def split_to_retry(self, split: SplitT) -> SplitT:
        """A failed ``split`` as it is to be read again from its position once the user fixed
        its data (``flow_restart`` of failed splits); ValueError, saying why, if it cannot be
        read again safely. The default reads it as it was."""
        return split

    def missing_inputs(self, splits: Sequence[SplitT]) -> list[str]:
        """Of ``splits`` (not read to their end), the inputs that no longer exist, each
        named once (an object or file deleted since it was listed), so that a run that
        fails on one names every other it would fail on; the default knows of none."""
        return []

    def split_refusal(self, split: SplitT) -> str | None:
        """Why ``split`` may not be read now (a stream, topic, subject or object its
        connection no longer allows, a key the deployment uses), None if it may. Asked of
        every split a reader takes and of every stored split a run resumes, restores or
        restarts with: the connection may have been narrowed since the split was found."""
        return None

    #: True when reading through the enumerator and a reader leaves no trace upstream
    #: (files, objects, a table's rows): a preview may then read so. A stream's reader
    #: keeps a position (a consumer group, a durable consumer, an offset) and is False.
    reads_without_trace: bool = True

    def sample(self, *, limit: int, latest: bool, timeout_s: float) -> list[RecordBatch] | None:
        """Up to ``limit`` records (the first, or with ``latest`` the newest) read without
        making or moving any position upstream, for a preview; None where the source is
        read through its enumerator and reader instead (``reads_without_trace``)."""
        return None

    def describe_found(self, splits: Sequence[SplitT]) -> list[str]:
        """What a test of the connection found, in the connector's own words, one line per
        thing (a file and its size, a stream and its length): ``splits`` are what the
        enumerator found now (at most a few hundred). The default names each split."""
        return [f"{len(splits)} splits found"] + [f"split {s.split_id}" for s in splits]

    def release(self, states: Sequence[Mapping[str, Any] | None]) -> None:
        """The flow is deleted: drops what the source made upstream for it (a PostgreSQL
        cdc source's replication slot), as the enumerator ``states`` of its runs show it
        made; the default made nothing."""

    def check_input(self) -> None:
        """Refuses, before a run reads anything, input that cannot fit the schema (e.g. a CSV
        header without a schema column), raising ``ConfigError``; the default checks nothing."""
