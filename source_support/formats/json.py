"""JSON: one object per line (JSON lines), or a file of an array of objects or of JSON
documents that span lines, chosen by the file's first character that is not white space."""

from __future__ import annotations

import bisect
import json
import re

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json

from source_support.api import BadRecord
from source_support.formats.drift import as_text
from source_support.formats.json_values import JsonValue, check_record, null_texts
from source_support.formats.record import (
    ARROW_BLOCK_BYTES,
    RecordFormat,
    arrow_reason,
    raw_text,
    record_spans,
)
from source_support.formats.typed_arrow import Offsets, arrow_input, fields_of
from source_support.formats.values import (
    ARROW_ERRORS,
    ValueRules,
    convert_text,
    inferred_text_type,
)
from source_support.schema import spark_type, widen


class JsonLinesFormat(RecordFormat):
    """One JSON object per line. A string in a column that is not STRING is null when it is
    one of ``null_values`` (JSON's own null is null too); a STRING column keeps its strings,
    since JSON can say null. DATE columns read ISO-8601 dates (or ``date_format``)."""

    type_name = "jsonl"
    dates_as_text = True
    chooses_by_head = True

    def for_file(self, head: bytes) -> RecordFormat:
        layout = json_layout(head)
        if layout == "lines":
            return self
        fmt = JsonDocumentsFormat(self.schema, rules=self.rules, array=layout == "array")
        vars(fmt).update({k: v for k, v in vars(self).items() if k != "array"})
        return fmt

    def infer_schema(self, sample: bytes) -> pa.Schema:
        cut = self.record_ends(sample)
        if len(cut):
            sample = sample[: cut[-1]]
        read = pa_json.ReadOptions(use_threads=False, block_size=max(ARROW_BLOCK_BYTES, len(sample) + 1))
        try:
            table = pa_json.read_json(arrow_input(sample), read_options=read)
            # Arrow's JSON reader takes "1970-01-01" for a TIMESTAMP, its CSV reader for a
            # DATE: such columns are read again as text and typed as the CSV format types
            # them (inferred_text_type), so the same text has the same type in each format.
            temporal = [f for f in fields_of(table.schema) if pa.types.is_timestamp(f.type)]
            if temporal:
                as_text = pa.schema([pa.field(f.name, pa.string()) for f in temporal])
                table = pa_json.read_json(
                    arrow_input(sample),
                    read_options=read,
                    parse_options=pa_json.ParseOptions(explicit_schema=as_text),
                ).select(table.column_names)  # explicit columns come first: the file's order
        except ARROW_ERRORS as exc:
            raise ValueError(_json_sample_error(sample, exc)) from None
        fields = [
            pa.field(f.name, inferred_text_type(table.column(f.name), self.rules))
            for f in fields_of(table.schema)
        ]
        return widen(pa.schema(fields))

    def _parse(self, block: bytes) -> pa.Table:
        schema = self.known_schema
        if _has_map(schema):
            return self._parse_python(block)
        table = pa_json.read_json(
            arrow_input(block),
            read_options=pa_json.ReadOptions(
                use_threads=False, block_size=max(ARROW_BLOCK_BYTES, len(block) + 1)
            ),
            parse_options=pa_json.ParseOptions(
                explicit_schema=self.parse_schema,
                # other fields are read only where a drift policy looks at them
                unexpected_field_behavior="ignore" if self.on_schema_change is None else "infer",
            ),
        )
        for i, name in enumerate(table.column_names):
            if name not in schema.names:  # as text: blocks that infer other types still concatenate
                table = table.set_column(i, name, as_text(table.column(name)))
        return self._finish(table)

    def _parse_python(self, block: bytes) -> pa.Table:
        """Arrow's JSON reader has no MAP type: a schema with one is read with ``json``."""
        try:
            rows = [json.loads(line) for line in block.splitlines() if line.strip()]
        except (ValueError, RecursionError) as exc:
            raise pa.ArrowInvalid(f"not valid JSON: {exc}") from None
        for row in rows:
            if not isinstance(row, dict):
                raise pa.ArrowInvalid("a JSON line is not an object")
        return self._finish(pa.Table.from_pylist(rows, schema=self.parse_schema))

    def _locate(self, block: bytes, position: int, first_only: bool) -> tuple[pa.Table, list[BadRecord]]:
        starts, ends = record_spans(block, self.record_ends(block))
        schema = self.known_schema
        temporal = [f for f in fields_of(schema) if pa.types.is_timestamp(f.type) or pa.types.is_date(f.type)]
        null_values = frozenset(self.rules.null_values)
        good: list[int] = []
        #: good records some of whose strings became nulls: the record as it is read then
        rewritten: dict[int, JsonValue] = {}
        stamps: dict[str, list[JsonValue]] = {f.name: [] for f in temporal}
        bad: dict[int, str] = {}
        for record, (start, end) in enumerate(zip(starts, ends, strict=True)):
            line = block[start:end]
            if not line.strip():
                continue  # Arrow's reader skips lines of white space
            try:
                value: JsonValue = json.loads(line)
            except ValueError as exc:
                bad[record] = f"not valid JSON: {exc}"
            except RecursionError:
                bad[record] = "JSON nested too deeply to read (Python's parser has a depth limit)"
            else:
                nulled = null_texts(value, schema, null_values)
                if nulled is not value:
                    rewritten[record] = nulled
                reason = check_record(nulled, schema)
                if reason is not None:
                    bad[record] = reason
                elif isinstance(nulled, dict):  # what check_record passes is an object
                    good.append(record)
                    for f in temporal:
                        stamps[f.name].append(nulled.get(f.name))
            if first_only and bad:
                break
        if not (first_only and bad):
            keep = np.ones(len(good), dtype=bool)
            for f in temporal:
                texts = pa.array(stamps[f.name], pa.string())
                _, failed = convert_text(texts, f.type, rules=self.rules)
                for i in np.flatnonzero(failed & keep):
                    bad[good[i]] = (
                        f"field {f.name!r}: invalid value {stamps[f.name][i]!r} for {spark_type(f.type)}"
                    )
                keep &= ~failed
                if pa.types.is_timestamp(f.type):
                    self._learn_timestamp_modes({f.name: pc.drop_null(texts.filter(~failed))})
            good = [g for g, k in zip(good, keep, strict=True) if k]
        records = sorted(bad)[:1] if first_only else sorted(bad)
        found = [
            BadRecord(position + int(starts[r]), raw_text(block[starts[r] : ends[r]]), bad[r])
            for r in records
        ]
        if first_only and found:
            return self.empty(), found
        if not good:
            return self.empty(), found
        lines = b"".join(
            json.dumps(rewritten[r]).encode() + b"\n"
            if r in rewritten
            else block[starts[r] : ends[r]].rstrip(b"\r\n") + b"\n"
            for r in good
        )
        try:
            return self._parse(lines), found
        except ARROW_ERRORS:
            return self._bisect_all(block, position, first_only)  # the checks missed a case


