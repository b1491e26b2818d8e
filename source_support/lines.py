"""Streaming reads of whole records from a byte range of a file (plain or gzip).

A byte range ``[start, end)`` owns every record whose first byte lies in it, so ranges
cut anywhere still give each record to exactly one reader (Hadoop's ``LineRecordReader``
rule). Memory is bounded by one block, whatever the size of the file.

A record may be up to ``MAX_RECORD_BYTES`` long; a longer one stops its split with an error
naming the file and line. The line of each record is known without re-reading the file:
the reader counts the newlines of the blocks it hands out.

A file in an encoding other than UTF-8 (``format.encoding``) is decoded as it is read and
handed on as UTF-8 (``DecodedFile``), so its positions, like a gzip file's, count the bytes
of its text as UTF-8, and it is read whole by one split.
"""

from __future__ import annotations

import codecs
from collections.abc import Callable
from types import TracebackType
from typing import Protocol, Self

import numpy as np

from source_support.formats import NEWLINE, ReadError, RecordFormat
from source_support.formats.typed_arrow import Offsets
from source_support.gunzip import CHUNK, FileOver, GzipStream, RawFile, ReadAheadGzipFile

UTF8_BOM = b"\xef\xbb\xbf"
MIN_CHUNK = 1 << 20
MAX_CHUNK = 64 << 20
#: The longest record read (a CSV row or a JSON line, with its line ending).
MAX_RECORD_BYTES = 64 << 20
#: A block holds fewer records than asked once it is this long (at least one record).
MAX_BLOCK_BYTES = 128 << 20
#: The most bytes one read of a plain file asks for when records end at newlines (a gzip
#: file's reads take each chunk as it was inflated).
READ_BYTES = CHUNK


class RecordTooLarge(ReadError):
    """A record is longer than ``MAX_RECORD_BYTES``."""


class RecordFile(Protocol):
    """What the readers use of a file ``open_records`` opened: a plain or gunzipped binary
    file, or a ``DecodedFile``."""

    @property
    def closed(self) -> bool: ...

    def read(self, size: int = -1, /) -> bytes: ...

    def readline(self, limit: int = -1, /) -> bytes: ...

    def seek(self, position: int, /) -> int: ...

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


class DecodedFile(FileOver[RecordFile]):
    """A binary file in ``encoding`` read as its text's UTF-8 bytes (a BOM is read and
    dropped). Seeking goes forward by reading (or from the start again), as in gzip."""

    def __init__(self, raw: RecordFile, encoding: str, path: str) -> None:
        self.raw, self.encoding, self.path = raw, encoding, path
        self._restart()

    def _restart(self) -> None:
        self.raw.seek(0)
        self.decoder = codecs.getincrementaldecoder(self.encoding)(errors="strict")
        self.pending = b""
        self.position = 0
        self.raw_read = 0
        self.eof = False

    def _fill(self, want: int, *, until_newline: bool = False) -> None:
        while not self.eof and len(self.pending) < want and not (until_newline and b"\n" in self.pending):
            chunk = self.raw.read(1 << 20)
            undecoded = len(self.decoder.getstate()[0])  # bytes of a character begun before
            try:
                text = self.decoder.decode(chunk, final=not chunk)
            except UnicodeDecodeError as exc:
                at = self.raw_read - undecoded + exc.start
                raise ReadError(
                    f"{self.path}: not {self.encoding} text at byte {at} "
                    f"of the file ({exc.reason}); set format.encoding to the files' encoding"
                ) from None
            self.raw_read += len(chunk)
            self.pending += text.encode("utf-8")
            self.eof = not chunk

    def read(self, size: int = -1) -> bytes:
        self._fill(size if size >= 0 else 1 << 62)
        size = len(self.pending) if size < 0 else size
        out, self.pending = self.pending[:size], self.pending[size:]
        self.position += len(out)
        return out

    def readline(self, limit: int = -1) -> bytes:
        limit = limit if limit >= 0 else 1 << 62
        self._fill(limit, until_newline=True)
        end = self.pending.find(b"\n", 0, limit)
        return self.read(min(limit, len(self.pending)) if end < 0 else end + 1)

    def seek(self, position: int) -> int:
        if position < self.position:
            self._restart()
        while self.position < position:
            if not self.read(min(1 << 20, position - self.position)):
                break
        return self.position


#: Opens the raw (maybe compressed) bytes at a path: a local file, or an object store's object.
RawOpener = Callable[[str], RawFile]


