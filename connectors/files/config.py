"""The ``[source]`` table of a files source."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Self

from source_support.errors import ConfigError
from source_support.options import Option, check_bounds, option_defaults, option_types
from source_support.registry import Environment, check_fields, glob_static_prefix

DAY_MS = 24 * 3600 * 1000
OPTIONS = (
    Option(
        "path",
        str,
        "A directory, a file or a glob (** recurses) to read, relative to DATAFLOW_BASE_DIR; "
        "it must lie under DATAFLOW_ALLOWED_ROOTS, symlinks followed.",
        example="data/sensors/*.csv",
        filesystem_path=True,
    ),
    Option(
        "split_size_mb",
        (int, float),
        "The size in MB (greater than 0) of the byte ranges a large uncompressed file is cut into, "
        "so that several readers share it.",
        default=64,
    ),
    Option(
        "open_cost_kb",
        (int, float),
        "What opening a file costs, in KB of reading (Spark's openCostInBytes), when small files "
        "are packed into one split: a split holds files up to split_size_mb, each counted at its "
        "size plus this; 0 gives each file a split of its own.",
        default=64,
    ),
    Option(
        "allow_empty",
        bool,
        "Whether a path that matches no file, or only files without a record, gives an empty result "
        "instead of failing the run.",
        default=False,
    ),
    Option(
        "watch",
        bool,
        "Whether new files are read too, as they come (the flow then runs until stopped or its stop rule).",
        default=False,
    ),
    Option(
        "discovery_interval_ms",
        int,
        "With watch = true: how often, in milliseconds, the path is listed for new files.",
        default=10_000,
        minimum=100,
        maximum=DAY_MS,
    ),
    Option(
        "settle_ms",
        int,
        "With watch = true: how long, in milliseconds, a file must stay unchanged before it is read; "
        "0 suits writers that rename finished files into place.",
        default=1_000,
        minimum=0,
        maximum=3600 * 1000,
    ),
    Option(
        "max_file_age_ms",
        int,
        "With watch = true: how much older, in milliseconds, than the newest file read a file may be "
        "and still be read when it appears (Spark's maxFileAge).",
        default=3600 * 1000,
        minimum=0,
        maximum=30 * DAY_MS,
    ),
)
DEFAULTS = option_defaults(OPTIONS)
#: The options of ``watch = true``.
WATCH_FIELDS = ("discovery_interval_ms", "settle_ms", "max_file_age_ms")


@dataclass(frozen=True)
class WatchOptions:
    """How a watched files source (``watch = true``) looks for new files."""

    discovery_interval_ms: int = DEFAULTS["discovery_interval_ms"]
    settle_ms: int = DEFAULTS["settle_ms"]
    max_file_age_ms: int = DEFAULTS["max_file_age_ms"]


@dataclass(frozen=True)
class FilesSourceConfig:
    """A validated ``[source]`` table of a files source; ``path`` is absolute and normalized."""

    path: str
    split_size_mb: int | float = DEFAULTS["split_size_mb"]
    open_cost_kb: int | float = DEFAULTS["open_cost_kb"]
    allow_empty: bool = DEFAULTS["allow_empty"]
    watch: bool = DEFAULTS["watch"]
    discovery_interval_ms: int = DEFAULTS["discovery_interval_ms"]
    settle_ms: int = DEFAULTS["settle_ms"]
    max_file_age_ms: int = DEFAULTS["max_file_age_ms"]

    @classmethod
    def parse(cls, table: dict[str, Any], env: Environment) -> Self:
        """The config of a ``[source]`` table, or a ConfigError naming the field."""
        check_fields("source", table, option_types(OPTIONS))
        path = table.get("path")
        if not path:
            raise ConfigError("source.path", "is required: a directory or a glob such as data/*.csv")
        pattern = os.path.normpath(path if os.path.isabs(path) else env.base_dir / path)
        # The directory part, symlinks resolved, must lie under a root: a link out of the roots
        # is refused here rather than reading nothing.
        env.resolve_path(glob_static_prefix(pattern), "source.path")
        if table.get("split_size_mb", DEFAULTS["split_size_mb"]) <= 0:
            raise ConfigError("source.split_size_mb", "must be greater than 0")
        if table.get("open_cost_kb", DEFAULTS["open_cost_kb"]) < 0:
            raise ConfigError("source.open_cost_kb", "must be 0 or more")
        _check_watch_fields(table)
        return cls(**{**table, "path": pattern})

    def to_dict(self) -> dict[str, Any]:
        """What is stored: ``path`` and the fields not at their defaults (as a table
        leaves them out)."""
        stored = {"path": self.path}
        for name, default in DEFAULTS.items():
            value = getattr(self, name)
            if value != default:
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


def _check_watch_fields(table: dict[str, Any]) -> None:
    for name in WATCH_FIELDS:
        if name in table and not table.get("watch"):
            raise ConfigError(f"source.{name}", "applies only to a watched source (watch = true)")
    check_bounds("source", OPTIONS, table)
