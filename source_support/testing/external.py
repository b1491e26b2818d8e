"""The system a connector reads, as the conformance kit sees it (Flink ``ExternalContext``)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from source_support.api import Source

Record = dict[str, Any]


class NotApplicable(Exception):  # noqa: N818 - a case that does not apply, not an error
    """Raised by an optional hook of an ``ExternalContext`` whose system cannot do what it
    asks (files never go away); the message says why, and the case is skipped with it."""


@dataclass(frozen=True)
class SourceOptions:
    """What the kit builds a source with, besides what the context itself knows (where
    its data lives): the ``BuildContext`` fields a test varies, and the run's clock."""

    batch_size: int
    #: The run's clock (``time.time``: seconds); a source whose enumerator needs "now"
    #: (discovery intervals, stop times) must use it, so the kit can move time.
    clock: Callable[[], float]
    #: A validated ``[stop]`` rule, as ``BuildContext.stop``.
    stop: Mapping[str, Any] = field(default_factory=dict[str, Any])
    flow_name: str = "conformance"


class ExternalContext(ABC):
    """Sets up the data of a connector's source and says what it holds.

    A connector's tests implement one (files in a temporary directory, a Redis server's
    streams) and return it from the ``external_context`` fixture of their
    ``SourceConformanceSuite`` subclass. The kit writes records as dicts; a context
    stores them the way its system does and returns them as its source reads them back.
    """

    #: Whether the records of one split are read in the order they were written.
    ordered_within_split: bool = True
    #: Whether records written after the source was built are read (a stream, files with
    #: ``watch``); the kit then also writes while the run reads.
    writes_while_running: bool = False

    @abstractmethod
    def splits_wanted(self, count: int) -> None:
        """Prepares ``count`` splits' worth of places to write to (files, streams, ranges)."""

    @abstractmethod
    def write(self, split_index: int, records: list[Record]) -> list[Record]:
        """Writes ``records`` into split ``split_index`` (``0 <= split_index < count``);
        returns them as the source will read them (its schema, its types). A context may
        keep only their number where its system decides the values (a number sequence)."""

    @abstractmethod
    def source(self, options: SourceOptions) -> Source[Any]:
        """The source over what was written (and, if ``writes_while_running``, what will be);
        its splits are its connector's own type."""

    @abstractmethod
    def expected(self) -> list[Record]:
        """Every record written so far, as the source reads them, in the order written."""

    def acknowledged(self) -> list[Record] | None:
        """The records the connector has acknowledged upstream (XACK, a NATS ack), or None
        where the connector acknowledges nothing (files)."""
        return None

    # Optional hooks: the cases that need one are skipped, with the reason raised, for a
    # context that does not implement it.

    def write_bad_record(self, split_index: int) -> None:
        """Writes one record the source's format cannot parse at the end of split
        ``split_index`` (a CSV line with a word for a number, an entry without a field)."""
        raise NotApplicable(f"{type(self).__name__} cannot write a record its source cannot parse")

    def append(self, split_index: int, records: list[Record]) -> list[Record]:
        """Adds ``records`` at the end of split ``split_index`` itself (the same stream, the
        same file), while the run may be reading it; returns them as ``write`` does."""
        raise NotApplicable(f"{type(self).__name__} does not add records to a split being read")

    def stop_system(self) -> None:
        """Takes the external system away (its server stopped); ``start_system`` brings it
        back with what it held."""
        raise NotApplicable(f"{type(self).__name__} cannot stop its external system")

    def start_system(self) -> None:
        """Brings back what ``stop_system`` took away."""
        raise NotApplicable(f"{type(self).__name__} cannot stop its external system")

    def close(self) -> None:  # noqa: B027 - most contexts hold nothing to release
        """Releases what the context made (connections, streams)."""
