"""Open read handles kept between the time slices of a reader in one process.

A reader's slice ends every few seconds (``DATAFLOW_READER_SLICE_SECONDS``) and its handles
are released; the next slice of the same split reopens its input and goes to its checkpoint.
For a gzip file (or an object read as a stream) that means inflating everything before the
checkpoint again: reading a large ``.csv.gz`` cost a fifth more, and more the larger the
file. So a reader parks its open handles as its slice ends, keyed by what they are open on
and the position they stand at, and the next slice that asks for exactly that takes one
back. A handle nobody takes within ``ttl_s`` (the next slice ran in another process, the run
ended) is closed, and at most ``capacity`` are kept (the oldest is closed first).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

HandleT = TypeVar("HandleT")


class ParkedHandles(Generic[HandleT]):
    """Handles parked by key (see the module's docstring); thread-safe."""

    def __init__(self, *, close: Callable[[HandleT], None], capacity: int = 4, ttl_s: float = 30.0) -> None:
        self._close, self.capacity, self.ttl_s = close, capacity, ttl_s
        self._lock = threading.Lock()
        self._parked: OrderedDict[Hashable, tuple[HandleT, threading.Timer]] = OrderedDict()

    def park(self, key: Hashable, handle: HandleT) -> None:
        """Keeps ``handle`` for ``take(key)``; one parked under the same key is closed."""
        timer = threading.Timer(self.ttl_s, self._expire, args=(key, handle))
        timer.daemon = True
        evicted: list[HandleT] = []
        with self._lock:
            earlier = self._parked.pop(key, None)
            if earlier is not None:
                earlier[1].cancel()
                evicted.append(earlier[0])
            self._parked[key] = (handle, timer)
            while len(self._parked) > self.capacity:
                _, (oldest, oldest_timer) = self._parked.popitem(last=False)
                oldest_timer.cancel()
                evicted.append(oldest)
        timer.start()
        for stale in evicted:
            self._close(stale)

    def take(self, key: Hashable) -> HandleT | None:
        """The handle parked under ``key``, no longer parked; None if there is none."""
        with self._lock:
            parked = self._parked.pop(key, None)
        if parked is None:
            return None
        parked[1].cancel()
        return parked[0]

    def _expire(self, key: Hashable, handle: HandleT) -> None:
        with self._lock:
            parked = self._parked.get(key)
            if parked is None or parked[0] is not handle:
                return  # taken meanwhile
            del self._parked[key]
        self._close(handle)

    def clear(self) -> None:
        """Closes every parked handle."""
        with self._lock:
            parked = list(self._parked.values())
            self._parked.clear()
        for handle, timer in parked:
            timer.cancel()
            self._close(handle)
