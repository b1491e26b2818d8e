"""Reads chunks: one binary COPY per chunk (and per resume), cut into Arrow batches.

A chunk is read by ``COPY (SELECT ... ORDER BY key) TO STDOUT (FORMAT binary)`` in a
REPEATABLE READ, READ ONLY transaction that imports the run's exported snapshot. Rows are
turned into an Arrow batch every ``max_records`` rows, so a chunk is never held whole; the
COPY stays open between batches of a slice (its connection is the chunk's own) and is
closed, connection and all, when the chunk is dropped or the reader closes. A resumed
chunk starts after its last landed key (``ChunkSplit.resume_after``): what landed before
a SIGKILL is not read again.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass

import psycopg
import pyarrow as pa
from psycopg import sql

from connectors.postgres.catalog import POSITION_COLUMN
from connectors.postgres.connection import TableName, connect, error_words
from connectors.postgres.snapshot import reader_application_name
from connectors.postgres.split import LINE_BITS, ChunkSplit
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

    def select(self, split: ChunkSplit) -> sql.Composable:
        """The SELECT of what is left of ``split``, its last column the row's position."""
        after = split.resume_after
        if self.query is not None:
            cols = sql.SQL(", ").join(c.select_expression("q") for c in self.columns)
            return sql.SQL("SELECT {}, 0::int8 AS {} FROM ({}) AS q OFFSET {}").format(
                cols, sql.Identifier(POSITION_COLUMN), sql.SQL(self.query), sql.Literal(split.position)
            )
        assert self.table is not None
        cols = sql.SQL(", ").join(c.select_expression() for c in self.columns)
        if self.key is not None:
            key = sql.Identifier(self.key)
            conditions = [
                sql.SQL("{} >= {}").format(key, sql.Literal(split.low if after is None else after + 1))
            ]
            if split.high is not None:
                conditions.append(sql.SQL("{} < {}").format(key, sql.Literal(split.high)))
            position: sql.Composable = sql.SQL("{}::int8").format(key)
            order: sql.Composable = key
        else:
            start = f"({split.low},0)" if after is None else _tid(after)
            conditions = [
                sql.SQL("ctid {} {}::tid").format(sql.SQL(">=" if after is None else ">"), sql.Literal(start))
            ]
            if split.high is not None:
                conditions.append(sql.SQL("ctid < {}::tid").format(sql.Literal(f"({split.high},0)")))
            position = sql.SQL(
                "(((ctid::text::point)[0])::int8 << {}) + ((ctid::text::point)[1])::int8"
            ).format(sql.Literal(LINE_BITS))
            order = sql.SQL("ctid")
        return sql.SQL("SELECT {}, {} AS {} FROM {} WHERE {} ORDER BY {}").format(
            cols,
            position,
            sql.Identifier(POSITION_COLUMN),
            self.table.identifier,
            sql.SQL(" AND ").join(conditions),
            order,
        )

    @property
    def copy_types(self) -> list[str]:
        types = [
            "text[]" if c.element and c.cast_to_text else "text" if c.cast_to_text else _copy_type(c)
            for c in self.columns
        ]
        return [*types, "int8"]


def _copy_type(column: PgColumn) -> str:
    return f"{column.element}[]" if column.element is not None else column.type_name


def _tid(encoded: int) -> str:
    return f"({encoded >> LINE_BITS},{encoded & ((1 << LINE_BITS) - 1)})"


