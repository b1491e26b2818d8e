"""The ``[source]`` table of a files source."""

from __future__ import annotations

import glob
import os
from typing import Any

from source_support.errors import ConfigError
from source_support.registry import Environment, check_fields

FIELDS = {"path": str, "split_size_mb": (int, float)}
DEFAULT_SPLIT_SIZE_MB = 64


def validate_files_source(config: dict[str, Any], env: Environment) -> dict[str, Any]:
    check_fields("source", config, FIELDS)
    path = config.get("path")
    if not path:
        raise ConfigError("source.path", "is required: a directory or a glob such as data/*.csv")
    pattern = os.path.normpath(path if os.path.isabs(path) else env.base_dir / path)
    env.resolve_path(_static_prefix(pattern), "source.path")
    split_size = config.get("split_size_mb", DEFAULT_SPLIT_SIZE_MB)
    if split_size <= 0:
        raise ConfigError("source.split_size_mb", "must be greater than 0")
    return {**config, "path": pattern}


def _static_prefix(pattern: str) -> str:
    """The part of a glob before its first wildcard, which must lie under an allowed root."""
    if not glob.has_magic(pattern):
        return pattern
    parts = []
    for part in pattern.split("/"):
        if glob.has_magic(part):
            break
        parts.append(part)
    return "/".join(parts) or "/"
