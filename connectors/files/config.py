"""The ``[source]`` table of a files source."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Self

from source_support.config import ConfigBase, option
from source_support.errors import ConfigError
from source_support.options import option_defaults
from source_support.registry import Environment, glob_static_prefix

DAY_MS = 24 * 3600 * 1000
#: The options of ``watch = true``.
WATCH_FIELDS = ("discovery_interval_ms", "settle_ms", "max_file_age_ms")


class FilesSourceConfig(ConfigBase):
    """A validated ``[source]`` table of a files source; ``path`` is absolute and normalized."""

    path: str = option(
        "A directory, a file or a glob (** recurses) to read, relative to DATAFLOW_BASE_DIR; "
        "it must lie under DATAFLOW_ALLOWED_ROOTS, symlinks followed.",
        example="data/sensors/*.csv",
        filesystem_path=True,
    )
    split_size_mb: int | float = option(
        "The size in MB (greater than 0) of the byte ranges a large uncompressed file is cut into, "
        "so that several readers share it.",
        default=64,
        minimum=0,
    )
    open_cost_kb: int | float = option(
        "What opening a file costs, in KB of reading (Spark's openCostInBytes), when small files "
        "are packed into one split: a split holds files up to split_size_mb, each counted at its "
        "size plus this; 0 gives each file a split of its own.",
        default=64,
        minimum=0,
    )
    allow_empty: bool = option(
        "Whether a path that matches no file, or only files without a record, gives an empty result "
        "instead of failing the run.",
        default=False,
    )
    watch: bool = option(
        "Whether new files are read too, as they come (the flow then runs until stopped or its stop rule).",
        default=False,
    )
    discovery_interval_ms: int = option(
        "With watch = true: how often, in milliseconds, the path is listed for new files.",
        default=10_000,
        minimum=100,
        maximum=DAY_MS,
    )
    settle_ms: int = option(
        "With watch = true: how long, in milliseconds, a file must stay unchanged before it is read; "
        "0 suits writers that rename finished files into place.",
        default=1_000,
        minimum=0,
        maximum=3600 * 1000,
    )
    max_file_age_ms: int = option(
        "With watch = true: how much older, in milliseconds, than the newest file read a file may be "
        "and still be read when it appears (Spark's maxFileAge).",
        default=3600 * 1000,
        minimum=0,
        maximum=30 * DAY_MS,
    )

    @classmethod
    def parse(cls, table: Mapping[str, Any], env: Environment) -> Self:
        # A watch option without watch is the mistake to report, before its range; at its
        # default it is what every stored config holds, so a stored config parses again.
        for name in WATCH_FIELDS:
            if table.get(name, DEFAULTS[name]) != DEFAULTS[name] and not table.get("watch"):
                raise ConfigError(f"source.{name}", "applies only to a watched source (watch = true)")
        return super().parse(table, env)

    def validate(self, env: Environment) -> Self:
        if self.split_size_mb <= 0:
            raise ConfigError("source.split_size_mb", "must be greater than 0")
        pattern = os.path.normpath(self.path if os.path.isabs(self.path) else env.base_dir / self.path)
        # The directory part, symlinks resolved, must lie under a root: a link out of the roots
        # is refused here rather than reading nothing.
        env.resolve_path(glob_static_prefix(pattern), "source.path")
        return replace(self, path=pattern)

    @property
    def watch_options(self) -> WatchOptions | None:
        """How new files are looked for; None without ``watch``."""
        if not self.watch:
            return None
        return WatchOptions(**{name: getattr(self, name) for name in WATCH_FIELDS})


DEFAULTS = option_defaults(FilesSourceConfig.OPTIONS)


@dataclass(frozen=True)
class WatchOptions:
    """How a watched files source (``watch = true``) looks for new files."""

    discovery_interval_ms: int = DEFAULTS["discovery_interval_ms"]
    settle_ms: int = DEFAULTS["settle_ms"]
    max_file_age_ms: int = DEFAULTS["max_file_age_ms"]
