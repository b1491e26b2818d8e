"""The ``[source]`` table of a sequence source."""

from __future__ import annotations

from typing import Any

from source_support.errors import ConfigError
from source_support.registry import Environment, check_fields

FIELDS = {"count": int, "splits": int}
MAX_SPLITS = 10_000_000


def validate_sequence_source(config: dict[str, Any], env: Environment) -> dict[str, Any]:
    check_fields("source", config, FIELDS)
    count = config.get("count")
    if count is None or count < 1:
        raise ConfigError("source.count", "is required: how many numbers, at least 1")
    splits = config.get("splits", 1)
    if not 1 <= splits <= min(count, MAX_SPLITS):
        raise ConfigError("source.splits", f"must be between 1 and {min(count, MAX_SPLITS)}")
    return {"count": count, "splits": splits}
