"""Records carried one per message (a NATS message body, the field of a stream entry that
holds a record): what a source that reads messages hands the format, and what it gets back.

A ``MessageDecoder`` turns a batch of message bodies into one Arrow table and says which
bodies were bad, by their index in the batch, so the source can name each bad one by its
own position (a stream sequence, an entry id). The line formats (JSON, CSV) parse the
bodies joined into one block; ``raw`` keeps them as bytes. A format whose messages are not
lines (single-object Avro) implements the same protocol.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any, Protocol, cast

import numpy as np
import pyarrow as pa

from source_support.api import BadRecord, SchemaChange
from source_support.formats.avro import AvroFormat
from source_support.formats.csv import CsvFormat
from source_support.formats.drift import SchemaDrift
from source_support.formats.raw import RawFormat
from source_support.formats.record import RecordFormat


class MessageDecoder(Protocol):
    """Decodes message bodies into records."""

    def decode(self, bodies: Sequence[bytes | None], *, first_only: bool) -> tuple[pa.Table, dict[int, str]]:
        """The records of ``bodies`` with the bad ones left out, and why each bad body (by
        index) is bad; with ``first_only``, only the first bad one and no records. A body
        of None is missing (the message has no record)."""
        ...

    def empty(self) -> pa.Table: ...

    @property
    def drift_seen(self) -> list[SchemaChange]:
        """The schema changes the last ``decode`` saw, each at the index of its body."""
        ...


class LineMessages:
    """Bodies that each hold one record of a line format (JSON, CSV), parsed at once as a
    block; a bad record's byte offset in the block says which body it was. ``what``
    names a body in the reasons ("the message body", "field 'data'")."""

    def __init__(self, fmt: RecordFormat, *, what: str, missing: str = "") -> None:
        self.fmt = fmt
        self.what = what
        self.missing = missing or f"{what} is missing"
        # A newline in JSON is only white space between tokens; in CSV it would cut a record.
        self.flatten_newlines = not isinstance(fmt, CsvFormat)
        #: The schema changes the last ``decode`` saw, each at the index of its body.
        self.drift_seen: list[SchemaChange] = []

    def empty(self) -> pa.Table:
        return self.fmt.empty()

    def decode(self, bodies: Sequence[bytes | None], *, first_only: bool) -> tuple[pa.Table, dict[int, str]]:
        self.drift_seen = []
        clean = self._decode_clean(bodies)
        if clean is not None:
            return clean, {}
        bad: dict[int, str] = {}
        lines: list[bytes] = []
        kept: list[int] = []
        for i, value in enumerate(bodies):
            if value is None:
                bad[i] = self.missing
                continue
            reason = self._unusable(value)
            if reason is not None:
                bad[i] = reason
                continue
            if self.flatten_newlines:
                value = value.replace(b"\r", b" ").replace(b"\n", b" ")
            lines.append(value)
            kept.append(i)
        if first_only and bad:
            return self.fmt.empty(), dict([min(bad.items())])
        table, parse_bad = self._parse(lines, kept, first_only)
        for offset, reason in parse_bad:
            bad[kept[offset]] = reason
        if first_only and bad:
            return self.fmt.empty(), dict([min(bad.items())])
        return table, bad

    def _decode_clean(self, bodies: Sequence[bytes | None]) -> pa.Table | None:
        """The records of ``bodies`` if each is one good record on one line (the usual
        batch), found without a step per body in Python; None if any may be bad, missing,
        empty or hold a line break (``decode`` then looks at each)."""
        if not bodies or not all(bodies):  # a None or an empty body
            return None
        values = cast(Sequence[bytes], bodies)
        if any(map(bytes.isspace, values)):
            return None
        block = b"\n".join(values) + b"\n"
        if block.count(b"\n") != len(values) or b"\r" in block:
            return None
        starts = np.cumsum([0] + [len(v) + 1 for v in values[:-1]])
        table, bad = self._parse_block(block, starts, list(range(len(values))), first_only=True)
        return table if not bad and table.num_rows == len(bodies) else None

    def _parse_block(
        self, block: bytes, starts: Any, kept: list[int], *, first_only: bool
    ) -> tuple[pa.Table, list[BadRecord]]:
        """Parses ``block`` of the bodies ``kept`` (starting at ``starts``); a schema change
        is said at the index of its body."""

        def body(position: int) -> int:
            return (
                kept[int(np.searchsorted(starts, position, side="right")) - 1] if position >= 0 else kept[0]
            )

        try:
            table, bad = self.fmt.parse(block, 0, first_only=first_only)
        except SchemaDrift as exc:
            raise SchemaDrift(replace(exc.change, position=body(exc.change.position))) from None
        self.drift_seen = [replace(c, position=body(c.position)) for c in self.fmt.drift_seen]
        return table, bad

    def _unusable(self, value: bytes) -> str | None:
        if not value.strip():
            return f"{self.what} is empty"
        if not self.flatten_newlines and (b"\n" in value or b"\r" in value):
            return f"{self.what} holds a line break: a CSV record must be one line"
        return None

    def _parse(
        self, lines: list[bytes], kept: list[int], first_only: bool
    ) -> tuple[pa.Table, list[tuple[int, str]]]:
        """Parses the lines as one block; returns the good records and (line index,
        reason) of the bad ones."""
        if not lines:
            return self.fmt.empty(), []
        block = b"\n".join(lines) + b"\n"
        starts = np.cumsum([0] + [len(line) + 1 for line in lines[:-1]])
        table, bad = self._parse_block(block, starts, kept, first_only=first_only)
        located = [(int(np.searchsorted(starts, b.position, side="right")) - 1, b.reason) for b in bad]
        return table, located


class RawMessages:
    """Bodies kept as they are, in the column ``data``; a missing body is null."""

    def __init__(self, fmt: RawFormat) -> None:
        self.fmt = fmt
        #: Bytes have no columns to drift.
        self.drift_seen: list[SchemaChange] = []

    def empty(self) -> pa.Table:
        return self.fmt.empty()

    def decode(self, bodies: Sequence[bytes | None], *, first_only: bool) -> tuple[pa.Table, dict[int, str]]:
        return pa.table({"data": pa.array(list(bodies), pa.binary())}), {}


class AvroMessages:
    """Bodies that each hold one Avro message (``AvroFormat.decode_batch``: single-object
    encoding, plain binary, or a schema registry's framing)."""

    def __init__(self, fmt: AvroFormat, *, missing: str) -> None:
        self.fmt = fmt
        self.missing = missing
        #: The schema changes the last ``decode`` saw, each at the index of its body (with a
        #: schema registry; a declared writer schema alone cannot drift).
        self.drift_seen: list[SchemaChange] = []

    def empty(self) -> pa.Table:
        return self.fmt.empty()

    def decode(self, bodies: Sequence[bytes | None], *, first_only: bool) -> tuple[pa.Table, dict[int, str]]:
        table, bad = self.fmt.decode_batch(bodies, first_only=first_only)
        self.drift_seen = self.fmt.drift_seen
        return table, {i: self.missing if bodies[i] is None else reason for i, reason in bad.items()}


def message_decoder(fmt: RecordFormat | AvroFormat, *, what: str, missing: str = "") -> MessageDecoder:
    """The decoder of bodies in ``fmt``."""
    if isinstance(fmt, AvroFormat):
        return AvroMessages(fmt, missing=missing or f"{what} is missing")
    if isinstance(fmt, RawFormat):
        return RawMessages(fmt)
    return LineMessages(fmt, what=what, missing=missing)
