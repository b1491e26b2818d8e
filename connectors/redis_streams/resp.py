"""A RESP2 reply parser for redis-py that reads a whole reply from one buffer.

redis-py's pure-Python parser reads each element of a reply through a ``BytesIO`` with
two calls, a few microseconds each; an XREAD of 10,000 entries of 5 fields has 110,000
elements, and parsing them was most of the time a reader spent. This parser finds each
element with one ``find`` in a ``bytearray`` that grows as the socket delivers, and
resumes where it stopped when a reply is not complete yet. It is a redis-py
``parser_class`` (its documented extension point): replies come out as redis-py's own
RESP2 parser returns them (bytes, ints, lists, None, error instances), so every command
and response callback works unchanged.
"""

from __future__ import annotations

import select
from typing import Any

from redis._parsers.base import BaseParser
from redis.exceptions import ConnectionError, InvalidResponse

CRLF = b"\r\n"
BULK, ARRAY, INTEGER, SIMPLE, ERROR = b"$"[0], b"*"[0], b":"[0], b"+"[0], b"-"[0]
SERVER_CLOSED = "Connection closed by server."


class _Incomplete(Exception):
    """The reply goes on past what was received."""


#: What ``_next_value`` returns for an array whose elements come next.
_OPENED = object()


class WholeReplyParser(BaseParser):
    def __init__(self, socket_read_size: int) -> None:
        self.socket_read_size = max(socket_read_size, 1 << 20)
        self.encoder = None
        self._sock = None
        self._data = bytearray()
        self._pos = 0
        #: Arrays being filled while a reply is incomplete: [items, how many still to come].
        self._stack: list[list[Any]] = []

    def on_connect(self, connection) -> None:
        self._sock = connection._sock
        self.encoder = connection.encoder
        self._reset()

    def on_disconnect(self) -> None:
        self._sock = None
        self.encoder = None
        self._reset()

    def _reset(self) -> None:
        self._data = bytearray()
        self._pos = 0
        self._stack = []

    def can_read(self, timeout: float) -> bool:
        if self._pos < len(self._data):
            return True
        sock = self._sock
        if sock is None:
            return False
        pending = getattr(sock, "pending", None)  # TLS data already decrypted
        if not (pending and pending()) and not select.select([sock], [], [], timeout)[0]:
            return False
        self._receive()
        return True

    def read_response(self, disable_decoding: bool = False) -> Any:
        decode = not disable_decoding and self.encoder is not None and self.encoder.decode_responses
        while True:
            try:
                value = self._parse(decode)
            except _Incomplete:
                self._receive()
                continue
            if self._pos == len(self._data):
                self._data.clear()
                self._pos = 0
            elif self._pos > self.socket_read_size:  # replies of a pipeline follow
                del self._data[: self._pos]
                self._pos = 0
            return value

    def _receive(self) -> None:
        chunk = self._sock.recv(self.socket_read_size)
        if not chunk:
            raise ConnectionError(SERVER_CLOSED)
        self._data += chunk

    def _bulks(self, top: list[Any], pos: int, decode: bool) -> int:
        """Reads the bulk strings that come next in array ``top`` (most of a reply, in a
        tight loop); returns the position after them."""
        data, items, remaining = self._data, top[0], top[1]
        size, first = len(data), len(items)
        while remaining and pos < size and data[pos] == BULK:
            end = data.find(CRLF, pos)
            if end < 0:
                break
            length = int(data[pos + 1 : end])
            if length < 0:
                items.append(None)
                pos = end + 2
            else:
                stop = end + 2 + length
                if stop + 2 > size:
                    break
                items.append(bytes(data[end + 2 : stop]))
                pos = stop + 2
            remaining -= 1
        if decode:
            items[first:] = [None if v is None else self.encoder.decode(v) for v in items[first:]]
        top[1] = remaining
        return pos

    def _parse(self, decode: bool) -> Any:
        """The next whole reply, resuming where the last call stopped; raises
        ``_Incomplete`` (keeping what it parsed) when the reply goes on past the data."""
        stack = self._stack
        while True:
            value = self._next_value(decode)
            if value is _OPENED:
                continue
            while stack:
                top = stack[-1]
                top[0].append(value)
                top[1] -= 1
                if top[1]:
                    break
                value = stack.pop()[0]
            else:
                return value

    def _next_value(self, decode: bool) -> Any:
        """The element at the parse position (``_OPENED`` for an array begun), moving
        the position past it only once it is whole."""
        data, pos = self._data, self._pos
        end = data.find(CRLF, pos)
        if end < 0:
            raise _Incomplete
        kind, header = data[pos], data[pos + 1 : end]
        if kind == ARRAY:
            return self._open_array(int(header), end + 2, decode)
        if kind == BULK:
            return self._bulk(int(header), end + 2, decode)
        self._pos = end + 2
        if kind == INTEGER:
            return int(header)
        if kind == SIMPLE:
            return self.encoder.decode(bytes(header)) if decode else bytes(header)
        if kind == ERROR:
            error = self.parse_error(header.decode("utf-8", errors="replace"))
            if isinstance(error, ConnectionError):
                raise error
            return error
        raise InvalidResponse(f"Protocol Error: {bytes(data[pos:end])!r}")

    def _bulk(self, length: int, start: int, decode: bool) -> Any:
        if length < 0:
            self._pos = start
            return None
        if start + length + 2 > len(self._data):
            raise _Incomplete
        value = bytes(self._data[start : start + length])
        self._pos = start + length + 2
        return self.encoder.decode(value) if decode else value

    def _open_array(self, count: int, start: int, decode: bool) -> Any:
        self._pos = start
        if count <= 0:
            return [] if count == 0 else None
        top = [[], count]
        self._stack.append(top)
        self._pos = self._bulks(top, start, decode)
        if top[1]:
            return _OPENED
        return self._stack.pop()[0]
