"""The ``[source]`` table of a sequence source."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Self

from source_support.errors import ConfigError
from source_support.registry import Environment, check_fields

FIELDS = {"count": int, "splits": int}
MAX_SPLITS = 10_000_000


@dataclass(frozen=True)
class SequenceSourceConfig:
    """A validated ``[source]`` table of a sequence source."""

    count: int
    splits: int = 1

    @classmethod
    def parse(cls, table: dict[str, Any], env: Environment | None) -> Self:
        """The config of a ``[source]`` table, or a ConfigError naming the field."""
        check_fields("source", table, FIELDS)
        count = table.get("count")
        if count is None or count < 1:
            raise ConfigError("source.count", "is required: how many numbers, at least 1")
        splits = table.get("splits", 1)
        if not 1 <= splits <= min(count, MAX_SPLITS):
            raise ConfigError("source.splits", f"must be between 1 and {min(count, MAX_SPLITS)}")
        return cls(count=count, splits=splits)

    def to_dict(self) -> dict[str, Any]:
        """What is stored: both fields, ``splits`` too when left at its default."""
        return {"count": self.count, "splits": self.splits}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Self:
        """The config of a stored (already validated) dict."""
        return cls(**data)
