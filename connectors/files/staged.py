"""What Spark wrote into a sink's staging directory, and the names its files take in the sink."""

from __future__ import annotations

import re
from pathlib import Path

#: What follows Spark's task and file counter in a written file's name: ``.snappy.parquet``.
#: The counter follows a "-" or a "."; without that, a uuid ending in "c" and three digits
#: before ``.c000`` (``...-0b7ec123.c000.snappy.parquet``) would match first.
_SPARK_FILE_SUFFIX = re.compile(r"[.-]c\d{3}(\..+)$")


def named_files(staging: Path, key: str) -> list[tuple[Path, Path]]:
    """(staged file, its name in the sink relative to it) for each data file Spark wrote:
    ``part-<key>.<ext>`` in each directory (``-1``, ``-2``... after the first), so the names
    are fixed by ``key`` (a run's attempt, a stream's epoch), not by Spark's random ids."""
    by_dir: dict[Path, list[Path]] = {}
    for path in sorted(staging.rglob("*")):
        if path.is_file() and not path.name.startswith((".", "_")):
            by_dir.setdefault(path.parent, []).append(path)
    out: list[tuple[Path, Path]] = []
    for directory, paths in by_dir.items():
        for index, path in enumerate(paths):
            match = _SPARK_FILE_SUFFIX.search(path.name)
            suffix = match.group(1) if match else "".join(path.suffixes)
            name = f"part-{key}{f'-{index}' if index else ''}{suffix}"
            out.append((path, directory.relative_to(staging) / name))
    return out
