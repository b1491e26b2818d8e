"""One point in time for every chunk of a snapshot: an exported snapshot, held.

Choice: PostgreSQL's exported snapshot (``pg_export_snapshot()``), not Flink CDC's
low/high watermark. The watermark method makes each chunk consistent by replaying the
change log between a chunk's low and high watermark over what the chunk read; without a
change stream (cdc is not built yet) it has nothing to replay, so it cannot give one point
in time. An exported snapshot can: the run's first enumerator pass opens a REPEATABLE READ,
READ ONLY transaction, exports its snapshot and computes the chunks inside it, and each
reader's transaction starts with ``SET TRANSACTION SNAPSHOT`` of that id. No lock is taken
on the table (a snapshot is MVCC only).

Who holds it: ``SnapshotHolder``, a daemon thread of the process that started the run (the
web process, or ``runflow``), on a connection of its own: a reader that dies (SIGKILL)
takes only its own connection with it, and a reader that resumes the chunk imports the
same snapshot again. The holder keeps its transaction alive with a cheap statement every
``KEEPALIVE_S`` (and turns ``idle_in_transaction_session_timeout`` off for its session).

Its cost is bounded: an open snapshot holds back vacuum in the whole database, so the
holder lets go (a) once readers were seen (sessions named ``reader_application_name(id)``)
and none has been for ``IDLE_RELEASE_S``, (b) when no reader came within
``FIRST_READER_WAIT_S`` (the run was not created after all, or no worker runs), (c) after
``MAX_HOLD_S`` in any case, or (d) when its process ends.

A lost snapshot (the holder's process restarted, its connection cut, or released by (b) or (c)):
``SET TRANSACTION SNAPSHOT`` fails with "invalid snapshot identifier". The reader then reads
what is left of its chunk at a snapshot of its own (REPEATABLE READ, READ ONLY: still one
consistent point for that chunk) and says so on the split (``RecordBatch.note``): rows
changed between the two points may then appear at the later one in that chunk. Nothing is
lost or read twice within a chunk (it resumes after its last landed key); only the "one
point in time for every chunk" promise is weakened, and that is named on the run.
"""

from __future__ import annotations

import contextlib
import threading
import time

import psycopg

from connectors.postgres.connection import connect

KEEPALIVE_S = 10.0
IDLE_RELEASE_S = 60.0
FIRST_READER_WAIT_S = 600.0
MAX_HOLD_S = 3600.0
APPLICATION_PREFIX = "adf-snapshot "


def reader_application_name(snapshot: str) -> str:
    """The ``application_name`` of a reader's session reading ``snapshot``."""
    return (APPLICATION_PREFIX + snapshot)[:63]


class SnapshotHolder:
    """Holds an exported snapshot open in a thread until it is released (see the module)."""

    def __init__(self, url: str, exported: tuple[psycopg.Connection, str] | None = None) -> None:
        """``exported``: a replication connection that exported ``snapshot`` (a cdc slot's),
        which must stay idle: readers are then watched on a connection of its own."""
        self.url = url
        if exported is not None:
            self.conn, self.snapshot = exported
            self.watch = connect(url, autocommit=True, application_name="adf-snapshot-holder")
        else:
            self.conn = connect(url, application_name="adf-snapshot-holder")
            self.conn.execute("SET idle_in_transaction_session_timeout = 0")
            self.conn.commit()
            self.conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            row = self.conn.execute("SELECT pg_export_snapshot()").fetchone()
            assert row is not None
            self.snapshot = row[0]
            self.watch = self.conn
        self.started = time.monotonic()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Starts keeping the snapshot alive in the background (after the chunks were
        computed on ``conn``, which then belongs to the thread)."""
        self._thread = threading.Thread(target=self._hold, name="pg-snapshot", daemon=True)
        self._thread.start()

    def _hold(self) -> None:
        seen_at: float | None = None
        name = reader_application_name(self.snapshot)
        try:
            while not self._stop.wait(KEEPALIVE_S):
                now = time.monotonic()
                if now - self.started >= MAX_HOLD_S:
                    break
                with self._lock:
                    row = self.watch.execute(
                        "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (name,)
                    ).fetchone()
                readers = row[0] if row else 0
                if readers:
                    seen_at = now
                    continue
                idle = seen_at is not None and now - seen_at >= IDLE_RELEASE_S
                never_came = seen_at is None and now - self.started >= FIRST_READER_WAIT_S
                if idle or never_came:
                    break
        except psycopg.Error:
            pass  # the connection is gone: readers fall back (see the module)
        finally:
            self.release()

    def release(self) -> None:
        """Ends the transaction: the snapshot can no longer be imported."""
        self._stop.set()
        _HOLDERS.pop(self.snapshot, None)
        with contextlib.suppress(psycopg.Error):
            self.conn.close()
        with contextlib.suppress(psycopg.Error):
            self.watch.close()


_HOLDERS: dict[str, SnapshotHolder] = {}


def hold_snapshot(url: str, exported: tuple[psycopg.Connection, str] | None = None) -> SnapshotHolder:
    """A new holder of a fresh exported snapshot of ``url`` (or of ``exported``, see
    ``SnapshotHolder``); it is kept in the process until released (``release_snapshot``,
    or by itself)."""
    holder = SnapshotHolder(url, exported)
    _HOLDERS[holder.snapshot] = holder
    return holder


def release_snapshot(snapshot: str | None) -> None:
    """Releases the holder of ``snapshot`` if this process holds it."""
    holder = _HOLDERS.get(snapshot or "")
    if holder is not None:
        holder.release()


def release_all() -> None:
    """Releases every snapshot this process holds (tests, and a process that shuts down)."""
    for holder in list(_HOLDERS.values()):
        holder.release()
