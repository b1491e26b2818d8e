"""The ``[source]`` table of a lines source."""

from __future__ import annotations

from dataclasses import replace
from typing import Self

from source_support.config import ConfigBase, option
from source_support.errors import ConfigError
from source_support.registry import Environment


class LinesSourceConfig(ConfigBase):
    """A validated ``[source]`` table: the real path of the directory to read."""

    path: str = option(
        "A directory of text files, relative to DATAFLOW_BASE_DIR and under DATAFLOW_ALLOWED_ROOTS; "
        "each file is a split and each line a record.",
        example="data/notes",
    )

    def validate(self, env: Environment) -> Self:
        directory = env.resolve_path(self.path, "source.path")  # symlinks followed, under a root
        if not directory.is_dir():
            raise ConfigError("source.path", f"{directory} is not a directory")
        return replace(self, path=str(directory))
