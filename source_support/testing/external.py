"""The system a connector reads, as the conformance kit sees it (Flink ``ExternalContext``)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from source_support.api import Source

Record = dict[str, Any]


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

    def close(self) -> None:  # noqa: B027 - most contexts hold nothing to release
        """Releases what the context made (connections, streams)."""
