"""Discovers files and hands out their splits on request: once (a bounded source), or
again and again (``watch = true``)."""

from __future__ import annotations

import glob
import os
import stat
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from connectors.files.config import WatchOptions
from connectors.files.split import WHOLE_FILE, FileSplit, FileStat, combined_split, discovered_split
from source_support.api import SplitEnumerator, SplitEnumeratorContext, splits_per_request
from source_support.backlog import BacklogEnumerator
from source_support.registry import Environment, glob_static_prefix

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
        splittable: bool | Callable[[str], str],
        env: Environment,
        state: dict[str, Any] | None,
        open_cost: int = 0,
    ) -> None:
        self.context = context
        self.pattern = pattern
        self.split_size = split_size
        self.open_cost = open_cost
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
        """The splits of every file found: small files packed together (``pack_files``)."""
        files = files_with_stats(self.pattern, self.env)
        self.files_found += len(files)
        return pack_files(
            files,
            split_size=self.split_size,
            open_cost=self.open_cost,
            splittable=self.splittable,
            parallelism=self.context.current_parallelism,
        )


#: Discovery waits while this many splits wait for readers (Iceberg pauses its discovery
#: so): a run that lags does not pile up splits; what was not listed is found later.
MAX_PENDING_SPLITS = 10_000


class ContinuousFileEnumerator(BacklogEnumerator[FileSplit]):
    """Flink's ``ContinuousFileSplitEnumerator`` (``watch = true``): lists the files again
    every discovery interval and queues the splits of the new ones; a reader that asks
    when the queue is empty waits in the state and gets the next split found, unasked.

    A file is taken once, when it has settled: its mtime is at least ``settle_ms`` old
    (a file being written keeps moving it; a hidden file renamed into place is taken as
    soon as its mtime is that old). The state stays small however large the directory,
    as Spark's ``FileStreamSource`` keeps it: the newest mtime taken (the mark) and the
    paths taken whose mtime lies within ``max_file_age_ms`` below it. A file that
    appears with an mtime older than that window is not taken (Spark's ``maxFileAge``).
    A path is read at most once in a run (a split is named by its path): files are
    expected to stay as they are once complete, and a file changed after it was taken
    is not read again (while it is being read, its split fails, as without ``watch``).

    Never says there are no more splits, unless a ``[stop]`` rule ends it: ``time`` takes
    no file modified after the time, and is exhausted once the clock has passed the time
    (plus ``settle_ms``), a last discovery has run and its splits are out; ``latest``
    takes only the files there at the first discovery (those still settling, once they
    have). ``records`` is the framework's.
    """

    def __init__(
        self,
        context: SplitEnumeratorContext[FileSplit],
        *,
        pattern: str,
        split_size: int,
        splittable: bool | Callable[[str], str],
        env: Environment,
        options: WatchOptions,
        stop: Mapping[str, Any],
        clock: Callable[[], float],
        state: dict[str, Any] | None,
    ) -> None:
        self.context, self.pattern, self.env = context, pattern, env
        self.split_size, self.splittable = split_size, splittable
        self.options, self.stop, self.clock = options, stop, clock
        #: Paths are remembered relative to the part of the pattern before its wildcards.
        self.base = glob_static_prefix(pattern) if glob.has_magic(pattern) else pattern
        state = state or {}
        self.discovered: bool = state.get("discovered", False)
        self.files_found: int = state.get("files_found", 0)
        self.pending: int = state.get("pending", 0)
        self.next_discovery_ms: int = state.get("next_discovery_ms", 0)
        self.mark_ns: int | None = state.get("mark_ns")
        self.seen: dict[str, int] = dict(state.get("seen", {}))
        self.awaiting: list[int] = list(state.get("awaiting", []))
        #: ``latest``: files there at the first discovery that had not settled yet.
        self.unsettled: list[str] = list(state.get("unsettled", []))
        #: A stop rule took its last files: nothing new will be discovered.
        self.closed: bool = state.get("closed", False)

    def start(self) -> None:
        """Discovers when the interval is up (or a stop time's last discovery is due)."""
        now_ms = int(self.clock() * 1000)
        due = not self.discovered or now_ms >= self.next_discovery_ms or self._stop_time_due(now_ms)
        if due and (not self.closed or self.unsettled) and self.pending < MAX_PENDING_SPLITS:
            self._discover(now_ms)
        self.serve_awaiting()

    def handle_split_request(self, subtask: int, requester_location: str = "") -> None:
        given = self.assign_share(subtask)
        if not given and not self.is_exhausted():
            if subtask not in self.awaiting:
                self.awaiting.append(subtask)
            return
        if subtask in self.awaiting:
            self.awaiting.remove(subtask)
        if not given:
            self.context.signal_no_more_splits(subtask)

    def snapshot_state(self) -> dict[str, Any]:
        return {
            "discovered": self.discovered,
            "files_found": self.files_found,
            "pending": self.pending,
            "next_discovery_ms": self.next_discovery_ms,
            "mark_ns": self.mark_ns,
            "seen": self.seen,
            "awaiting": self.awaiting,
            "unsettled": self.unsettled,
            "closed": self.closed,
        }

    def is_exhausted(self) -> bool:
        return self.closed and not self.unsettled and not self.pending

    def pending_count(self) -> int:
        return self.pending

    def _stop_time_due(self, now_ms: int) -> bool:
        """Whether the last discovery of a ``time`` stop is due: every file modified up to
        the time has settled by now."""
        return self.stop.get("kind") == "time" and now_ms >= self.stop["time_ms"] + self.options.settle_ms

    def _discover(self, now_ms: int) -> None:
        """Queues the splits of the files that are new and settled, oldest first."""
        settled_ns = (now_ms - self.options.settle_ms) * 1_000_000
        latest = self.stop.get("kind") == "latest"
        until_ns = self.stop["time_ms"] * 1_000_000 if self.stop.get("kind") == "time" else None
        only = set(self.unsettled) if latest and self.discovered else None
        taken: list[tuple[int, str, str, FileStat]] = []
        unsettled: list[str] = []
        for path, info in files_with_stats(self.pattern, self.env):
            name, mtime_ns = self._name(path), info.st_mtime_ns
            if (only is not None and name not in only) or (until_ns is not None and mtime_ns > until_ns):
                continue
            if not self._is_new(name, mtime_ns):
                continue
            if mtime_ns > settled_ns:
                unsettled.append(name)
                continue
            taken.append((mtime_ns, path, name, info))
        taken.sort(key=lambda item: item[:2])
        splits = [
            split
            for _, path, _, info in taken
            for split in file_splits(path, info, split_size=self.split_size, splittable=self.splittable)
        ]
        self.context.backlog().append(splits)
        self.pending += len(splits)
        self.files_found += len(taken)
        self._remember([(name, mtime_ns) for mtime_ns, _, name, _ in taken])
        self.discovered, self.next_discovery_ms = True, now_ms + self.options.discovery_interval_ms
        if latest:
            self.unsettled, self.closed = unsettled, True
        elif self._stop_time_due(now_ms):
            self.closed = True

    def _name(self, path: str) -> str:
        """How the state names a file: its path below the pattern's fixed part."""
        prefix = self.base.rstrip("/") + "/"
        return path[len(prefix) :] if path.startswith(prefix) else path

    def _is_new(self, name: str, mtime_ns: int) -> bool:
        if self.mark_ns is None:
            return True
        return name not in self.seen and mtime_ns >= self.mark_ns - self.options.max_file_age_ms * 1_000_000

    def _remember(self, taken: list[tuple[str, int]]) -> None:
        """Adds the files taken, moves the mark, and forgets paths that fell out of the window."""
        if not taken:
            return
        self.seen.update(taken)
        self.mark_ns = max([self.mark_ns or 0] + [mtime_ns for _, mtime_ns in taken])
        oldest = self.mark_ns - self.options.max_file_age_ms * 1_000_000
        self.seen = {name: mtime_ns for name, mtime_ns in self.seen.items() if mtime_ns >= oldest}


