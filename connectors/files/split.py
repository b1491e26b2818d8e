"""A byte range of one file: the unit of work of the files source."""

from __future__ import annotations

import hashlib
import os
import time
from dataclasses import dataclass, replace
from typing import Any, Self

from source_support.api import OffsetEntry, SourceSplit, SplitSerializer

WHOLE_FILE = 2**62  # the end of a range that runs to the end of the file (gzip)
#: The longest split id the database keeps (``Split.split_id``); a longer path is named by
#: a digest and its tail, so any path the OS allows fits.
MAX_SPLIT_ID = 1024
IDENTITY_FIELDS = ("size", "mtime_ns", "inode", "device")


@dataclass(frozen=True)
class FileSplit(SourceSplit):
    """Records of ``path`` whose first byte lies in ``[start, end)``, read up to ``position``.

    A gzip file cannot be cut, so it is one split over the whole file and its positions
    count uncompressed bytes. ``size``, ``mtime_ns``, ``inode`` and ``device`` are the file
    as discovery saw it (None in splits saved before they were recorded): a reader refuses
    to go on with a file that is no longer that one.
    """

    path: str
    start: int
    end: int
    position: int
    compressed: bool = False
    size: int | None = None
    mtime_ns: int | None = None
    inode: int | None = None
    device: int | None = None

    @property
    def split_id(self) -> str:
        split_id = f"{self.path}@{self.start}"
        if len(split_id) <= MAX_SPLIT_ID:
            return split_id
        digest = hashlib.sha256(os.fsencode(self.path)).hexdigest()[:16]
        suffix = f"@{self.start}"
        tail = self.path[-(MAX_SPLIT_ID - len(digest) - len(suffix) - 2) :]
        return f"{digest}:…{tail}{suffix}"

    @property
    def offset(self) -> OffsetEntry:
        return OffsetEntry(key=self.split_id, position=self.position)

    def at(self, position: int) -> Self:
        return replace(self, position=position)

    def change_in(self, info: os.stat_result) -> str | None:
        """How the file ``info`` describes differs from the discovered one, in words; None
        if it is the same file, unchanged (or the split predates recorded identities)."""
        if self.size is None:
            return None
        changes: list[str] = []
        if (info.st_ino, info.st_dev) != (self.inode, self.device):
            changes.append("replaced by another file")
        if info.st_size != self.size:
            changes.append(f"size {self.size} -> {info.st_size}")
        if info.st_mtime_ns != self.mtime_ns:
            changes.append(f"modified {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(info.st_mtime))}")
        if not changes:
            return None
        return (
            f"{self.path} changed while it was read: {', '.join(changes)}; "
            "re-run the flow once the file is complete"
        )


def discovered_split(
    path: str, start: int, end: int, info: os.stat_result, *, compressed: bool = False
) -> FileSplit:
    """A split of ``path`` that remembers the file as ``info`` (its stat at discovery) shows it."""
    return FileSplit(
        path,
        start,
        end,
        start,
        compressed=compressed,
        size=info.st_size,
        mtime_ns=info.st_mtime_ns,
        inode=info.st_ino,
        device=info.st_dev,
    )


class FileSplitSerializer(SplitSerializer[FileSplit]):
    def serialize(self, split: FileSplit) -> dict[str, Any]:
        data = {
            "path": split.path,
            "start": split.start,
            "end": split.end,
            "position": split.position,
            "compressed": split.compressed,
        }
        if split.size is not None:
            data.update({name: getattr(split, name) for name in IDENTITY_FIELDS})
        return data

    def deserialize(self, data: dict[str, Any]) -> FileSplit:
        return FileSplit(**data)  # a payload saved before identities were recorded has none
