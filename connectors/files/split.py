"""The unit of work of the files source: a byte range of one file, or a group of small
files read whole, one after the other (a combined split)."""

from __future__ import annotations

import hashlib
import os
import time
from dataclasses import dataclass, replace
from typing import Any, NamedTuple, Self, cast

from source_support.api import OffsetEntry, SourceSplit, SplitSerializer

WHOLE_FILE = 2**62  # the end of a range that runs to the end of the file (gzip)
#: The longest split id the database keeps (``Split.split_id``); a longer path is named by
#: a digest and its tail, so any path the OS allows fits.
MAX_SPLIT_ID = 1024
IDENTITY_FIELDS = ("size", "mtime_ns", "inode", "device")
#: A combined split's position holds the index of the file it is in above these bits and
#: the byte offset in that file below them, so a checkpoint says which file and where.
FILE_BITS = 40
#: The bounds of a position's parts: the byte offset below ``FILE_BITS`` bits, the file index
#: in what is left of a signed 64-bit integer (the database's BIGINT).
MAX_FILE_OFFSET = 1 << FILE_BITS
MAX_FILES_PER_SPLIT = 1 << (63 - FILE_BITS)


def group_position(index: int, offset: int) -> int:
    """The position of byte ``offset`` of the group's file ``index``."""
    return (index << FILE_BITS) | offset


def group_location(position: int) -> tuple[int, int]:
    """The (file index, byte offset) of a combined split's position."""
    return position >> FILE_BITS, position & ((1 << FILE_BITS) - 1)


class FileStat(NamedTuple):
    """What discovery keeps of a file's ``stat`` (``os.stat_result`` has these too): a
    fifth of its memory, which counts when a directory holds 100,000 files."""

    st_size: int
    st_mtime_ns: int
    st_ino: int
    st_dev: int

    @classmethod
    def of(cls, info: os.stat_result) -> FileStat:
        return cls(info.st_size, info.st_mtime_ns, info.st_ino, info.st_dev)


@dataclass(frozen=True)
class FileGroup:
    """The files of a combined split as discovery saw them: names below ``directory``,
    with the size, mtime, inode and device of each (a reader refuses a file that is no
    longer that one). Stored column by column, so a split of a thousand files stays a few
    tens of kilobytes."""

    directory: str
    names: tuple[str, ...]
    sizes: tuple[int, ...]
    mtimes_ns: tuple[int, ...]
    inodes: tuple[int, ...]
    devices: tuple[int, ...]

    def __len__(self) -> int:
        return len(self.names)

    def path(self, index: int) -> str:
        return os.path.join(self.directory, self.names[index])

    def change_in(self, index: int, info: os.stat_result) -> str | None:
        """How file ``index`` as ``info`` shows it differs from the discovered one; None
        if it is the same file, unchanged."""
        identity = (self.sizes[index], self.mtimes_ns[index], self.inodes[index], self.devices[index])
        return file_change(self.path(index), identity, info)

    @classmethod
    def of(cls, files: list[tuple[str, FileStat]]) -> FileGroup:
        """The group of ``files`` (path and stat), in that order."""
        paths = [path for path, _ in files]
        directory = os.path.commonpath(list({os.path.dirname(p) for p in paths}))
        cut = len(directory.rstrip(os.sep)) + 1  # the paths are absolute and normalized
        return cls(
            directory,
            tuple(p[cut:] for p in paths),
            tuple(info.st_size for _, info in files),
            tuple(info.st_mtime_ns for _, info in files),
            tuple(info.st_ino for _, info in files),
            tuple(info.st_dev for _, info in files),
        )

    def to_dict(self) -> dict[str, Any]:
        devices: int | list[int] = self.devices[0] if len(set(self.devices)) == 1 else list(self.devices)
        return {
            "directory": self.directory,
            "names": list(self.names),
            "sizes": list(self.sizes),
            "mtimes_ns": list(self.mtimes_ns),
            "inodes": list(self.inodes),
            "devices": devices,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FileGroup:
        names = tuple(data["names"])
        devices = data["devices"]
        return cls(
            data["directory"],
            names,
            tuple(data["sizes"]),
            tuple(data["mtimes_ns"]),
            tuple(data["inodes"]),
            tuple(cast(list[int], devices)) if isinstance(devices, list) else (devices,) * len(names),
        )


@dataclass(frozen=True)
class FileSplit(SourceSplit):
    """Records of ``path`` whose first byte lies in ``[start, end)``, read up to ``position``.

    A gzip file cannot be cut, so it is one split over the whole file and its positions
    count uncompressed bytes.

    A combined split (``group`` set) reads many small files whole, one after the other, as
    Spark packs small files into one partition: ``path`` is its first file, ``end`` is
    past its last file and positions are ``group_position(file index, byte offset)``. ``size``, ``mtime_ns``, ``inode`` and ``device`` are the file
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
    group: FileGroup | None = None

    @property
    def split_id(self) -> str:
        # A file is in one split only, so its first file names a combined split.
        suffix = f"@{self.start}" if self.group is None else f"@{self.start}+{len(self.group) - 1}"
        split_id = f"{self.path}{suffix}"
        if len(split_id) <= MAX_SPLIT_ID:
            return split_id
        digest = hashlib.sha256(os.fsencode(self.path)).hexdigest()[:16]
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
        return file_change(self.path, (self.size, self.mtime_ns, self.inode, self.device), info)


def file_change(
    path: str, identity: tuple[int, int | None, int | None, int | None], info: os.stat_result
) -> str | None:
    """How the file ``info`` describes differs from ``identity`` (size, mtime, inode,
    device, as discovery saw it), in words naming ``path``; None if it is the same."""
    size, mtime_ns, inode, device = identity
    changes: list[str] = []
    if (info.st_ino, info.st_dev) != (inode, device):
        changes.append("replaced by another file")
    if info.st_size != size:
        changes.append(f"size {size} -> {info.st_size}")
    if info.st_mtime_ns != mtime_ns:
        changes.append(f"modified {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(info.st_mtime))}")
    if not changes:
        return None
    return (
        f"{path} changed while it was read: {', '.join(changes)}; re-run the flow once the file is complete"
    )


def discovered_split(
    path: str, start: int, end: int, info: FileStat, *, compressed: bool = False
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


def combined_split(files: list[tuple[str, FileStat]]) -> FileSplit:
    """A split that reads ``files`` (path and stat at discovery) whole, in that order."""
    group = FileGroup.of(files)
    return FileSplit(files[0][0], 0, group_position(len(group), 0), 0, group=group)


class FileSplitSerializer(SplitSerializer[FileSplit]):
    def serialize(self, split: FileSplit) -> dict[str, Any]:
        data: dict[str, Any] = {
            "path": split.path,
            "start": split.start,
            "end": split.end,
            "position": split.position,
            "compressed": split.compressed,
        }
        if split.size is not None:
            data.update({name: getattr(split, name) for name in IDENTITY_FIELDS})
        if split.group is not None:
            data["group"] = split.group.to_dict()
        return data

    def deserialize(self, data: dict[str, Any]) -> FileSplit:
        group = data.get("group")
        if group is not None:
            fields: dict[str, Any] = {**data, "group": FileGroup.from_dict(group)}
            return FileSplit(**fields)
        return FileSplit(**data)  # a payload saved before identities were recorded has none
