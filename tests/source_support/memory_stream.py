"""Streams in memory, and a small connector over them, to test the conformance kit itself.

Redis Streams in miniature: entries are appended to named streams (XADD), a split is a
stream read from a position (the number of entries read), a reader reads from all the
streams it holds at once and acknowledges entries (XACK) only when told their positions
are committed. The source is unbounded: its enumerator never says there are no more
splits.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa

from source_support.api import (
    BadRecord,
    Boundedness,
    OffsetEntry,
    RecordBatch,
    Source,
    SourceReaderContext,
    SourceSplit,
    SplitEnumerator,
    SplitEnumeratorContext,
    SplitSerializer,
)
from source_support.reader_base import SourceReaderBase, SplitReader
from source_support.testing import ExternalContext, Record, SourceOptions


class MemoryStreams:
    """Named append-only lists of records, and which entries were acknowledged."""

    def __init__(self) -> None:
        self.entries: dict[str, list[Record]] = {}
        self.acked: dict[str, set[int]] = {}
        #: While set, the "server" is away: every read raises ConnectionError.
        self.down = False

    def check_up(self) -> None:
        if self.down:
            raise ConnectionError("the memory streams are away")

    def add(self, name: str, records: Sequence[Record]) -> None:
        self.entries.setdefault(name, []).extend(records)
        self.acked.setdefault(name, set())

    def ack(self, name: str, below: int) -> None:
        self.acked[name].update(range(below))

    def acknowledged(self) -> list[Record]:
        return [self.entries[name][i] for name, indexes in self.acked.items() for i in sorted(indexes)]


@dataclass(frozen=True)
class StreamSplit(SourceSplit):
    name: str
    position: int = 0

    @property
    def split_id(self) -> str:
        return self.name

    @property
    def offset(self) -> OffsetEntry:
        return OffsetEntry(self.name, self.position)

    def at(self, position: int) -> StreamSplit:
        return replace(self, position=position)


class StreamSplitSerializer(SplitSerializer[StreamSplit]):
    def serialize(self, split: StreamSplit) -> dict[str, Any]:
        return {"name": split.name, "position": split.position}

    def deserialize(self, data: dict[str, Any]) -> StreamSplit:
        return StreamSplit(data["name"], data["position"])


class StreamEnumerator(SplitEnumerator[StreamSplit]):
    """Each stream found is a split, held by one reader for good: splits are pushed to the
    registered readers, balanced, as they are found or come back (a stream reader never
    finishes a split, so it never asks again); a reader that joins takes splits revoked
    from readers that hold more than their share."""

    def __init__(self, context: SplitEnumeratorContext, streams: MemoryStreams, state: dict | None) -> None:
        self.context, self.streams = context, streams
        self.known: list[str] = list((state or {}).get("known", []))
        self.owners: dict[str, int] = dict((state or {}).get("owners", {}))
        self.pending: int = (state or {}).get("pending", 0)

    def start(self) -> None:
        new = [name for name in sorted(self.streams.entries) if name not in self.known]
        self.context.backlog().append([StreamSplit(name) for name in new])
        self.known += new
        self.pending += len(new)
        self.assign_pending()

    def handle_split_request(self, subtask: int, requester_location: str = "") -> None:
        self.assign_pending()

    def add_splits_back(self, splits: Sequence[StreamSplit], subtask: int) -> None:
        for split in splits:
            self.owners.pop(split.split_id, None)
        self.context.backlog().prepend(splits)
        self.pending += len(splits)
        self.assign_pending()

    def add_reader(self, subtask: int) -> None:
        readers = self.context.registered_readers()
        share = -(-len(self.known) // max(1, len(readers)))
        held: dict[int, list[str]] = {}
        for name, owner in sorted(self.owners.items()):
            held.setdefault(owner, []).append(name)
        moving = [name for names in held.values() for name in names[share:]]
        for split in self.context.revoke_splits(moving):
            self.owners.pop(split.split_id)
            self.context.assign_splits({subtask: [split]})
            self.owners[split.split_id] = subtask
        self.assign_pending()

    def assign_pending(self) -> None:
        readers = sorted(self.context.registered_readers())
        if not readers or not self.pending:
            return
        given = self.context.backlog().take(self.pending)
        self.pending = 0
        counts = {r: sum(1 for owner in self.owners.values() if owner == r) for r in readers}
        for split in given:
            reader = min(readers, key=lambda r: counts[r])
            self.context.assign_splits({reader: [split]})
            self.owners[split.split_id] = reader
            counts[reader] += 1

    def snapshot_state(self) -> dict[str, Any]:
        return {"known": self.known, "owners": self.owners, "pending": self.pending}

    def pending_count(self) -> int:
        return self.pending


class StreamSplitReader(SplitReader[StreamSplit]):
    """Reads every held stream at once, one batch each; acknowledges on commit."""

    def __init__(self, streams: MemoryStreams) -> None:
        self.streams = streams
        self.held: dict[str, int] = {}

    def handle_splits_changes(self, added: Sequence[StreamSplit], removed: Sequence[str]) -> None:
        for split in added:
            self.held[split.name] = split.position
        for name in removed:
            self.held.pop(name, None)

    def fetch(self, max_records: int, timeout_s: float) -> list[RecordBatch]:
        self.streams.check_up()
        batches = []
        for name, position in self.held.items():
            entries = self.streams.entries[name][position : position + max_records]
            if entries:
                end = position + len(entries)
                # An entry {"bad": why} is one the format could not parse.
                bad = [
                    BadRecord(position + i, str(entry), entry["bad"])
                    for i, entry in enumerate(entries)
                    if "bad" in entry
                ]
                batches.append(
                    RecordBatch(
                        name,
                        OffsetEntry(name, position),
                        OffsetEntry(name, end),
                        pa.Table.from_pylist([entry for entry in entries if "bad" not in entry]),
                        bad_records=bad,
                    )
                )
                self.held[name] = end
        return batches

    def notify_checkpoint_complete(self, positions: Mapping[str, int]) -> None:
        for name, position in positions.items():
            self.streams.ack(name, position)


class MemoryStreamSource(Source[StreamSplit]):
    enumerator_class = StreamEnumerator
    reader_class = StreamSplitReader
    serializer_class = StreamSplitSerializer

    def __init__(self, streams: MemoryStreams, *, batch_size: int) -> None:
        self.streams, self.batch_size = streams, batch_size

    @property
    def boundedness(self) -> Boundedness:
        return Boundedness.CONTINUOUS_UNBOUNDED

    @property
    def split_serializer(self) -> SplitSerializer[StreamSplit]:
        return self.serializer_class()

    def create_enumerator(self, context: SplitEnumeratorContext) -> StreamEnumerator:
        return self.enumerator_class(context, self.streams, None)

    def restore_enumerator(self, context: SplitEnumeratorContext, state: dict[str, Any]) -> StreamEnumerator:
        return self.enumerator_class(context, self.streams, state)

    def create_reader(self, context: SourceReaderContext) -> SourceReaderBase[StreamSplit]:
        return SourceReaderBase(context, self.reader_class(self.streams), batch_size=self.batch_size)

    def split_lags(self, splits: Mapping[str, tuple[dict[str, Any], int]]) -> dict[str, int | None]:
        """Entries past each committed position."""
        return {name: len(self.streams.entries[name]) - position for name, (_, position) in splits.items()}


class MemoryStreamContext(ExternalContext):
    """Split i is stream ``s{i}``; a write appends to it (XADD)."""

    writes_while_running = True

    def __init__(self, source_class: type[MemoryStreamSource] = MemoryStreamSource) -> None:
        self.streams = MemoryStreams()
        self.source_class = source_class
        self.written: list[Record] = []

    def splits_wanted(self, count: int) -> None:
        for index in range(count):
            self.streams.add(f"s{index}", [])

    def write(self, split_index: int, records: list[Record]) -> list[Record]:
        self.streams.add(f"s{split_index}", records)
        self.written += records
        return records

    def append(self, split_index: int, records: list[Record]) -> list[Record]:
        return self.write(split_index, records)

    def stop_system(self) -> None:
        self.streams.down = True

    def start_system(self) -> None:
        self.streams.down = False

    def source(self, options: SourceOptions) -> MemoryStreamSource:
        return self.source_class(self.streams, batch_size=options.batch_size)

    def expected(self) -> list[Record]:
        return list(self.written)

    def acknowledged(self) -> list[Record]:
        return self.streams.acknowledged()