#: How much of a file's start decides whether it holds JSON lines or JSON documents.
JSON_LAYOUT_SAMPLE = 1 << 20
_JSON_SPACE = " \t\r\n"
_DECODER = json.JSONDecoder()
_JSON_SPACES = re.compile(r"[ \t\r\n]*")


def json_layout(head: bytes) -> str:
    """How a JSON file that begins with ``head`` holds its records, by its first character
    that is not white space (as ``pandas.read_json`` and Spark's ``multiLine`` choose):
    ``array`` for ``[`` (an array of objects); ``lines`` for a first line that is a whole
    JSON value (JSON lines); else ``documents`` (JSON values that span lines, one or more)."""
    text = head.lstrip(_JSON_SPACE.encode() + b"\xef\xbb\xbf")
    if text.startswith(b"["):
        return "array"
    first, newline, _ = text.partition(b"\n")
    if not newline and len(head) < JSON_LAYOUT_SAMPLE:
        return "lines"  # one line, the whole file: a JSON line
    try:
        json.loads(first)
    except (ValueError, RecursionError):
        return "documents" if text.startswith(b"{") else "lines"
    return "lines"


class JsonDocumentsFormat(JsonLinesFormat):
    """JSON values that may span lines: the objects of a top-level array (``array``), or
    objects one after another (``documents``; one object per file is the common case).

    A file is one split (its records cannot be found from the middle), read block by block
    like JSON lines: memory is bounded by a block, and a record by ``MAX_RECORD_BYTES``.
    Each record keeps its place in the file: it is handed to the JSON lines parser as one
    line of the same length (JSON's newlines outside strings become spaces, the commas and
    brackets between records spaces too), so positions and lines in errors are the file's.
    A text that is not JSON ends what can be read of the file: the rest is one bad record.
    """

    multiline = True
    preamble_bytes = JSON_LAYOUT_SAMPLE

    def __init__(
        self, schema: pa.Schema | None, *, rules: ValueRules | None = None, array: bool = False
    ) -> None:
        super().__init__(schema, rules=rules)
        self.array = array
        #: The last buffer scanned and its spans (``value_spans``).
        self._scanned: tuple[bytes, list[int], list[int]] | None = None

    def preamble_length(self, head: bytes) -> int:
        """An array's records begin after its ``[`` (and white space, and a UTF-8 BOM)."""
        if not self.array:
            return 0
        return head.index(b"[") + 1

    def value_spans(self, buffer: bytes) -> tuple[list[int], list[int]]:
        """The ends of the JSON values that start ``buffer``'s records and the ends of those
        records (after the comma, or the array's ``]``, and white space), in bytes; a value
        not yet whole (or not JSON) ends the list.

        The reader asks about a buffer that grows, then about blocks cut from its start:
        the last answer is kept, so each record is scanned about once."""
        value_ends: list[int] = []
        record_ends: list[int] = []
        offset = 0
        scanned = self._scanned
        if scanned is not None:
            old, old_values, old_records = scanned
            if len(buffer) <= len(old) and old.startswith(buffer):
                count = bisect.bisect_right(old_records, len(buffer))
                return old_values[:count], old_records[:count]
            cut = len(old) - len(buffer)
            if 0 < cut < len(old) and cut in old_records and memoryview(old)[cut:] == memoryview(buffer):
                # what is left once a block was cut off: the same records, shifted
                first = bisect.bisect_right(old_records, cut)
                value_ends = [v - cut for v in old_values[first:]]
                record_ends = [r - cut for r in old_records[first:]]
                old, old_values, old_records = buffer, value_ends, record_ends
            if old_records and len(buffer) >= len(old) and buffer.startswith(old):
                value_ends, record_ends, offset = list(old_values), list(old_records), old_records[-1]
        self._scan(buffer, offset, value_ends, record_ends)
        self._scanned = (buffer, value_ends, record_ends)
        return value_ends, record_ends

    def _scan(self, buffer: bytes, offset: int, value_ends: list[int], record_ends: list[int]) -> None:
        text = buffer[offset:].decode("utf-8", errors="surrogateescape")
        ascii_only = len(text) == len(buffer) - offset
        at, byte_at, char_at = 0, offset, 0
        size = len(text)
        while True:
            at = _after_spaces(text, at)
            if at >= size or (self.array and text[at] == "]"):
                break
            try:
                _, value_end = _DECODER.raw_decode(text, at)
            except (ValueError, RecursionError):
                break  # not whole yet, or not JSON: the reader takes the rest as one record
            end = _after_spaces(text, value_end)
            if end >= size:
                break  # not known yet where the next record starts (the reader's last one)
            if self.array and text[end] == "]":
                end = size  # the rest is the array's end
            elif self.array and text[end] == ",":
                end = _after_spaces(text, end + 1)  # the next record starts at its value
            elif self.array:
                break  # not JSON: the rest is one bad record
            if ascii_only:
                value_ends.append(offset + value_end)
                record_ends.append(offset + end)
            else:
                value_byte = byte_at + len(text[char_at:value_end].encode("utf-8", "surrogateescape"))
                byte_at = value_byte + len(text[value_end:end].encode("utf-8", "surrogateescape"))
                char_at = end
                value_ends.append(value_byte)
                record_ends.append(byte_at)
            at = end

    def record_ends(self, buffer: bytes) -> Offsets:
        return np.array(self.value_spans(buffer)[1], dtype=np.int64)

    def as_lines(self, block: bytes) -> bytes:
        """``block`` as JSON lines of the same length: one line per record."""
        value_ends, record_ends = self.value_spans(block)
        pieces: list[bytes] = []
        start = 0
        for value_end, end in zip(value_ends, record_ends, strict=True):
            value = block[start:value_end].replace(b"\n", b" ").replace(b"\r", b" ")
            pieces.append(value + b" " * (end - value_end - 1) + b"\n")
            start = end
        if start < len(block):  # the last record, or what is not JSON
            rest = block[start:]
            tail = rest.rstrip(_JSON_SPACE.encode())
            if self.array and tail.endswith(b"]"):
                tail = tail[:-1]
            pieces.append(tail.replace(b"\n", b" ").replace(b"\r", b" ") + b"\n")
        return b"".join(pieces)

    def infer_schema(self, sample: bytes) -> pa.Schema:
        body = sample[self.preamble_length(sample) :]
        ends = self.record_ends(body)
        if not len(ends):
            raise ValueError("the first record is not whole in the first MiB, or is not JSON")
        return super().infer_schema(self.as_lines(body[: int(ends[-1])]))

    def parse(
        self, block: bytes, position: int, *, first_only: bool = False
    ) -> tuple[pa.Table, list[BadRecord]]:
        # The same format reading lines (its timestamp modes shared: learned once).
        lines = object.__new__(JsonLinesFormat)
        vars(lines).update(vars(self))
        parsed = lines.parse(self.as_lines(block), position, first_only=first_only)
        self.drift_seen = lines.drift_seen
        return parsed