#: How a file is split (``FileSource.layout``): cut into byte ranges; one range over the
#: whole file; one split whose positions count decoded bytes (gzip, an encoding not UTF-8);
#: cut into byte ranges of blocks (Avro), never packed with other files.
RANGES, WHOLE, DECODED, BLOCKS = "ranges", "whole", "decoded", "blocks"


def file_splits(
    path: str, info: FileStat, *, split_size: int, splittable: bool | Callable[[str], str]
) -> list[FileSplit]:
    """The splits of a file, each remembering the file as it is now (size, mtime, inode):
    readers read only up to this size and fail a split whose file changed. An empty file
    has none; a gzip file is one; a larger file is cut into ranges of ``split_size`` when
    ``splittable`` (a bool, or the file's layout: RANGES, WHOLE or DECODED) allows."""
    size = info.st_size
    if size == 0:
        return []
    compressed = path.endswith(COMPRESSED_SUFFIXES)
    layout = _layout(path, splittable)
    if compressed or layout == DECODED:
        return [discovered_split(path, 0, WHOLE_FILE, info, compressed=compressed)]
    if layout not in (RANGES, BLOCKS) or size <= split_size:
        return [discovered_split(path, 0, size, info)]
    return [
        discovered_split(path, start, min(start + split_size, size), info)
        for start in range(0, size, split_size)
    ]


