"""CSV: delimited text, one record per line (or, with ``multiline``, quoted values that
hold newlines), optionally after a header line that names the columns."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any, Literal, Self

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv

from source_support.api import BadRecord
from source_support.formats.drift import RETYPED, header_changes
from source_support.formats.record import (
    ARROW_BLOCK_BYTES,
    ReadError,
    RecordFormat,
    raw_text,
    record_spans,
)
from source_support.formats.typed_arrow import Offsets, arrow_input, nulls
from source_support.formats.values import (
    ARROW_ERRORS,
    ValueRules,
    convert_text,
    inferred_text_type,
    shown_value,
)
from source_support.schema import spark_type, widen

#: The pieces Arrow's threads parse a block in (smaller pieces also parse faster: they
#: stay in the CPU's caches; the S3 benchmark read 10% faster with 4 MiB than whole blocks).
THREADED_BLOCK_BYTES = 4 << 20
#: What Arrow's CSV reader does with a row of the wrong number of columns.
RowHandler = Callable[[pa_csv.InvalidRow], Literal["skip", "error"]]


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
        rules: ValueRules | None = None,
    ) -> None:
        super().__init__(schema, rules=rules)
        self.has_header = header
        self.delimiter = delimiter
        self.quote = quote
        self.multiline = multiline
        #: The columns of the file in its order (its header, mapped to the schema's names);
        #: None reads the schema's columns by position.
        self.column_names = column_names

    def _parse_options(self, invalid_row_handler: RowHandler | None = None) -> pa_csv.ParseOptions:
        return pa_csv.ParseOptions(
            delimiter=self.delimiter,
            quote_char=self.quote or False,
            newlines_in_values=self.multiline,
            invalid_row_handler=invalid_row_handler,
        )

    def _read_options(self, block: bytes, *, threaded: bool = False, **options: Any) -> pa_csv.ReadOptions:
        """Arrow's options for reading ``block``: as one piece (a record never straddles
        two), or, ``threaded``, in pieces of ``THREADED_BLOCK_BYTES`` parsed by Arrow's
        threads (a record longer than that makes Arrow refuse the block: "straddles")."""
        if threaded:
            return pa_csv.ReadOptions(use_threads=True, block_size=THREADED_BLOCK_BYTES, **options)
        block_size = max(ARROW_BLOCK_BYTES, len(block) + 1)
        return pa_csv.ReadOptions(use_threads=False, block_size=block_size, **options)

    def header_names(self, header_line: bytes) -> list[str]:
        """The column names of a header line, as the CSV options read it."""
        line = header_line.rstrip(b"\r\n") + b"\n"
        table = pa_csv.read_csv(
            arrow_input(line),
            read_options=self._read_options(line),
            parse_options=self._parse_options(),
        )
        return table.column_names

    def bind_header(self, header_line: bytes) -> Self:
        """A copy that finds each schema column by its name in a file's header line (names
        match without regard to case, as in Spark). Raises ``MissingColumns`` when the
        header lacks some of the schema's columns."""
        names = self.header_names(header_line)
        columns = self.known_schema.names
        wanted = {n.lower(): n for n in columns}
        mapped = [wanted.get(n.lower(), n) for n in names]
        found = [n for n in mapped if n in columns]
        missing = [n for n in columns if n not in found]
        repeated = sorted({n for n in mapped if mapped.count(n) > 1})
        if repeated or (missing and self.on_schema_change is None):
            raise MissingColumns(missing, repeated, names)
        header_changes(self.known_schema, mapped, self.on_schema_change)  # raises under fail
        clone = copy.copy(self)
        clone.column_names = mapped
        clone.missing_columns = tuple(missing)
        return clone

    def _extras(self) -> list[str]:
        """The file's columns the schema lacks, read (as text) where a policy looks at them."""
        if self.on_schema_change is None or self.column_names is None:
            return []
        return [n for n in self.column_names if n not in self.known_schema.names]

    def infer_schema(self, sample: bytes) -> pa.Schema:
        cut = self.record_ends(sample)
        if len(cut):
            sample = sample[: cut[-1]]
        read = self._read_options(sample, autogenerate_column_names=not self.has_header)
        convert = pa_csv.ConvertOptions(
            null_values=list(self.rules.null_values),
            strings_can_be_null=True,
            quoted_strings_can_be_null=True,
        )
        table = pa_csv.read_csv(
            arrow_input(sample),
            read_options=read,
            parse_options=self._parse_options(),
            convert_options=convert,
        )
        names = table.column_names
        if not self.has_header:
            names = [f"_c{i}" for i in range(len(names))]
        fields = [
            pa.field(name, inferred_text_type(column, self.rules))
            for name, column in zip(names, table.columns, strict=True)
        ]
        return widen(pa.schema(fields))

    def _names(self) -> list[str]:
        return self.column_names or self.known_schema.names

    def _parse(self, block: bytes) -> pa.Table:
        bad_shape: list[str] = []

        def on_invalid_row(row: pa_csv.InvalidRow) -> Literal["skip"]:
            bad_shape.append(row.text)
            return "skip"

        table = pa_csv.read_csv(
            arrow_input(block),
            # In pieces, by Arrow's threads: a block with a record too long for a piece
            # is refused, then found good by _locate (which reads it whole).
            read_options=self._read_options(block, threaded=True, column_names=self._names()),
            parse_options=self._parse_options(on_invalid_row),
            convert_options=pa_csv.ConvertOptions(
                column_types={**{n: pa.string() for n in self._extras()}, **_types(self.parse_schema)},
                include_columns=self.known_schema.names + self._extras(),
                include_missing_columns=bool(self.missing_columns),
                null_values=list(self.rules.null_values),
                strings_can_be_null=True,  # one rule for every type (ValueRules)
                quoted_strings_can_be_null=True,
            ),
        )
        if bad_shape:
            raise pa.ArrowInvalid(f"a row does not have {len(self._names())} columns: {bad_shape[0]!r}")
        return self._finish(table)

    def _locate(self, block: bytes, position: int, first_only: bool) -> tuple[pa.Table, list[BadRecord]]:
        names, schema, extras = self._names(), self.known_schema, self._extras()
        # A value that does not convert is rescued or dropped, not a bad record, under these.
        tolerant = self.on_schema_change in ("rescue", "ignore")
        retyped: dict[str, pa.Array[Any]] = {}
        # (row number, if Arrow knows it; columns found) of each row of a wrong shape
        bad_shape: list[tuple[int | None, int]] = []

        def on_invalid_row(row: pa_csv.InvalidRow) -> Literal["skip"]:
            bad_shape.append((row.number, row.actual_columns))
            return "skip"

        try:
            text = pa_csv.read_csv(
                arrow_input(block),
                read_options=self._read_options(block, column_names=names),
                parse_options=self._parse_options(on_invalid_row),
                convert_options=pa_csv.ConvertOptions(
                    column_types={n: pa.binary() for n in schema.names + extras},  # bad UTF-8 too
                    include_columns=schema.names + extras,
                    include_missing_columns=bool(self.missing_columns),
                    strings_can_be_null=False,
                    quoted_strings_can_be_null=False,
                ),
            )
        except ARROW_ERRORS:
            return self._bisect_all(block, position, first_only)
        starts, ends = record_spans(block, self.record_ends(block))
        numbers = [n for n, _ in bad_shape]
        if len(starts) != text.num_rows + len(bad_shape) or None in numbers:
            return self._bisect_all(block, position, first_only)  # Arrow counted rows otherwise
        shape_rows = np.array([n - 1 for n in numbers if n is not None], dtype=np.int64)
        row_record = np.delete(np.arange(len(starts)), shape_rows)
        # The first failing column of each parsed row, in the file's column order.
        first_column = np.full(text.num_rows, -1, dtype=np.int64)
        values: dict[str, pa.Array[Any]] = {}
        types = dict(zip(schema.names, schema.types, strict=True))
        for name in self.missing_columns:
            values[name] = nulls(text.num_rows, types[name])
        for index, name in sorted((names.index(n), n) for n in schema.names if n not in self.missing_columns):
            texts = text.column(name).combine_chunks()
            values[name], failed = convert_text(texts, types[name], rules=self.rules)
            if tolerant:
                if failed.any():
                    retyped[RETYPED + name] = pc.if_else(pa.array(failed), texts.cast(pa.string()), None)
                failed = np.zeros(len(failed), dtype=bool)
            first_column[failed & (first_column < 0)] = index
            if pa.types.is_timestamp(types[name]):
                self._learn_timestamp_modes({name: pc.drop_null(texts.filter(~failed))})
        failed_rows = np.flatnonzero(first_column >= 0)
        # record index -> (why), for bad shapes and failed conversions
        bad_at = {int(r): ("shape", actual) for r, (_, actual) in zip(shape_rows, bad_shape, strict=True)}
        bad_at.update({int(row_record[r]): ("value", int(r)) for r in failed_rows})
        chosen = sorted(bad_at)[:1] if first_only else sorted(bad_at)
        failing = [bad_at[r][1] for r in chosen if bad_at[r][0] == "value"]
        texts_of: dict[str, dict[int, bytes | None]] = {
            n: dict(zip(failing, text.column(n).take(failing).to_pylist(), strict=True))
            for n in {names[int(first_column[r])] for r in failing}
        }
        bad: list[BadRecord] = []
        for record in chosen:
            kind, detail = bad_at[record]
            raw = raw_text(block[starts[record] : ends[record]])
            if kind == "shape":
                reason = f"expected {len(names)} columns, found {detail}"
            else:
                column = int(first_column[detail])
                name = names[column]
                reason = (
                    f"column {column + 1} {name!r}: invalid value {shown_value(texts_of[name][detail])} "
                    f"for {spark_type(types[name])}"
                )
            bad.append(BadRecord(position + int(starts[record]), raw, reason))
        if first_only and bad:
            return self.empty(), bad
        keep = first_column < 0
        table = pa.table({n: values[n].filter(keep) for n in schema.names}).cast(schema)
        for name in extras:
            texts, _ = convert_text(text.column(name).combine_chunks(), pa.string(), rules=self.rules)
            table = table.append_column(name, texts.filter(keep))
        for name, texts in retyped.items():
            table = table.append_column(name, texts.filter(keep))
        return table, bad

    @property
    def ends_at_every_newline(self) -> bool:
        return not (self.multiline and self.quote)

    def record_ends(self, buffer: bytes) -> Offsets:
        ends = super().record_ends(buffer)
        if not self.multiline or not self.quote:
            return ends
        # A newline ends a record only outside quotes: after an even number of quote chars.
        data = np.frombuffer(buffer, dtype=np.uint8)
        quotes_before = np.cumsum(data == ord(self.quote))
        return ends[quotes_before[ends - 1] % 2 == 0]


def _types(schema: pa.Schema) -> dict[str, pa.DataType]:
    return dict(zip(schema.names, schema.types, strict=True))


class MissingColumns(ReadError):
    """A file's header lacks columns of the schema (or names one twice)."""

    def __init__(self, missing: list[str], repeated: list[str], header: list[str]) -> None:
        parts: list[str] = []
        if missing:
            parts.append(f"its header lacks the column{'s' * (len(missing) > 1)} {', '.join(missing)}")
        if repeated:
            parts.append(f"its header names {', '.join(repeated)} more than once")
        super().__init__(f"{' and '.join(parts)} (header: {', '.join(header)})")
        self.missing = missing
