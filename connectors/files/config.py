"""The ``[source]`` table of a files source."""

from __future__ import annotations

import os
from dataclasses import dataclass, fields
from typing import Any, Self

from source_support.errors import ConfigError
from source_support.registry import Environment, check_fields, glob_static_prefix

FIELDS = {
    "path": str,
    "split_size_mb": (int, float),
    "allow_empty": bool,
    "watch": bool,
    "discovery_interval_ms": int,
    "settle_ms": int,
    "max_file_age_ms": int,
}
DEFAULT_SPLIT_SIZE_MB = 64
DAY_MS = 24 * 3600 * 1000
#: The fields of ``watch = true``: (default, least, most).
WATCH_FIELDS = {
    # How often the directory is listed for new files.
    "discovery_interval_ms": (10_000, 100, DAY_MS),
    # How long a file's mtime must stand still before the file is taken: a file still
    # being written keeps moving it. 0 suits writers that rename finished files into place.
    "settle_ms": (1_000, 0, 3600 * 1000),
    # How much older than the newest file taken a file may be and still be taken when it
    # appears (Spark's maxFileAge); the state remembers the paths of this window only.
    "max_file_age_ms": (3600 * 1000, 0, 30 * DAY_MS),
}


@dataclass(frozen=True)
class WatchOptions:
    """How a watched files source (``watch = true``) looks for new files."""

    discovery_interval_ms: int = WATCH_FIELDS["discovery_interval_ms"][0]
    settle_ms: int = WATCH_FIELDS["settle_ms"][0]
    max_file_age_ms: int = WATCH_FIELDS["max_file_age_ms"][0]


@dataclass(frozen=True)
class FilesSourceConfig:
    """A validated ``[source]`` table of a files source; ``path`` is absolute and normalized."""

    path: str
    split_size_mb: int | float = DEFAULT_SPLIT_SIZE_MB
    allow_empty: bool = False
    watch: bool = False
    discovery_interval_ms: int = WATCH_FIELDS["discovery_interval_ms"][0]
    settle_ms: int = WATCH_FIELDS["settle_ms"][0]
    max_file_age_ms: int = WATCH_FIELDS["max_file_age_ms"][0]

    @classmethod
    def parse(cls, table: dict[str, Any], env: Environment) -> Self:
        """The config of a ``[source]`` table, or a ConfigError naming the field."""
        check_fields("source", table, FIELDS)
        path = table.get("path")
        if not path:
            raise ConfigError("source.path", "is required: a directory or a glob such as data/*.csv")
        pattern = os.path.normpath(path if os.path.isabs(path) else env.base_dir / path)
        # The directory part, symlinks resolved, must lie under a root: a link out of the roots
        # is refused here rather than reading nothing.
        env.resolve_path(glob_static_prefix(pattern), "source.path")
        if table.get("split_size_mb", DEFAULT_SPLIT_SIZE_MB) <= 0:
            raise ConfigError("source.split_size_mb", "must be greater than 0")
        _check_watch_fields(table)
        return cls(**{**table, "path": pattern})

    def to_dict(self) -> dict[str, Any]:
        """What is stored: ``path`` and the fields not at their defaults (as a table
        leaves them out)."""
        stored = {"path": self.path}
        for name in FIELDS:
            value = getattr(self, name)
            if name != "path" and value != FIELD_DEFAULTS[name]:
                stored[name] = value
        return stored

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Self:
        """The config of a stored (already validated) dict."""
        return cls(**data)

    @property
    def watch_options(self) -> WatchOptions | None:
        """How new files are looked for; None without ``watch``."""
        if not self.watch:
            return None
        return WatchOptions(**{name: getattr(self, name) for name in WATCH_FIELDS})


FIELD_DEFAULTS = {f.name: f.default for f in fields(FilesSourceConfig)}


def _check_watch_fields(table: dict[str, Any]) -> None:
    for name, (_, least, most) in WATCH_FIELDS.items():
        if name not in table:
            continue
        if not table.get("watch"):
            raise ConfigError(f"source.{name}", "applies only to a watched source (watch = true)")
        if not least <= table[name] <= most:
            raise ConfigError(f"source.{name}", f"must be between {least} and {most}")
