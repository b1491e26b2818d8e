"""The ``[source]`` table of a files source."""

from __future__ import annotations

import os
from typing import Any

from source_support.errors import ConfigError
from source_support.registry import Environment, check_fields, glob_static_prefix

FIELDS = {"path": str, "split_size_mb": (int, float), "allow_empty": bool}
DEFAULT_SPLIT_SIZE_MB = 64


def validate_files_source(config: dict[str, Any], env: Environment) -> dict[str, Any]:
    check_fields("source", config, FIELDS)
    path = config.get("path")
    if not path:
        raise ConfigError("source.path", "is required: a directory or a glob such as data/*.csv")
    pattern = os.path.normpath(path if os.path.isabs(path) else env.base_dir / path)
    # The directory part, symlinks resolved, must lie under a root: a link out of the roots
    # is refused here rather than reading nothing.
    env.resolve_path(glob_static_prefix(pattern), "source.path")
    split_size = config.get("split_size_mb", DEFAULT_SPLIT_SIZE_MB)
    if split_size <= 0:
        raise ConfigError("source.split_size_mb", "must be greater than 0")
    return {**config, "path": pattern}
