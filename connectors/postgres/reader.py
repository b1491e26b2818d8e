"""Reads chunks: one binary COPY per chunk (and per resume), cut into Arrow batches.

A chunk is read by one ``SELECT ... ORDER BY key`` through ``adbc-driver-postgresql``, which
runs it as a binary COPY and decodes it into Arrow in C++ (1M rows of the bench's table:
1.4 s, against 11 s for psycopg's binary COPY rows turned into Arrow in Python), in a
REPEATABLE READ, READ ONLY transaction that imports the run's exported snapshot. The
driver's record batches are re-cut into batches of ``max_records`` rows as they stream, so
a chunk is never held whole; the query stays open between batches of a slice (its
connection is the chunk's own) and is closed, connection and all, when the chunk is
dropped or the reader closes. A resumed
chunk starts after its last landed key (``ChunkSplit.resume_after``): what landed before
a SIGKILL is not read again.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import adbc_driver_manager as adbc
import pyarrow as pa
from psycopg import sql

from connectors.postgres.catalog import POSITION_COLUMN, cursor_condition
from connectors.postgres.cdc import CDC_NAMES, ChangeStream, snapshot_columns
from connectors.postgres.connection import TableName, error_words, trusted_sql
from connectors.postgres.pgoutput import format_lsn
from connectors.postgres.snapshot import reader_application_name
from connectors.postgres.split import LINE_BITS, STREAM_SPLIT_ID, ChunkSplit
from connectors.postgres.types import PgColumn, arrow_schema
from source_support.api import OffsetEntry, RecordBatch
from source_support.errors import SplitFailed
from source_support.reader_base import SequentialSplitReader

LOST_SNAPSHOT_NOTE = (
    "the run's exported snapshot was gone when this chunk was read (its holder ended); the chunk was "
    "read at a snapshot of its own, so it may show rows as of a later time than the other chunks"
)
#: PostgreSQL's "invalid snapshot identifier" and "object not in prerequisite state".
LOST_SNAPSHOT_STATES = frozenset({"22023", "55000"})
#: Errors that mean the database went away (a restart, a cut connection), not a bad chunk.
TRANSIENT = (adbc.OperationalError, adbc.InternalError, ConnectionError, OSError)
BEGIN = "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY"
#: How long a chunk waits for its database to come back before it fails, naming why.
OUTAGE_LIMIT_S = 300.0


@dataclass(frozen=True)
class ChunkQuery:
    """What every chunk of a source selects: its columns, from a table (by ``key``, or ctid
    when None) or a checked query."""

    columns: list[PgColumn]
    table: TableName | None
    key: str | None
    query: str | None = None
    #: Incremental: the cursor column and its SQL type.
    cursor: str | None = None
    cursor_type: str | None = None

    def select(self, split: ChunkSplit) -> sql.Composable:
        """The SELECT of what is left of ``split``, its last column the row's position."""
        after = split.resume_after
        if self.query is not None:
            cols = sql.SQL(", ").join(c.select_expression("q") for c in self.columns)
            return sql.SQL("SELECT {}, 0::int8 AS {} FROM ({}) AS q OFFSET {}").format(
                cols, sql.Identifier(POSITION_COLUMN), trusted_sql(self.query), sql.Literal(split.position)
            )
        assert self.table is not None
        cols = sql.SQL(", ").join(c.select_expression() for c in self.columns)
        if self.key is not None:
            key = sql.Identifier(self.key)
            conditions: list[sql.Composable] = [
                sql.SQL("{} >= {}").format(key, sql.Literal(split.low if after is None else after + 1))
            ]
            if split.high is not None:
                conditions.append(sql.SQL("{} < {}").format(key, sql.Literal(split.high)))
            position: sql.Composable = sql.SQL("{}::int8").format(key)
            order: sql.Composable = key
        else:
            start = f"({split.low},0)" if after is None else _tid(after)
            conditions: list[sql.Composable] = [
                sql.SQL("ctid {} {}::tid").format(sql.SQL(">=" if after is None else ">"), sql.Literal(start))
            ]
            if split.high is not None:
                conditions.append(sql.SQL("ctid < {}::tid").format(sql.Literal(f"({split.high},0)")))
            position = sql.SQL(
                "(((ctid::text::point)[0])::int8 << {}) + ((ctid::text::point)[1])::int8"
            ).format(sql.Literal(LINE_BITS))
            order = sql.SQL("ctid")
        if self.cursor is not None and self.cursor_type is not None:
            if split.mark_high is None:
                conditions.append(sql.SQL("FALSE"))  # no row past the last run's mark
            else:
                conditions.append(
                    cursor_condition(self.cursor, self.cursor_type, split.mark_low, split.mark_high)
                )
        return sql.SQL("SELECT {}, {} AS {} FROM {} WHERE {} ORDER BY {}").format(
            cols,
            position,
            sql.Identifier(POSITION_COLUMN),
            self.table.identifier,
            sql.SQL(" AND ").join(conditions),
            order,
        )