class ChunkReader(SequentialSplitReader[ChunkSplit]):
    """Reads the held chunks one after the other (``SequentialSplitReader``)."""

    def __init__(self, url: str, chunk_query: ChunkQuery, schema: pa.Schema | None = None) -> None:
        super().__init__()
        self.url = url
        self.chunk_query = chunk_query
        self.schema = schema or arrow_schema(chunk_query.columns)
        self._streams: dict[str, Iterator[tuple[list[tuple[object, ...]], bool, str]]] = {}
        self._connections: dict[str, psycopg.Connection] = {}
        #: When the database stopped answering (None: it answers).
        self._down_since: float | None = None

    def fetch(self, max_records: int, timeout_s: float) -> list[RecordBatch]:
        """The next batch of the head chunk; nothing while the database is away (the chunk
        resumes after its last batch when it is back), and ``SplitFailed`` once it has been
        away for ``OUTAGE_LIMIT_S``."""
        try:
            batches = super().fetch(max_records, timeout_s)
        except (psycopg.OperationalError, ConnectionError) as exc:
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

    def read_batch(self, split: ChunkSplit, max_records: int) -> RecordBatch:
        stream = self._streams.get(split.split_id)
        if stream is None:
            stream = self._streams[split.split_id] = self._rows(split, max_records)
        try:
            rows, finished, note = next(stream)
        except psycopg.OperationalError:
            raise  # the database went away: ``fetch`` waits for it
        except psycopg.Error as exc:
            self._drop(split.split_id)
            raise SplitFailed(
                f"{split.split_id}: reading failed: {error_words(exc)}", split_id=split.split_id
            ) from exc
        if split.kind == "query":
            end = split.position + len(rows)
        elif finished and split.kind == "key" and split.high is not None:
            end = split.high - split.low  # read through the chunk's last key
        else:
            end = split.position_of(rows[-1][-1]) if rows else split.position
        return RecordBatch(
            split_id=split.split_id,
            start=split.offset,
            end=OffsetEntry(split.split_id, end),
            records=self._table(rows),
            finished=finished,
            note=note,
        )

    def _table(self, rows: list[tuple[object, ...]]) -> pa.Table:
        width = len(self.chunk_query.columns)
        columns = list(zip(*rows, strict=True)) if rows else [() for _ in range(width + 1)]
        arrays = [pa.array(columns[i], type=field.type) for i, field in enumerate(self.schema)]
        return pa.Table.from_arrays(arrays, schema=self.schema)

    def _rows(
        self, split: ChunkSplit, max_records: int
    ) -> Iterator[tuple[list[tuple[object, ...]], bool, str]]:
        conn = self._connections[split.split_id] = connect(
            self.url, application_name=reader_application_name(split.snapshot or "none")
        )
        note = self._begin(conn, split.snapshot)
        query = sql.SQL("COPY ({}) TO STDOUT (FORMAT binary)").format(self.chunk_query.select(split))
        with conn.cursor() as cur, cur.copy(query) as copy:
            copy.set_types(self.chunk_query.copy_types)
            rows: list[tuple[object, ...]] = []
            for row in copy.rows():
                rows.append(row)
                if len(rows) >= max_records:
                    yield rows, False, note
                    rows, note = [], ""
            yield rows, True, note
        conn.commit()

    def _begin(self, conn: psycopg.Connection, snapshot: str | None) -> str:
        """Starts the chunk's transaction in the run's snapshot; the note to give when the
        snapshot is gone and the chunk reads one of its own."""
        conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        if snapshot is None:
            return ""
        try:
            conn.execute(sql.SQL("SET TRANSACTION SNAPSHOT {}").format(sql.Literal(snapshot)))
        except psycopg.Error as exc:
            if exc.sqlstate not in LOST_SNAPSHOT_STATES:
                raise
            conn.rollback()
            conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            return LOST_SNAPSHOT_NOTE
        return ""

    def close_split(self, split_id: str) -> None:
        self._drop(split_id)

    def _drop(self, split_id: str) -> None:
        """Closes the chunk's COPY and connection; its next read starts a new one."""
        stream = self._streams.pop(split_id, None)
        conn = self._connections.pop(split_id, None)
        if conn is not None:
            with contextlib.suppress(psycopg.Error):
                conn.close()  # an unfinished COPY ends with its connection
        if stream is not None:
            with contextlib.suppress(Exception):  # the COPY's connection is closed already
                stream.close()
