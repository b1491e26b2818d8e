"""Record formats: bytes of whole lines in, an Arrow table and the bad records out.

Parsing is done by Arrow's C++ parsers on a whole block at once. Only when a block holds a
bad record does it fall back to bisecting the block, so a bad line costs O(log n) parses and
its exact position is known.
"""

from __future__ import annotations

import io
import re
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.json as pa_json

from source_support.api import BadRecord
from source_support.errors import ConfigError
from source_support.schema import parse_ddl, widen

NEWLINE = 10


class RecordFormat(ABC):
    """Parses blocks of complete lines into records of one fixed schema."""

    type_name: str = ""
    has_header: bool = False
    #: Can a line break inside a record? Then files are not cut into byte ranges.
    multiline: bool = False

    def __init__(self, schema: pa.Schema | None) -> None:
        self.schema = schema

    def with_schema(self, schema: pa.Schema) -> RecordFormat:
        clone = object.__new__(type(self))
        clone.__dict__.update(self.__dict__)
        clone.schema = schema
        return clone

    @abstractmethod
    def infer_schema(self, sample: bytes) -> pa.Schema:
        """The schema of a sample that begins at the start of a file."""

    @abstractmethod
    def _parse(self, block: bytes) -> pa.Table:
        """Parses a block, raising ``pa.ArrowInvalid`` if any record in it is bad."""

    def record_ends(self, buffer: bytes) -> np.ndarray:
        """Offsets just past each record-ending newline in ``buffer``."""
        data = np.frombuffer(buffer, dtype=np.uint8)
        return np.flatnonzero(data == NEWLINE) + 1

    def parse(self, block: bytes, position: int) -> tuple[pa.Table, list[BadRecord]]:
        """All good records of ``block`` (which starts at ``position``) and the bad ones."""
        if not block.strip():
            return self.empty(), []
        try:
            return self._parse(block), []
        except (pa.ArrowInvalid, pa.ArrowTypeError, UnicodeDecodeError):
            pass
        starts = np.concatenate(([0], self.record_ends(block)))
        if starts[-1] != len(block):
            starts = np.append(starts, len(block))
        good: list[pa.Table] = []
        bad: list[BadRecord] = []
        self._bisect(block, starts, 0, len(starts) - 1, position, good, bad)
        table = pa.concat_tables(good) if good else self.empty()
        return table, bad

    def _bisect(self, block, starts, lo, hi, position, good, bad) -> None:
        # Records lo..hi-1 span block[starts[lo]:starts[hi]].
        chunk = block[starts[lo] : starts[hi]]
        if not chunk.strip():
            return
        try:
            good.append(self._parse(chunk))
            return
        except (pa.ArrowInvalid, pa.ArrowTypeError, UnicodeDecodeError) as exc:
            if hi - lo == 1:
                raw = chunk.decode("utf-8", errors="replace").rstrip("\r\n")
                bad.append(BadRecord(position + int(starts[lo]), raw, _reason(exc)))
                return
        mid = (lo + hi) // 2
        self._bisect(block, starts, lo, mid, position, good, bad)
        self._bisect(block, starts, mid, hi, position, good, bad)

    def empty(self) -> pa.Table:
        return self.schema.empty_table()

    @property
    def parse_schema(self) -> pa.Schema:
        """The schema to parse with: zoned timestamps parse naive, then count as UTC."""
        return pa.schema(
            [
                pa.field(f.name, pa.timestamp(f.type.unit))
                if pa.types.is_timestamp(f.type) and f.type.tz
                else f
                for f in self.schema
            ]
        )


