"""A TCP proxy that a test can cut like a network partition, for outage tests.

Plain threads and sockets: a worker given the proxy's address instead of the server's
loses the server when the test says so, while every other process keeps it.
"""

from __future__ import annotations

import socket
import struct
import threading
from urllib.parse import urlsplit, urlunsplit


class TcpProxy:
    """Forwards a free loopback port to ``upstream`` until ``cut()``, and again after ``restore()``.

    A cut resets every open connection. Until ``restore()``, a new connection is accepted
    but nothing on it is ever read or answered: a black hole, as when a partition drops
    packets silently, not a clean refusal. Such a connection stays silent after the restore
    too (the server never heard of it, like a flow a firewall lost its state for), so a
    client that waits on it without a timeout waits forever.
    """

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.2)
        self.port = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._is_cut = False
        self._closed = threading.Event()
        self._open: set[socket.socket] = set()
        self._black_holed: list[socket.socket] = []
        self._acceptor = threading.Thread(target=self._accept, name="tcp-proxy", daemon=True)
        self._acceptor.start()

    @classmethod
    def for_url(cls, url: str) -> TcpProxy:
        parts = urlsplit(url)
        return cls((parts.hostname or "127.0.0.1", parts.port or 6379))

    def url(self, url: str) -> str:
        """``url`` (same scheme, credentials, path and query) pointed at this proxy."""
        parts = urlsplit(url)
        credentials = parts.netloc.rpartition("@")[0]
        netloc = f"{credentials}@" if credentials else ""
        return urlunsplit(parts._replace(netloc=f"{netloc}127.0.0.1:{self.port}"))

    def cut(self) -> None:
        with self._lock:
            self._is_cut = True
            dropped, self._open = self._open, set()
        for sock in dropped:
            _reset(sock)

    def restore(self) -> None:
        with self._lock:
            self._is_cut = False

    def close(self) -> None:
        self._closed.set()
        self._acceptor.join()
        self._listener.close()
        self.cut()
        for sock in self._black_holed:
            sock.close()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            client.settimeout(None)
            with self._lock:
                if self._is_cut:
                    self._black_holed.append(client)
                    continue
            try:
                server = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                _reset(client)
                continue
            server.settimeout(None)
            with self._lock:
                if self._is_cut:  # cut while we connected
                    self._black_holed.append(client)
                    server.close()
                    continue
                self._open.update((client, server))
            for source, target in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(source, target), daemon=True).start()

    def _pump(self, source: socket.socket, target: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                target.sendall(data)
        except OSError:
            pass
        with self._lock:
            ours = source in self._open
            self._open.difference_update((source, target))
        if ours:  # a cut resets both ends itself
            _reset(source)
            _reset(target)


def _reset(sock: socket.socket) -> None:
    """Drops a connection with a reset, and wakes a thread blocked reading it."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()