def pack_files(
    files: Sequence[tuple[str, FileStat]],
    *,
    split_size: int,
    open_cost: int,
    splittable: bool | Callable[[str], str],
    parallelism: int,
) -> list[FileSplit]:
    """The splits of ``files`` (path and stat), small files packed into combined splits as
    Spark packs them into partitions (``FilePartition.getFilePartitions``): each file costs
    its size plus ``open_cost`` (``spark.sql.files.openCostInBytes``), a split holds at most
    ``min(split_size, max(open_cost, total cost / parallelism))`` (``maxSplitBytes``, with
    ``split_size`` as ``maxPartitionBytes``), and the files, largest first, fill one split
    until the next would overflow it. A file is small when it is read whole in one range
    anyway: plain (not gzip), in byte ranges, and no larger than ``split_size``. A split of
    one file is the plain split of that file; ``open_cost`` 0 packs nothing."""
    splits: list[FileSplit] = []
    small: list[tuple[str, FileStat]] = []
    for path, info in files:
        if open_cost and 0 < info.st_size <= split_size and _layout(path, splittable) == RANGES:
            small.append((path, info))
        else:
            splits += file_splits(path, info, split_size=split_size, splittable=splittable)
    if not small:
        return splits
    total = sum(info.st_size + open_cost for _, info in small)
    max_bytes = min(split_size, max(open_cost, total // max(1, parallelism)))
    packed: list[tuple[str, FileStat]] = []
    size = 0
    for path, info in sorted(small, key=lambda file: -file[1].st_size):  # stable: path order among equals
        if packed and size + info.st_size > max_bytes:
            splits.append(_packed_split(packed))
            packed, size = [], 0
        packed.append((path, info))
        size += info.st_size + open_cost
    splits.append(_packed_split(packed))
    return splits


def _packed_split(files: list[tuple[str, FileStat]]) -> FileSplit:
    """The split of a pack, its files read in path order (Spark's: largest first)."""
    if len(files) == 1:
        path, info = files[0]
        return discovered_split(path, 0, info.st_size, info)
    return combined_split(sorted(files, key=lambda file: file[0]))


def _layout(path: str, splittable: bool | Callable[[str], str]) -> str:
    if path.endswith(COMPRESSED_SUFFIXES):
        return DECODED
    return splittable(path) if callable(splittable) else RANGES if splittable else WHOLE


def list_files(pattern: str, env: Environment) -> list[str]:
    """Files matching ``pattern`` (a directory means its files), sorted by path.

    Hidden and marker files (``.x``, ``_SUCCESS``) are skipped as Spark and Hadoop skip
    them, and so is anything a symlink leads outside the allowed roots.
    """
    return [path for path, _ in files_with_stats(pattern, env)]


def files_with_stats(pattern: str, env: Environment) -> list[tuple[str, FileStat]]:
    """``list_files`` with each file's stat, at one ``lstat`` per file: the directories the
    files sit in are checked against the allowed roots once each, and only a symlink is
    followed and checked on its own (100,000 files take well under a second)."""
    if os.path.isdir(pattern):
        pattern = os.path.join(pattern, "*")
    allowed_dirs: dict[str, bool] = {}
    found: list[tuple[str, FileStat]] = []
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
        found.append((path, FileStat.of(info)))
    return found
