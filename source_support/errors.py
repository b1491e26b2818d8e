"""Errors the framework raises, each carrying what a user needs to fix the cause."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class ConfigError(ValueError):
    """A flow config is refused: ``field`` names the offending field (``source.path``)."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


class RecordError(ValueError):
    """A record could not be parsed; ``offset`` is where it starts in its split's data."""

    def __init__(self, *, offset: int, raw: str, reason: str) -> None:
        super().__init__(f"offset {offset}: {reason}")
        self.offset = offset
        self.raw = raw
        self.reason = reason


class SplitFailed(RuntimeError):
    """A split cannot go on; the message says where (file, line, byte offset) and why.

    Raised by a connector's ``SplitReader.fetch``, it fails split ``split_id`` (and so its
    run) whatever ``skip_errors`` says: nothing read from that split can be trusted (a file
    that changed while it was read).
    """

    def __init__(self, message: str, *, split_id: str, schema_changes: Sequence[Any] = ()) -> None:
        super().__init__(message)
        self.split_id = split_id
        #: The schema change that failed the split (``format.on_schema_change = "fail"``),
        #: recorded on the run with the failure.
        self.schema_changes = list(schema_changes)
