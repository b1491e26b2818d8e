"""The ``[source]`` table of a sequence source."""

from __future__ import annotations

from typing import Self

from source_support.config import ConfigBase, option
from source_support.errors import ConfigError
from source_support.registry import Environment

MAX_SPLITS = 10_000_000


class SequenceSourceConfig(ConfigBase):
    """A validated ``[source]`` table of a sequence source."""

    count: int = option(
        "How many numbers to generate: the column value holds 0 to count-1.", minimum=1, example=1_000_000
    )
    splits: int = option(
        "How many range splits the numbers are cut into (read in parallel), at most count.",
        default=1,
        minimum=1,
        maximum=MAX_SPLITS,
        example=8,
    )

    def validate(self, env: Environment) -> Self:
        if self.splits > self.count:
            raise ConfigError("source.splits", f"must be between 1 and {min(self.count, MAX_SPLITS)}")
        return self