def open_local(path: str) -> RawFile:
    """The local file at ``path``, for reading bytes."""
    return open(path, "rb")  # noqa: SIM115 - the caller closes it


def open_records(
    path: str,
    *,
    compressed: bool,
    encoding: str = "utf-8",
    read_ahead: bool = False,
    open_raw: RawOpener = open_local,
) -> RecordFile:
    """The file's bytes as the formats read them: gunzipped, and decoded to UTF-8 when its
    encoding is another. ``read_ahead`` gunzips in a thread ahead of the reader (for reading a
    whole file; a look at its head needs no thread). ``open_raw`` opens the stored bytes
    (the S3 source reads objects through it)."""
    raw: RecordFile
    if compressed and read_ahead:
        raw = ReadAheadGzipFile(path, open_raw(path))
    elif compressed:
        raw = GzipStream(open_raw(path))
    else:
        raw = open_raw(path)
    if codecs.lookup(encoding).name == "utf-8":
        return raw
    return DecodedFile(raw, encoding, path)


def _newlines(data: bytes) -> int:
    """How many newlines ``data`` holds (numpy: several times ``bytes.count``'s speed)."""
    return int(np.count_nonzero(np.frombuffer(data, dtype=np.uint8) == NEWLINE))


class Pieces:
    """Bytes read ahead of a reader's position, kept as the pieces they were read in, with
    the newlines of each counted once: a block is cut from them by joining its pieces
    once, and only the piece where it ends is searched for its place."""

    def __init__(self) -> None:
        self.pieces: list[bytes] = []
        self.counts: list[int] = []
        self.size = 0
        self.newlines = 0

    def add(self, piece: bytes) -> None:
        count = _newlines(piece)
        self.pieces.append(piece)
        self.counts.append(count)
        self.size += len(piece)
        self.newlines += count

    def newlines_before(self, offset: int) -> int:
        """How many newlines lie in the first ``offset`` bytes."""
        if offset >= self.size:
            return self.newlines
        found, base = 0, 0
        for piece, count in zip(self.pieces, self.counts, strict=True):
            if offset <= base:
                break
            if offset >= base + len(piece):
                found += count
            else:
                found += piece.count(b"\n", 0, offset - base)
            base += len(piece)
        return found

    def end_of(self, record: int) -> int:
        """The offset just past the ``record``-th newline (1-based; there are as many)."""
        base = 0
        for piece, count in zip(self.pieces, self.counts, strict=True):
            if record <= count:
                at = np.flatnonzero(np.frombuffer(piece, dtype=np.uint8) == NEWLINE)[record - 1]
                return base + int(at) + 1
            record -= count
            base += len(piece)
        raise ValueError("fewer newlines than asked for")

    def head(self, size: int) -> bytes:
        """The first ``size`` bytes (or all there are), left in place."""
        parts: list[bytes] = []
        for piece in self.pieces:
            if size <= 0:
                break
            parts.append(piece[:size])
            size -= len(piece)
        return b"".join(parts)

    def joined(self) -> bytes:
        """All the bytes, as one piece from now on."""
        if len(self.pieces) > 1:
            whole = b"".join(self.pieces)
            self.pieces, self.counts = [whole], [self.newlines]
        return self.pieces[0] if self.pieces else b""

    def take(self, size: int) -> bytes:
        """Removes the first ``size`` bytes and returns them."""
        taken: list[bytes] = []
        while size > 0 and self.pieces:
            piece, count = self.pieces[0], self.counts[0]
            if len(piece) <= size:
                taken.append(piece)
                del self.pieces[0], self.counts[0]
                self.newlines -= count
            else:
                part = piece[:size]
                left = count - _newlines(part)
                taken.append(part)
                self.pieces[0], self.counts[0] = piece[size:], left
                self.newlines -= count - left
            self.size -= len(taken[-1])
            size -= len(taken[-1])
        return taken[0] if len(taken) == 1 else b"".join(taken)