def _after_spaces(text: str, at: int) -> int:
    """Where the white space that starts at ``at`` ends."""
    spaces = _JSON_SPACES.match(text, at)
    return spaces.end() if spaces else at


def _has_map(schema_or_type: pa.Schema | pa.DataType) -> bool:
    if isinstance(schema_or_type, pa.Schema):
        return any(_has_map(f.type) for f in fields_of(schema_or_type))
    t = schema_or_type
    if pa.types.is_map(t):
        return True
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return _has_map(t.value_type)
    if pa.types.is_struct(t):
        return any(_has_map(f.type) for f in fields_of(t))
    return False


def _json_sample_error(sample: bytes, exc: BaseException) -> str:
    """Arrow's error about a JSON sample, with the line it is about (Arrow counts rows from
    0 and skips blank lines; a line that is not JSON at all is found first)."""
    lines = sample.splitlines()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            json.loads(line)
        except (ValueError, RecursionError) as error:
            return f"line {number} is not valid JSON ({error}): {raw_text(line)[:200]!r}"
    match = re.search(r"\bin row (\d+)", str(exc))
    reason = arrow_reason(exc)
    if match:
        row = int(match.group(1))
        numbers = [n for n, line in enumerate(lines, start=1) if line.strip()]
        if row < len(numbers):
            return f"line {numbers[row]}: {reason}"
    return reason
