"""A gzip file decompressed in a thread of its own, ahead of its reader.

A gzip file cannot be cut into byte ranges, so one reader reads it. Decompressing in the
reader's own thread would leave the parser idle while zlib inflates and zlib idle while the
parser parses; here a thread inflates up to ``AHEAD`` chunks ahead
of the position read, so decompression runs beside parsing and landing. Memory is those
chunks, whatever the size of the file.

``rapidgzip`` (parallel decompression) was measured here and not taken: on 2 shared cores
it was no faster than zlib in a thread and held 300-750 MB (its chunk cache) against 16 MB.
``zlib-ng`` (``gzip_ng``) inflates instead of the standard library's ``gzip``: 2-3 times as
fast here, and it holds the GIL for none of it, where ``gzip``'s reader loop held it so
much that two files inflated in two threads took as long as one after the other.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from types import TracebackType
from typing import Generic, Protocol, Self, TypeVar

from zlib_ng import gzip_ng


class RawFile(Protocol):
    """The compressed (or plain) bytes a record file is read from: a local file, or an
    object of an object store read through ranged GETs."""

    @property
    def closed(self) -> bool: ...

    def read(self, size: int = -1, /) -> bytes: ...

    def readline(self, limit: int = -1, /) -> bytes: ...

    def seek(self, position: int, whence: int = 0, /) -> int: ...

    def tell(self) -> int: ...

    def fileno(self) -> int: ...

    def close(self) -> None: ...

    def __enter__(self) -> Self: ...

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
        /,
    ) -> None: ...


class Closable(Protocol):
    """What ``FileOver`` uses of the file it reads through."""

    @property
    def closed(self) -> bool: ...

    def fileno(self) -> int: ...

    def close(self) -> None: ...


UnderT = TypeVar("UnderT", bound=Closable)


class FileOver(Generic[UnderT]):
    """A file read through another, ``raw`` (the stored bytes): its file number, whether it
    is closed and ``with`` are ``raw``'s; ``close`` closes ``raw``."""

    raw: UnderT

    def fileno(self) -> int:
        return self.raw.fileno()

    @property
    def closed(self) -> bool:
        return self.raw.closed

    def close(self) -> None:
        self.raw.close()

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


class GzipStream(FileOver[RawFile]):
    """The uncompressed bytes of the gzip file ``raw`` (``RecordFile``), inflated by zlib-ng;
    closing it closes ``raw``. zlib-ng's reader cannot seek back (its rewind leaves the
    compressed file where it was: "Not a gzipped file"), so a seek back starts a new reader
    at the file's start and reads forward to the position, as ``gzip.GzipFile`` does."""

    def __init__(self, raw: RawFile) -> None:
        self.raw = raw
        self.gz = self._reader()

    def _reader(self) -> gzip_ng.GzipNGFile:
        self.raw.seek(0)
        # zlib-ng's stubs leave the parameters it shares with gzip.GzipFile untyped.
        return gzip_ng.GzipNGFile(fileobj=self.raw, mode="rb")  # pyright: ignore[reportUnknownMemberType]

    def read(self, size: int = -1, /) -> bytes:
        return self.gz.read(size)

    def readline(self, limit: int = -1, /) -> bytes:
        return self.gz.readline(limit)

    def tell(self) -> int:
        return self.gz.tell()

    def seek(self, position: int, /) -> int:
        if position < self.gz.tell():
            self.gz.close()
            self.gz = self._reader()
        return self.gz.seek(position)

    def close(self) -> None:
        try:
            self.gz.close()
        finally:
            self.raw.close()


#: Uncompressed bytes per chunk, and how many chunks may wait for the reader.
CHUNK = 4 << 20
AHEAD = 4
_PUT_WAIT_S = 0.1


class ReadAheadGzipFile(FileOver[RawFile]):
    """The uncompressed bytes of a gzip file (``RecordFile``); ``fileno`` is the gzip file's
    own, so the reader can ``fstat`` the file it reads. Errors of the file (truncated, not
    gzip) are raised by the ``read`` that reaches them."""

    def __init__(self, path: str, raw: RawFile | None = None) -> None:
        #: The compressed bytes: ``raw`` (an object store's object), else the file at ``path``.
        self.raw: RawFile = raw if raw is not None else open(path, "rb")  # noqa: SIM115 - closed by close()
        self.gz = GzipStream(self.raw)
        #: The uncompressed position of the next byte ``read`` returns.
        self.position: int = 0
        self.pending = b""
        self.eof = False
        self._start()

    def _start(self) -> None:
        self.chunks: queue.Queue[bytes | BaseException] = queue.Queue(maxsize=AHEAD)
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._inflate, name="gunzip", daemon=True)
        self.thread.start()

    def _inflate(self) -> None:
        while not self.stopping.is_set():
            try:
                chunk: bytes | BaseException = self.gz.read(CHUNK)
            except BaseException as exc:  # noqa: BLE001 - handed to the reader, which raises it
                chunk = exc
            while not self.stopping.is_set():
                try:
                    self.chunks.put(chunk, timeout=_PUT_WAIT_S)
                    break
                except queue.Full:
                    continue
            if not isinstance(chunk, bytes) or not chunk:
                return

    def _stop(self) -> None:
        self.stopping.set()
        while self.thread.is_alive():
            with contextlib.suppress(queue.Empty):
                self.chunks.get_nowait()  # makes room for a put that waits
            self.thread.join(_PUT_WAIT_S)

    def _fill(self, want: int, *, until_newline: bool = False) -> None:
        """Takes chunks until ``pending`` holds ``want`` bytes (or a newline), joined once."""
        parts, have = [self.pending] if self.pending else [], len(self.pending)
        newline = until_newline and b"\n" in self.pending
        try:
            while not self.eof and have < want and not newline:
                chunk = self.chunks.get()
                if isinstance(chunk, BaseException):
                    self.eof = True
                    raise chunk
                self.eof = not chunk
                parts.append(chunk)
                have += len(chunk)
                newline = until_newline and b"\n" in chunk
        finally:
            if len(parts) > 1:
                self.pending = b"".join(parts)
            elif parts:
                self.pending = parts[0]  # one chunk: handed on as it is, not copied

    def read(self, size: int = -1, /) -> bytes:
        self._fill(size if size >= 0 else 1 << 62)
        if size < 0 or size >= len(self.pending):
            out, self.pending = self.pending, b""
        else:
            out, self.pending = self.pending[:size], self.pending[size:]
        self.position += len(out)
        return out

    def read_chunk(self) -> bytes:
        """The next bytes as inflated (up to a chunk), not cut or copied; b"" at the end."""
        return self.read(len(self.pending) or CHUNK)

    def readline(self, limit: int = -1, /) -> bytes:
        limit = limit if limit >= 0 else 1 << 62
        self._fill(limit, until_newline=True)
        end = self.pending.find(b"\n", 0, limit)
        return self.read(min(limit, len(self.pending)) if end < 0 else end + 1)

    def seek(self, position: int, /) -> int:
        if position != self.position:
            self._stop()
            self.gz.seek(position)
            self.position, self.pending, self.eof = position, b"", False
            self._start()
        return self.position

    def close(self) -> None:
        if not self.raw.closed:
            self._stop()
            self.gz.close()
