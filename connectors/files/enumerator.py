"""Discovers the files of a bounded source once and hands out their splits on request."""

from __future__ import annotations

import glob
import os
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from connectors.files.split import WHOLE_FILE, FileSplit, discovered_split
from source_support.api import SplitEnumerator, SplitEnumeratorContext, splits_per_request
from source_support.registry import Environment

COMPRESSED_SUFFIXES = (".gz", ".gzip")


class StaticFileEnumerator(SplitEnumerator[FileSplit]):
    """Flink's static ``FileSourceEnumerator``: one discovery, then a queue of splits.

    The queue is the run's backlog (``SplitEnumeratorContext.backlog``), so the state is a
    count and a tick touches only the splits it hands out. Splits that come back from a
    failed reader go to the head so they are finished first; a reader that asks when the
    queue is empty is told there are no more.
    """

    def __init__(
        self,
        context: SplitEnumeratorContext[FileSplit],
        *,
        pattern: str,
        split_size: int,
        splittable: bool,
        env: Environment,
        state: dict[str, Any] | None,
    ) -> None:
        self.context = context
        self.pattern = pattern
        self.split_size = split_size
        self.splittable = splittable
        self.env = env
        self.discovered = bool(state and state.get("discovered"))
        self.pending = (state or {}).get("pending", 0)
        self.files_found = (state or {}).get("files_found", 0)

    def start(self) -> None:
        if not self.discovered:
            splits = self._discover()
            self.context.backlog().append(splits)
            self.pending, self.discovered = len(splits), True

    def handle_split_request(self, subtask: int, requester_location: str = "") -> None:
        if self.pending:
            count = splits_per_request(self.pending, self.context.current_parallelism)
            given = self.context.backlog().take(count)
            self.pending = self.pending - len(given) if given else 0  # 0: the backlog ran dry first
            if given:
                self.context.assign_splits({subtask: given})
                return
        if self.discovered:
            self.context.signal_no_more_splits(subtask)

    def add_splits_back(self, splits: Sequence[FileSplit], subtask: int) -> None:
        self.context.backlog().prepend(splits)
        self.pending += len(splits)

    def add_reader(self, subtask: int) -> None:
        """Readers ask for splits themselves; nothing is pushed on registration."""

    def snapshot_state(self) -> dict[str, Any]:
        return {"discovered": self.discovered, "files_found": self.files_found, "pending": self.pending}

    def is_exhausted(self) -> bool:
        return self.discovered and not self.pending

    def pending_count(self) -> int:
        return self.pending

    def _discover(self) -> list[FileSplit]:
        """The splits of every file found, each remembering the file as it is now (size,
        mtime, inode): readers read only up to this size and fail a split whose file changed."""
        splits: list[FileSplit] = []
        for path, info in files_with_stats(self.pattern, self.env):
            self.files_found += 1
            size = info.st_size
            if size == 0:
                continue
            if path.endswith(COMPRESSED_SUFFIXES):
                splits.append(discovered_split(path, 0, WHOLE_FILE, info, compressed=True))
            elif not self.splittable or size <= self.split_size:
                splits.append(discovered_split(path, 0, size, info))
            else:
                for start in range(0, size, self.split_size):
                    splits.append(discovered_split(path, start, min(start + self.split_size, size), info))
        return splits


def list_files(pattern: str, env: Environment) -> list[str]:
    """Files matching ``pattern`` (a directory means its files), sorted by path.

    Hidden and marker files (``.x``, ``_SUCCESS``) are skipped as Spark and Hadoop skip
    them, and so is anything a symlink leads outside the allowed roots.
    """
    return [path for path, _ in files_with_stats(pattern, env)]


def files_with_stats(pattern: str, env: Environment) -> list[tuple[str, os.stat_result]]:
    """``list_files`` with each file's stat, at one ``lstat`` per file: the directories the
    files sit in are checked against the allowed roots once each, and only a symlink is
    followed and checked on its own (100,000 files take well under a second)."""
    if os.path.isdir(pattern):
        pattern = os.path.join(pattern, "*")
    allowed_dirs: dict[str, bool] = {}
    found = []
    for path in sorted(glob.glob(pattern, recursive=True)):
        if os.path.basename(path).startswith((".", "_")):
            continue
        try:
            info = os.lstat(path)
        except FileNotFoundError:  # deleted since the listing
            continue
        if stat.S_ISLNK(info.st_mode):
            if not (os.path.isfile(path) and env.is_allowed(Path(path))):
                continue
            try:
                info = os.stat(path)  # the file it leads to
            except FileNotFoundError:
                continue
        elif stat.S_ISREG(info.st_mode):
            parent = os.path.dirname(path)
            if parent not in allowed_dirs:
                allowed_dirs[parent] = env.is_allowed(Path(parent))
            if not allowed_dirs[parent]:
                continue
        else:
            continue
        found.append((path, info))
    return found
