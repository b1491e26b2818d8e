"""Stream entries (as XREAD returns them: ``[id, [field, value, ...]]``) into Arrow records.

Two ways to read an entry: ``fields`` (its field/value pairs are the record's columns),
or the value of one field (``format.field``) as a message body: a record of a line format
(JSON lines, CSV), raw bytes, or one Avro message (``source_support.formats.messages``).
Whole columns are built at once and converted by Arrow: a batch of entries costs a few
list slices in Python, not a conversion per value.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from itertools import chain
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from source_support.api import SchemaChange
from source_support.errors import ConfigError
from source_support.formats import AvroFormat, FieldsFormat, RecordFormat
from source_support.formats.messages import AvroMessages, LineMessages, message_decoder

#: An entry as XREAD returns it: (id, [field, value, field, value, ...]).
Entry = Sequence[Any]
#: An XREAD reply as Redis sends it: (key, [entry, ...]) for each stream that gave entries.
XreadReply = Sequence[Sequence[Any]]
DEFAULT_RECORD_FIELD = "data"


def entry_json(entry: Entry) -> str:
    """An entry as JSON (``{"field": "value", ...}``), for a dead letter."""
    pairs = entry[1]
    return json.dumps(
        {_text(pairs[i]): _text(pairs[i + 1]) for i in range(0, len(pairs) - 1, 2)}, ensure_ascii=False
    )


def _text(value: bytes | str) -> str:
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else str(value)


def field_columns(entries: Sequence[Entry], names: Sequence[str]) -> dict[str, pa.Array[Any]]:
    """The values of each field in ``names`` over ``entries`` (null where an entry lacks
    it). Entries that all carry the same fields in the same order (what one producer
    writes) are sliced column by column; others go through a dict each."""
    if not entries:
        return {name: pa.array([], pa.binary()) for name in names}
    first = entries[0][1]
    layout = first[0::2]
    if len(set(layout)) == len(layout) and all(e[1][0::2] == layout for e in entries):
        stride = len(first)
        flat = list(chain.from_iterable(e[1] for e in entries))
        index = {_text(name): i for i, name in enumerate(layout)}
        return {
            name: pa.array(flat[2 * index[name] + 1 :: stride], pa.binary())
            if name in index
            else pa.nulls(len(entries), pa.binary())
            for name in names
        }
    maps = [_as_map(e[1]) for e in entries]
    wanted = {name: name.encode() for name in names}
    return {name: pa.array([m.get(key) for m in maps], pa.binary()) for name, key in wanted.items()}


def field_names(entries: Sequence[Entry]) -> list[str]:
    """Every field name in ``entries``, in the order first seen."""
    seen: dict[str, None] = {}
    for entry in entries:
        for name in entry[1][0::2]:
            seen.setdefault(_text(name), None)
    return list(seen)


def _as_map(pairs: Sequence[bytes]) -> dict[bytes, bytes]:
    return dict(zip(pairs[0::2], pairs[1::2], strict=False))


class FieldsDecoder:
    """Entries whose field/value pairs are the record (``[format] type = "fields"``)."""

    def __init__(self, fmt: FieldsFormat) -> None:
        self.fmt = fmt
        #: The schema changes the last ``decode`` saw, each at the index of its entry.
        self.drift_seen: list[SchemaChange] = []

    def empty(self) -> pa.Table:
        return self.fmt.empty()

    def decode(self, entries: Sequence[Entry], *, first_only: bool) -> tuple[pa.Table, dict[int, str]]:
        """The records of ``entries`` with the bad ones left out, and why each bad entry
        (by index) is bad; with ``first_only``, only the first bad one and no records."""
        schema = self.fmt.schema
        if schema is None:
            raise ConfigError("format.schema", "is needed to read (none was given or inferred)")
        names = list(schema.names)
        if self.fmt.on_schema_change is not None:  # the fields the schema lacks are looked at too
            names += [n for n in field_names(entries) if n not in schema.names]
        texts = field_columns(entries, names)
        table, bad = self.fmt.convert(texts, len(entries))
        self.drift_seen = self.fmt.drift_seen
        return _without(table, bad, len(entries), first_only)


class RecordFieldDecoder:
    """Entries whose field ``format.field`` holds a record in a line format (JSON, CSV) or
    one Avro message: the values are decoded as message bodies
    (``source_support.formats.messages``)."""

    def __init__(self, fmt: RecordFormat | AvroFormat) -> None:
        self.fmt = fmt
        self.field = fmt.record_field or DEFAULT_RECORD_FIELD
        self.bodies = message_decoder(
            fmt, what=f"field {self.field!r}", missing=f"the entry has no field {self.field!r}"
        )

    def empty(self) -> pa.Table:
        return self.fmt.empty()

    def values(self, entries: Sequence[Entry]) -> pa.Array[Any]:
        return field_columns(entries, [self.field])[self.field]

    def decode(self, entries: Sequence[Entry], *, first_only: bool) -> tuple[pa.Table, dict[int, str]]:
        return self.bodies.decode(self.values(entries).to_pylist(), first_only=first_only)

    @property
    def drift_seen(self) -> list[SchemaChange]:
        """The schema changes the last ``decode`` saw, each at the index of its entry."""
        return self.bodies.drift_seen if isinstance(self.bodies, LineMessages | AvroMessages) else []


#: What turns a batch of entries into records, by the format read.
EntryDecoder = FieldsDecoder | RecordFieldDecoder


def entry_decoder(fmt: FieldsFormat | RecordFormat | AvroFormat) -> EntryDecoder:
    """The decoder of entries in ``fmt``."""
    if isinstance(fmt, FieldsFormat):
        return FieldsDecoder(fmt)
    return RecordFieldDecoder(fmt)


def _without(
    table: pa.Table, bad: dict[int, str], count: int, first_only: bool
) -> tuple[pa.Table, dict[int, str]]:
    if not bad:
        return table, bad
    if first_only:
        return table.schema.empty_table(), dict([min(bad.items())])
    keep = np.ones(count, dtype=bool)
    keep[list(bad)] = False
    return table.filter(pa.array(keep)), bad


def good_indices(count: int, bad: dict[int, str]) -> npt.NDArray[np.intp]:
    """The indices of the entries that became records, in order."""
    keep = np.ones(count, dtype=bool)
    if bad:
        keep[list(bad)] = False
    return np.flatnonzero(keep)
