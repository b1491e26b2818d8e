"""The lines source and its split reader: each line of a file is a record ``line``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa

from tests.connectors.lines.connector.config import LinesSourceConfig
from tests.connectors.lines.connector.enumerator import LineFileEnumerator
from tests.connectors.lines.connector.split import LineFileSerializer, LineFileSplit
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

SCHEMA = pa.schema([pa.field("line", pa.string())])


class LineFileReader(SequentialSplitReader[LineFileSplit]):
    """Reads a file's lines from the split's byte position, never past the size it had
    when it was found, so reading the same positions again gives the same records."""

    def read_batch(self, split: LineFileSplit, max_records: int) -> RecordBatch:
        lines: list[str] = []
        with open(split.path, "rb") as f:
            f.seek(split.position)
            while len(lines) < max_records and f.tell() < split.size:
                lines.append(f.readline().decode("utf-8").rstrip("\r\n"))
            end = f.tell()
        return RecordBatch(
            split_id=split.split_id,
            start=split.offset,
            end=OffsetEntry(split.split_id, end),
            records=pa.table({"line": pa.array(lines, pa.string())}, schema=SCHEMA),
            finished=end >= split.size,
        )

    def describe(self, split: LineFileSplit, position: int, *, line: int | None = None) -> str:
        return f"{split.path} byte {position}"


class LinesSource(Source[LineFileSplit]):
    def __init__(self, *, directory: Path, batch_size: int) -> None:
        self.directory, self.batch_size = directory, batch_size

    @classmethod
    def from_config(cls, config: LinesSourceConfig, fmt: FormatSpec, context: BuildContext) -> LinesSource:
        return cls(directory=Path(config.path), batch_size=context.batch_size)

    @property
    def boundedness(self) -> Boundedness:
        return Boundedness.BOUNDED

    @property
    def split_serializer(self) -> LineFileSerializer:
        return LineFileSerializer()

    def create_enumerator(self, context: SplitEnumeratorContext[LineFileSplit]) -> LineFileEnumerator:
        return LineFileEnumerator(context, directory=self.directory, state=None)

    def restore_enumerator(
        self, context: SplitEnumeratorContext[LineFileSplit], state: dict[str, Any]
    ) -> LineFileEnumerator:
        return LineFileEnumerator(context, directory=self.directory, state=state)

    def create_reader(self, context: SourceReaderContext) -> SourceReaderBase[LineFileSplit]:
        return SourceReaderBase(context, LineFileReader(), batch_size=self.batch_size)

    def infer_schema(self) -> pa.Schema:
        return SCHEMA
