"""The sequence source and its split reader."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from connectors.sequence.config import SequenceSourceConfig
from connectors.sequence.enumerator import NumberSequenceEnumerator
from connectors.sequence.split import NumberRangeSerializer, NumberRangeSplit
from source_support.api import (
    Boundedness,
    OffsetEntry,
    RecordBatch,
    Source,
    SourceReaderContext,
    SplitEnumeratorContext,
)
from source_support.formats import FormatSpec
from source_support.reader_base import SequentialSplitReader, SourceReaderBase
from source_support.registry import BuildContext

SCHEMA = pa.schema([pa.field("value", pa.int64())])


class NumberRangeReader(SequentialSplitReader[NumberRangeSplit]):
    def read_batch(self, split: NumberRangeSplit, max_records: int) -> RecordBatch:
        end = min(split.end, split.position + max_records)
        values = pa.array(range(split.position, end), type=pa.int64())
        return RecordBatch(
            split_id=split.split_id,
            start=split.offset,
            end=OffsetEntry(split.split_id, end),
            records=pa.table([values], schema=SCHEMA),
            finished=end >= split.end,
        )


class NumberSequenceSource(Source[NumberRangeSplit]):
    def __init__(self, *, count: int, splits: int, batch_size: int) -> None:
        self.count, self.splits, self.batch_size = count, splits, batch_size

    @classmethod
    def from_config(
        cls, config: SequenceSourceConfig, fmt: FormatSpec, context: BuildContext
    ) -> NumberSequenceSource:
        return cls(count=config.count, splits=config.splits, batch_size=context.batch_size)

    @property
    def boundedness(self) -> Boundedness:
        return Boundedness.BOUNDED

    @property
    def split_serializer(self) -> NumberRangeSerializer:
        return NumberRangeSerializer()

    def create_enumerator(
        self, context: SplitEnumeratorContext[NumberRangeSplit]
    ) -> NumberSequenceEnumerator:
        return NumberSequenceEnumerator(context, count=self.count, splits=self.splits, state=None)

    def restore_enumerator(
        self, context: SplitEnumeratorContext[NumberRangeSplit], state: dict[str, Any]
    ) -> NumberSequenceEnumerator:
        return NumberSequenceEnumerator(context, count=self.count, splits=self.splits, state=state)

    def create_reader(self, context: SourceReaderContext) -> SourceReaderBase[NumberRangeSplit]:
        return SourceReaderBase(context, NumberRangeReader(), batch_size=self.batch_size)

    def infer_schema(self) -> pa.Schema:
        return SCHEMA
