"""``SourceReaderBase`` over a split reader that finishes several splits in one fetch: each
finished split's bad record is still described in the connector's words."""

from __future__ import annotations

import pyarrow as pa

from source_support.api import BadRecord, OffsetEntry, RecordBatch
from source_support.reader_base import SourceReaderBase, SplitReader
from tests.source_support.fakes import RecordingReaderContext
from tests.source_support.memory_stream import StreamSplit as Part


class EndsAllAtOnce(SplitReader[Part]):
    """One fetch ends every held split, each with one bad record at position 1."""

    def __init__(self) -> None:
        self.held: list[Part] = []

    def handle_splits_changes(self, added, removed) -> None:
        self.held += added

    def fetch(self, max_records: int, timeout_s: float) -> list[RecordBatch]:
        empty = pa.table({"x": pa.array([], pa.int64())})
        batches = [
            RecordBatch(
                p.name, p.offset, OffsetEntry(p.name, 1), empty, [BadRecord(1, "?", "bad")], finished=True
            )
            for p in self.held
        ]
        self.held = []
        return batches

    def describe(self, split: Part, position: int, *, line: int | None = None) -> str:
        return f"part {split.name} record {position}"


def test_every_split_finished_in_one_fetch_is_described_in_the_connectors_words():
    reader = SourceReaderBase(RecordingReaderContext(), EndsAllAtOnce(), batch_size=10)
    reader.add_splits([Part("a"), Part("b"), Part("c")])

    described = []
    while (batch := reader.poll()) is not None:
        described.append(reader.describe(batch.split_id, batch.bad_records[0].position))

    assert described == ["part a record 1", "part b record 1", "part c record 1"]
