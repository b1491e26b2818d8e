"""The ``[source]`` table of a sequence source."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Self

from source_support.errors import ConfigError
from source_support.options import Option, option_defaults, option_types
from source_support.registry import Environment, check_fields

MAX_SPLITS = 10_000_000
OPTIONS = (
    Option(
        "count",
        int,
        "How many numbers to generate: the column value holds 0 to count-1.",
        minimum=1,
        example=1_000_000,
    ),
    Option(
        "splits",
        int,
        "How many range splits the numbers are cut into (read in parallel), at most count.",
        default=1,
        minimum=1,
        maximum=MAX_SPLITS,
        example=8,
    ),
)
DEFAULTS = option_defaults(OPTIONS)


@dataclass(frozen=True)
class SequenceSourceConfig:
    """A validated ``[source]`` table of a sequence source."""

    count: int
    splits: int = DEFAULTS["splits"]

    @classmethod
    def parse(cls, table: dict[str, Any], env: Environment | None) -> Self:
        """The config of a ``[source]`` table, or a ConfigError naming the field."""
        check_fields("source", table, option_types(OPTIONS))
        count = table.get("count")
        if count is None or count < 1:
            raise ConfigError("source.count", "is required: how many numbers, at least 1")
        splits = table.get("splits", DEFAULTS["splits"])
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
