"""A gzip file decompressed in parallel, ahead of its reader (``rapidgzip``).

A gzip file cannot be cut into byte ranges, so one reader reads it; ``rapidgzip`` finds
deflate blocks in parallel and decompresses chunks in its own threads (without the GIL)
ahead of the position read, so decompression runs beside the parser instead of before
it, on every core. What it holds is a few chunks and a seek index of a window per chunk,
so memory stays flat in the file's size. Seeking to an uncompressed position (a resumed
checkpoint) decompresses up to it in parallel too.
"""

from __future__ import annotations

import atexit
import os
import threading
import weakref
from types import TracebackType
from typing import Any, Protocol, Self, cast

import rapidgzip  # pyright: ignore[reportMissingTypeStubs]

#: Decompression threads per open file: every core, as the parser waits on them.
PARALLELISM = max(2, os.cpu_count() or 1)


class _Decompressor(Protocol):
    def read(self, size: int = -1, /) -> bytes: ...

    def readline(self, limit: int = -1, /) -> bytes: ...

    def seek(self, position: int, /) -> int: ...

    def close(self) -> None: ...


class ParallelGzipFile:
    """The uncompressed bytes of a gzip file (``RecordFile``); ``fileno`` is the gzip
    file's own, so the reader can ``fstat`` the file it reads."""

    def __init__(self, path: str) -> None:
        self.raw = open(path, "rb")  # noqa: SIM115 - closed by close()
        try:
            opened = cast(Any, rapidgzip).open(self.raw.fileno(), parallelization=PARALLELISM)
        except BaseException:
            self.raw.close()
            raise
        self.gz = cast(_Decompressor, opened)
        _OPEN.add(self)

    @property
    def closed(self) -> bool:
        return self.raw.closed

    def read(self, size: int = -1, /) -> bytes:
        return self.gz.read(size)

    def readline(self, limit: int = -1, /) -> bytes:
        return self.gz.readline(limit)

    def seek(self, position: int, /) -> int:
        return self.gz.seek(position)

    def fileno(self) -> int:
        return self.raw.fileno()

    def close(self) -> None:
        with _CLOSING:
            if not self.raw.closed:
                self.gz.close()
                self.raw.close()
        _OPEN.discard(self)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
        /,
    ) -> None:
        self.close()


_OPEN: weakref.WeakSet[ParallelGzipFile] = weakref.WeakSet()
_CLOSING = threading.Lock()


@atexit.register
def _close_all() -> None:
    """Stops the decompression threads of files still open at exit: rapidgzip aborts the
    process when the interpreter finalizes under a running thread of its own."""
    for gz in list(_OPEN):
        gz.close()