def _tid(encoded: int) -> str:
    return f"({encoded >> LINE_BITS},{encoded & ((1 << LINE_BITS) - 1)})"


class ChunkReader(SequentialSplitReader[ChunkSplit]):
    """Reads the held chunks one after the other (``SequentialSplitReader``)."""

    def __init__(
        self,
        url: str,
        chunk_query: ChunkQuery,
        schema: pa.Schema | None = None,
        stream: Callable[[], ChangeStream] | None = None,
    ) -> None:
        super().__init__()
        self.url = url
        self.chunk_query = chunk_query
        self.schema = schema or arrow_schema(chunk_query.columns)
        #: cdc: makes the reader of the change-stream split (read after the held chunks).
        self.make_stream = stream
        self.stream: ChangeStream | None = None
        self._streams: dict[str, Generator[tuple[pa.Table, bool, str]]] = {}
        self._connections: dict[str, Any] = {}
        #: When the database stopped answering (None: it answers).
        self._down_since: float | None = None

    def handle_splits_changes(self, added: Sequence[ChunkSplit], removed: Sequence[str]) -> None:
        """As ``SequentialSplitReader``'s, with the change stream kept last: it never ends."""
        super().handle_splits_changes(added, removed)
        stream = self.splits.pop(STREAM_SPLIT_ID, None)
        if stream is not None:
            self.splits[STREAM_SPLIT_ID] = stream

    def fetch(self, max_records: int, timeout_s: float) -> list[RecordBatch]:
        """The next batch of the head chunk; nothing while the database is away (the chunk
        resumes after its last batch when it is back), and ``SplitFailed`` once it has been
        away for ``OUTAGE_LIMIT_S``. The change stream, once it is the head, waits up to
        ``timeout_s`` for changes."""
        head = next(iter(self.splits.values()), None)
        if head is not None and head.kind == "cdc":
            if self.stream is None:
                assert self.make_stream is not None, "a cdc split needs a cdc source's reader"
                self.stream = self.make_stream()
            batch = self.stream.fetch(head, max_records, timeout_s)
            if batch is None:
                return []
            self.splits[STREAM_SPLIT_ID] = head.at(batch.end.position)
            return [batch]
        try:
            batches = super().fetch(max_records, timeout_s)
        except TRANSIENT as exc:
            split_id = next(iter(self.splits), "")
            self._drop(split_id)
            now = time.monotonic()
            self._down_since = self._down_since or now
            if now - self._down_since >= OUTAGE_LIMIT_S:
                raise SplitFailed(
                    f"{split_id}: the database has not answered for {OUTAGE_LIMIT_S:.0f} s: {error_words(exc)}",
                    split_id=split_id,
                ) from exc
            return []
        self._down_since = None
        return batches

    def describe(self, split: ChunkSplit, position: int, *, line: int | None = None) -> str:
        """A change stream's position as the LSN it stands for; a chunk's as the base's."""
        if split.kind == "cdc":
            return f"LSN {format_lsn(split.low + position)}"
        return super().describe(split, position, line=line)

    def read_batch(self, split: ChunkSplit, max_records: int) -> RecordBatch:
        stream = self._streams.get(split.split_id)
        if stream is None:
            stream = self._streams[split.split_id] = self._batches(split, max_records)
        try:
            table, finished, note = next(stream)
        except TRANSIENT:
            raise  # the database went away: ``fetch`` waits for it
        except adbc.Error as exc:
            self._drop(split.split_id)
            raise SplitFailed(
                f"{split.split_id}: reading failed: {error_words(exc)}", split_id=split.split_id
            ) from exc
        positions = table.column(POSITION_COLUMN)
        if split.kind == "query":
            end = split.position + table.num_rows
        elif finished and split.kind == "key" and split.high is not None:
            end = split.high - split.low  # read through the chunk's last key
        else:
            end = split.position_of(positions[-1].as_py()) if table.num_rows else split.position
        return RecordBatch(
            split_id=split.split_id,
            start=split.offset,
            end=OffsetEntry(split.split_id, end),
            records=self._records(table, split),
            finished=finished,
            note=note,
        )

    def _records(self, table: pa.Table, split: ChunkSplit) -> pa.Table:
        """The batch in the run's schema: the position column dropped, numerics (which the
        driver hands over as text) cast to their decimals, microseconds to durations; a cdc
        source's snapshot rows with their ``_op`` (``r``) and ``_lsn``."""
        arrays: list[Any] = []
        extra = iter(snapshot_columns(table.num_rows, split.lsn or 0))
        for name, target in zip(self.schema.names, self.schema.types, strict=True):
            if name in CDC_NAMES:
                arrays.append(next(extra))
                continue
            column: Any = table.column(name)
            if isinstance(column.type, pa.ExtensionType):
                column = _storage(column)
            arrays.append(column if column.type == target else column.cast(target))
        return pa.Table.from_arrays(arrays, schema=self.schema)

    def _batches(self, split: ChunkSplit, max_records: int) -> Generator[tuple[pa.Table, bool, str]]:
        """The rest of ``split`` as tables of ``max_records`` rows (the last one may be
        shorter, or empty), each with whether it is the last and the note to give."""
        # Not at the top: with pyarrow.dataset and pandas, 0.6 s of every process's start.
        import adbc_driver_postgresql.dbapi as adbc_pg  # noqa: PLC0415 0.6 s  # pyright: ignore[reportMissingTypeStubs]

        conn = self._connections[split.split_id] = adbc_pg.connect(  # pyright: ignore[reportUnknownMemberType]
            url_with_application(self.url, reader_application_name(split.snapshot or "none"))
        )
        cur: Any = conn.cursor()
        note = self._begin(conn, cur, split.snapshot)
        cur.execute(self.chunk_query.select(split).as_string(None))
        reader = cur.fetch_record_batch()
        pending: list[pa.RecordBatch] = []
        held = 0
        for batch in reader:
            pending.append(batch)
            held += batch.num_rows
            while held >= max_records:
                table = pa.Table.from_batches(pending)
                yield table.slice(0, max_records), False, note
                note = ""
                rest = table.slice(max_records)
                pending, held = rest.to_batches(), rest.num_rows
        table = pa.Table.from_batches(pending, schema=reader.schema)
        yield table, True, note

    def _begin(self, conn: Any, cur: Any, snapshot: str | None) -> str:
        """Starts the chunk's transaction in the run's snapshot; the note to give when the
        snapshot is gone and the chunk reads one of its own."""
        cur.execute(BEGIN)
        if snapshot is None:
            return ""
        try:
            cur.execute(sql.SQL("SET TRANSACTION SNAPSHOT {}").format(sql.Literal(snapshot)).as_string(None))
        except adbc.Error as exc:
            if getattr(exc, "sqlstate", None) not in LOST_SNAPSHOT_STATES:
                raise
            conn.rollback()
            cur.execute(BEGIN)
            return LOST_SNAPSHOT_NOTE
        return ""

    def notify_checkpoint_complete(self, positions: Mapping[str, int]) -> None:
        """Confirms the slot up to the change stream's committed position."""
        split = self.splits.get(STREAM_SPLIT_ID)
        if self.stream is not None and split is not None and STREAM_SPLIT_ID in positions:
            self.stream.confirm(split.low + positions[STREAM_SPLIT_ID])

    def close_split(self, split_id: str) -> None:
        if split_id == STREAM_SPLIT_ID and self.stream is not None:
            self.stream.close()
            self.stream = None
        self._drop(split_id)

    def _drop(self, split_id: str) -> None:
        """Closes the chunk's query and connection; its next read starts a new one."""
        stream = self._streams.pop(split_id, None)
        conn = self._connections.pop(split_id, None)
        if conn is not None:
            with contextlib.suppress(adbc.Error):
                conn.close()  # an unfinished query ends with its connection
        if stream is not None:
            with contextlib.suppress(Exception):  # the query's connection is closed already
                stream.close()


def _storage(column: Any) -> Any:
    """An extension column (the driver's ``numeric``) as its storage (text)."""
    chunks = [chunk.storage for chunk in column.chunks]
    return cast(Any, pa.chunked_array(chunks, type=column.type.storage_type))  # pyright: ignore[reportCallIssue, reportArgumentType]


def url_with_application(url: str, name: str) -> str:
    """``url`` with ``application_name`` set (the snapshot's holder counts its readers so)."""
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query) if k != "application_name"]
    return urlunsplit(parts._replace(query=urlencode([*query, ("application_name", name)])))
