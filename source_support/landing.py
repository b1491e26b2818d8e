"""The landing zone: one Parquet file per (split, start and end position), written atomically.

A batch is written to a temporary name, flushed to disk, and renamed into place, so a file
under its final name is always complete. Names are derived from the split and the positions
the batch starts and ends at, and reading the same positions again yields the same records,
so a replay after a crash overwrites a file with identical content instead of adding a copy.
The end is part of the name because a batch of a stream that starts at the same position
may end elsewhere (more had arrived): a stale reader (its lease lapsed, its split moved on)
that lands such a batch before its commit is refused then writes a file no commit names,
instead of replacing the committed file of the split's new reader.
"""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import uuid
from pathlib import Path

import pyarrow as pa

from source_support.typed_arrow import write_parquet

#: Errors of a landing zone that no retry can help: the disk is full, mounted read-only, or
#: the quota is used up. Another reader would fail the same way.
UNWRITABLE_ERRNOS = frozenset({errno.ENOSPC, errno.EROFS, errno.EDQUOT})


class LandingZoneUnwritable(OSError):
    """The landing zone cannot take another file (see ``UNWRITABLE_ERRNOS``); the message
    names the landing root and the system's reason."""


class LandingZone:
    def __init__(self, root: str | os.PathLike[str], *, fsync: bool = True) -> None:
        self.root = Path(root)
        self.fsync = fsync

    def run_dir(self, run_key: str) -> Path:
        return self.root / f"run-{run_key}"

    def batch_path(self, run_key: str, split_id: str, start: int, end: int | None = None) -> Path:
        split_dir = hashlib.sha1(split_id.encode()).hexdigest()[:20]
        name = f"{start:020d}" if end is None else f"{start:020d}-{end:020d}"
        return self.run_dir(run_key) / split_dir / f"{name}.parquet"

    def land(self, path: Path, table: pa.Table) -> None:
        """Writes ``table`` to ``path`` atomically; raises ``LandingZoneUnwritable`` when the
        disk is full, read-only or over quota (nothing of the batch is left behind)."""
        tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_parquet(table, tmp, compression="snappy")
            if self.fsync:
                fd = os.open(tmp, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
            os.replace(tmp, path)
        except OSError as exc:
            if exc.errno in UNWRITABLE_ERRNOS:
                unwritable = LandingZoneUnwritable(f"landing zone {self.root}: {os.strerror(exc.errno)}")
                unwritable.errno = exc.errno
                raise unwritable from exc
            raise
        finally:
            tmp.unlink(missing_ok=True)

    def remove(self, path: str | os.PathLike[str]) -> None:
        """Removes one landed file (gone already is fine)."""
        Path(path).unlink(missing_ok=True)

    def discard_run(self, run_key: str) -> None:
        shutil.rmtree(self.run_dir(run_key), ignore_errors=True)