class CsvFormat(RecordFormat):
    type_name = "csv"

    def __init__(
        self,
        *,
        schema: pa.Schema | None = None,
        header: bool = True,
        delimiter: str = ",",
        quote: str = '"',
        multiline: bool = False,
        column_names: list[str] | None = None,
    ) -> None:
        super().__init__(schema)
        self.has_header = header
        self.delimiter = delimiter
        self.quote = quote
        self.multiline = multiline
        self.column_names = column_names

    def _parse_options(self, invalid_row_handler=None) -> pa_csv.ParseOptions:
        return pa_csv.ParseOptions(
            delimiter=self.delimiter,
            quote_char=self.quote or False,
            newlines_in_values=self.multiline,
            invalid_row_handler=invalid_row_handler,
        )

    def infer_schema(self, sample: bytes) -> pa.Schema:
        cut = self.record_ends(sample)
        if len(cut):
            sample = sample[: cut[-1]]
        read = pa_csv.ReadOptions(autogenerate_column_names=not self.has_header, use_threads=False)
        table = pa_csv.read_csv(io.BytesIO(sample), read_options=read, parse_options=self._parse_options())
        names = table.column_names
        if not self.has_header:
            names = [f"_c{i}" for i in range(len(names))]
        return widen(pa.schema([pa.field(n, f.type) for n, f in zip(names, table.schema, strict=False)]))

    def _parse(self, block: bytes) -> pa.Table:
        bad_shape: list[str] = []

        def on_invalid_row(row) -> str:
            bad_shape.append(row.text)
            return "skip"

        names = self.schema.names
        table = pa_csv.read_csv(
            io.BytesIO(block),
            read_options=pa_csv.ReadOptions(column_names=names, use_threads=False),
            parse_options=self._parse_options(on_invalid_row),
            convert_options=pa_csv.ConvertOptions(
                column_types=self.parse_schema,
                include_columns=names,
                quoted_strings_can_be_null=False,
            ),
        )
        if bad_shape:
            raise pa.ArrowInvalid(
                f"expected {len(names)} columns, got a row that does not fit: {bad_shape[0]!r}"
            )
        return table.cast(self.schema)

    def record_ends(self, buffer: bytes) -> np.ndarray:
        ends = super().record_ends(buffer)
        if not self.multiline or not self.quote:
            return ends
        # A newline ends a record only outside quotes: after an even number of quote chars.
        data = np.frombuffer(buffer, dtype=np.uint8)
        quotes_before = np.cumsum(data == ord(self.quote))
        return ends[quotes_before[ends - 1] % 2 == 0]


class JsonLinesFormat(RecordFormat):
    type_name = "jsonl"

    def infer_schema(self, sample: bytes) -> pa.Schema:
        cut = self.record_ends(sample)
        if len(cut):
            sample = sample[: cut[-1]]
        table = pa_json.read_json(io.BytesIO(sample), read_options=pa_json.ReadOptions(use_threads=False))
        return widen(table.schema)

    def _parse(self, block: bytes) -> pa.Table:
        table = pa_json.read_json(
            io.BytesIO(block),
            read_options=pa_json.ReadOptions(use_threads=False),
            parse_options=pa_json.ParseOptions(
                explicit_schema=self.parse_schema, unexpected_field_behavior="ignore"
            ),
        )
        return table.select(self.schema.names).cast(self.schema)


@dataclass(frozen=True)
class FormatSpec:
    """A validated ``[format]`` table."""

    type: str
    options: dict[str, Any]

    def build(self, schema: pa.Schema | None = None) -> RecordFormat:
        opts = dict(self.options)
        ddl = opts.pop("schema", None)
        schema = schema or (parse_ddl(ddl) if ddl else None)
        if self.type == "csv":
            return CsvFormat(schema=schema, **opts)
        return JsonLinesFormat(schema)


_FORMAT_OPTIONS = {
    "csv": {
        "schema": str,
        "header": bool,
        "delimiter": str,
        "quote": str,
        "multiline": bool,
    },
    "jsonl": {"schema": str},
}
FORMAT_ALIASES = {"json": "jsonl", "jsonl": "jsonl", "ndjson": "jsonl", "csv": "csv"}


def validate_format(table: dict[str, Any]) -> FormatSpec:
    """Checks a ``[format]`` table; every error names its field."""
    table = dict(table)
    type_name = table.pop("type", None)
    if not type_name:
        raise ConfigError("format.type", "is required (one of: csv, jsonl)")
    kind = FORMAT_ALIASES.get(str(type_name).lower())
    if kind is None:
        raise ConfigError("format.type", f"unknown format {type_name!r} (one of: csv, jsonl)")
    allowed = _FORMAT_OPTIONS[kind]
    for name, value in table.items():
        if name not in allowed:
            raise ConfigError(f"format.{name}", f"is not an option of {kind} ({', '.join(allowed)})")
        if not isinstance(value, allowed[name]):
            raise ConfigError(f"format.{name}", f"must be a {allowed[name].__name__}")
    for name in ("delimiter", "quote"):
        if name in table and len(table[name]) != 1:
            raise ConfigError(f"format.{name}", "must be a single character")
    if "schema" in table:
        parse_ddl(table["schema"])
    return FormatSpec(kind, table)


def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    # Arrow counts rows within the piece it was given, which means nothing to a user.
    return re.sub(r"\s*(Row #\d+:|in row \d+)", "", text.removeprefix("Invalid: ")).strip()