class RecordBlockReader:
    """Reads blocks of at most ``max_records`` whole records, advancing ``position``.

    ``position`` is a byte offset in the (uncompressed) data and always sits at a record
    start once reading has begun, so it is a valid checkpoint after every block.
    """

    def __init__(
        self,
        path: str,
        fmt: RecordFormat,
        *,
        start: int,
        end: int,
        position: int,
        compressed: bool,
        open_raw: RawOpener = open_local,
    ) -> None:
        self.path = path
        self.compressed = compressed
        self.fmt = fmt
        self.end = end
        self.open_raw = open_raw
        self.file = open_records(
            path, compressed=compressed, encoding=fmt.encoding, read_ahead=True, open_raw=open_raw
        )
        #: What is read past ``position`` and not yet handed out.
        self.pending = Pieces()
        self.eof = False
        self.avg_record = 128.0
        #: The file's first line when the format has a header, wherever the range starts
        #: (after the comment lines before it).
        self.header: bytes | None = None
        # A UTF-8 BOM (as Excel writes it) is not part of the first record or header.
        bom = len(UTF8_BOM) if self.file.read(len(UTF8_BOM)) == UTF8_BOM else 0
        self.file.seek(bom)
        if fmt.has_header:
            skipped = bom
            while True:
                self.header = self.file.readline(MAX_RECORD_BYTES + 1)
                if len(self.header) > MAX_RECORD_BYTES:
                    raise RecordTooLarge(f"{path} line 1: the header is longer than {_limit()}")
                if not (fmt.comment and self.header.startswith(fmt.comment)):
                    break
                skipped += len(self.header)
            if position == 0:
                position = skipped + len(self.header)
        elif position == 0 and fmt.preamble_bytes:
            # What comes before the first record (a JSON array's "["): never a record.
            position = bom + fmt.preamble_length(self.file.read(fmt.preamble_bytes))
        elif position == 0:
            position = bom
        if position == start and start > 0:
            # A fresh range starting mid-file: its first record begins after the next newline.
            self.file.seek(start - 1)
            position = start - 1 + len(self.file.readline())
        else:
            self.file.seek(position)
        self.position = position
        self._opened_at = position
        self._line_at_open: int | None = None
        #: Newlines between where reading began and the start of the last block / position.
        self._newlines_to_block = 0
        self._newlines_to_position = 0

    def read_block(self, max_records: int) -> tuple[int, bytes, bool]:
        """Returns (position of the block, the block, whether the range is finished)."""
        if self.fmt.ends_at_every_newline:
            block, newlines = self._newline_block(max_records)
        else:
            block, newlines = self._scanned_block(max_records)
        start = self.position
        self.position += len(block)
        self._newlines_to_block = self._newlines_to_position
        self._newlines_to_position += newlines
        finished = self.position >= self.end or (self.eof and not self.pending.size)
        return start, block, finished

    def _newline_block(self, max_records: int) -> tuple[bytes, int]:
        """The next block of a format whose records each end at a newline, and its newlines:
        the newlines are counted as the bytes come (a C loop each), and only the piece
        where the block ends is searched for its place."""
        pending, limit = self.pending, self.end - self.position
        while not self.eof and limit > 0:
            past_range = pending.newlines > pending.newlines_before(limit - 1)
            if pending.newlines >= max_records or past_range:
                break
            if pending.newlines and pending.size >= MAX_BLOCK_BYTES:
                break
            if not pending.newlines and pending.size > MAX_RECORD_BYTES:
                self._too_large(0)
            if isinstance(self.file, ReadAheadGzipFile):
                chunk = self.file.read_chunk()  # inflated already: taken whole
            else:
                wanted = self.avg_record * (max_records - pending.newlines) * 1.2
                chunk = self.file.read(int(min(READ_BYTES, max(MIN_CHUNK, wanted))))
            if chunk:
                pending.add(chunk)
            else:
                self.eof = True
        # Records starting before the range's end, whole ones only, at most max_records.
        in_range = 1 + pending.newlines_before(limit - 1) if limit > 0 else 0
        take = min(max_records, in_range, pending.newlines)
        if take > 1 and pending.end_of(take) > MAX_BLOCK_BYTES:
            take = max(1, pending.newlines_before(MAX_BLOCK_BYTES))
        cut, newlines = (pending.end_of(take) if take else 0), take
        if take < max_records and self.eof and take == pending.newlines and cut < min(pending.size, limit):
            cut, take = pending.size, take + 1  # a last record without a trailing newline
        if cut > MAX_RECORD_BYTES:
            self._check_lengths(pending.head(cut), take)
        if take:
            self.avg_record = 0.8 * self.avg_record + 0.2 * (cut / take)
        return pending.take(cut), newlines

    def _scanned_block(self, max_records: int) -> tuple[bytes, int]:
        """The next block of a format whose records are found by ``record_ends`` (a
        newline inside a quoted value, JSON spanning lines), and its newlines."""
        pending, limit = self.pending, self.end - self.position
        while True:
            buffer = pending.joined()
            ends = self.fmt.record_ends(buffer)
            in_range = _count_starting_before(ends, limit)
            past_range = len(ends) > 0 and ends[-1] >= limit
            full = in_range > 0 and len(buffer) >= MAX_BLOCK_BYTES
            if in_range >= max_records or past_range or self.eof or limit <= 0 or full:
                break
            if not len(ends) and len(buffer) > MAX_RECORD_BYTES:
                self._too_large(0)
            # at least what is buffered, so a long record costs a few reads, not one per MiB
            want = int(min(MAX_CHUNK, max(MIN_CHUNK, self.avg_record * max_records * 1.2, len(buffer))))
            chunk = self.file.read(want)
            if chunk:
                pending.add(chunk)
            else:
                self.eof = True
        take = min(in_range, max_records)
        if take > 1:
            take = max(1, min(take, int(np.searchsorted(ends, MAX_BLOCK_BYTES, side="right"))))
        cut = int(ends[take - 1]) if take else 0
        if take < max_records and self.eof and take == len(ends) and cut < min(len(buffer), limit):
            cut, take = len(buffer), take + 1  # a last record without a trailing newline
            ends = np.append(ends[: take - 1], cut)
        if take:
            self._check_lengths(buffer[:cut], take, ends[:take])
            self.avg_record = 0.8 * self.avg_record + 0.2 * (cut / take)
        block = pending.take(cut)
        return block, block.count(b"\n")

    def _check_lengths(self, block: bytes, records: int, ends: Offsets | None = None) -> None:
        """Stops the split at the first of the block's ``records`` longer than
        ``MAX_RECORD_BYTES`` (``ends``: where each ends, found here if not given)."""
        if len(block) <= MAX_RECORD_BYTES:
            return
        if ends is None:
            ends = self.fmt.record_ends(block)[:records]
            if len(ends) < records:
                ends = np.append(ends, len(block))
        lengths = np.diff(ends, prepend=0)
        longest = int(np.argmax(lengths))
        if lengths[longest] > MAX_RECORD_BYTES:
            self._too_large(int(ends[longest - 1]) if longest else 0)

    def lines_of(self, block: bytes, offsets: list[int]) -> list[int]:
        """The 1-based lines of records at ``offsets`` in the block last read."""
        if not offsets:
            return []
        base = self._first_line() + self._newlines_to_block
        newlines = np.flatnonzero(np.frombuffer(block, dtype=np.uint8) == NEWLINE)
        return [base + int(n) for n in np.searchsorted(newlines, offsets)]

    def _first_line(self) -> int:
        """The line where reading began: counted once, only when a line is asked for."""
        if self._line_at_open is None:
            self._line_at_open = line_number(
                self.path,
                self._opened_at,
                compressed=self.compressed,
                encoding=self.fmt.encoding,
                open_raw=self.open_raw,
            )
        return self._line_at_open

    def _too_large(self, offset: int) -> None:
        head = self.pending.head(offset + 60)[offset:].decode("utf-8", errors="replace")
        line = self._first_line() + self._newlines_to_position + self.pending.newlines_before(offset)
        raise RecordTooLarge(f"{self.path} line {line}: a record is longer than {_limit()}: {head!r}...")

    def close(self) -> None:
        self.file.close()


def _limit() -> str:
    return f"{MAX_RECORD_BYTES >> 20} MB, the most a record may hold (MAX_RECORD_BYTES)"


def _count_starting_before(ends: np.ndarray, limit: int) -> int:
    """How many complete records start before ``limit`` (the first at 0, the rest at ends)."""
    if len(ends) == 0 or limit <= 0:
        return 0
    return 1 + int(np.count_nonzero(ends[:-1] < limit))


def line_number(
    path: str,
    position: int,
    *,
    compressed: bool,
    encoding: str = "utf-8",
    open_raw: RawOpener = open_local,
) -> int:
    """The 1-based line at byte ``position``, counted by streaming (used only in errors)."""
    count, done = 1, 0
    f = open_records(path, compressed=compressed, encoding=encoding, open_raw=open_raw)
    with f:
        while done < position:
            chunk = f.read(min(1 << 20, position - done))
            if not chunk:
                break
            count += chunk.count(b"\n")
            done += len(chunk)
    return count
