"""``raw``: each record is one binary value in the column ``data``, as it came (a message
body; for files, a line without its line break). Nothing in it can be bad."""

from __future__ import annotations

import pyarrow as pa

from source_support.api import BadRecord
from source_support.formats.record import RecordFormat

RAW_SCHEMA = pa.schema([pa.field("data", pa.binary())])


class RawFormat(RecordFormat):
    """The records as bytes, in one column ``data`` (``BINARY``)."""

    type_name = "raw"

    def __init__(self) -> None:
        super().__init__(RAW_SCHEMA)

    def infer_schema(self, sample: bytes) -> pa.Schema:
        return RAW_SCHEMA

    def _parse(self, block: bytes) -> pa.Table:
        lines = block.split(b"\n")
        if lines and not lines[-1]:
            lines.pop()
        return self.values(lines)

    def _locate(self, block: bytes, position: int, first_only: bool) -> tuple[pa.Table, list[BadRecord]]:
        return self._parse(block), []

    def values(self, values: list[bytes]) -> pa.Table:
        """The table of ``values`` as they are, one record each."""
        return pa.table({"data": pa.array(values, pa.binary())})
