"""Change data capture: a replication slot's consistent snapshot, then its change stream.

The start (``start_slot``): the publication is made for the table when missing, then the
slot is made over a replication connection with ``CREATE_REPLICATION_SLOT ... LOGICAL
pgoutput (SNAPSHOT 'export')``, which returns the slot's consistent point (an LSN) and
exports the snapshot taken exactly there. The snapshot chunks read that snapshot
(``SET TRANSACTION SNAPSHOT``); the slot decodes every transaction that commits at or after
the consistent point. So the chunks and the change stream meet with no gap and no
duplicate. The replication connection must stay idle for the snapshot to live: a
``SnapshotHolder`` keeps it (watching readers on a second connection) and closes it when
the chunks are read.

The stream (``ChangeStream``) reads the slot through the SQL interface:
``pg_logical_slot_peek_binary_changes`` (nothing consumed) in a server-side cursor, so at
most ``FETCH_ROWS`` messages are on the client at a time, and a batch ends at the first
commit after ``max_records`` rows or ``MAX_BATCH_BYTES`` (mid-transaction only past
``HARD_FACTOR`` times those). The stream split's position is ``P - consistent point``
where every transaction whose commit LSN is below ``P`` has landed: after a transaction,
``P`` is its commit's end LSN. Transactions below ``P`` that a new peek decodes again
(the slot is confirmed only at checkpoints) are skipped. ``confirm`` moves the slot
(``pg_replication_slot_advance``) to a checkpointed ``P`` only: a crash replays from our
checkpoint and never loses a change. A transaction larger than a batch that a *crash*
interrupts is read again from its start (its first rows twice: the one at-least-once case).

Rows: the table's columns, then ``_op`` (``r`` snapshot, ``c``, ``u``, ``d``, ``t``
truncate), ``_lsn`` (the commit LSN of the change's transaction; the consistent point for
``r``), ``_seq`` (its order within the transaction), ``_ts`` (the commit time; NULL for
``r``) and ``_before`` (the old key, or the whole old row under ``REPLICA IDENTITY FULL``,
of an update that sent it, as JSON text). A delete's columns hold its old key (or old row).
Sorting by ``(_lsn, _seq)`` and applying gives the table.

Schema changes (a Relation message whose columns differ from the run's, compared when the
first change of a transaction not landed yet uses it): each is listed on the run (a
``SchemaChange`` at its LSN) whatever the policy. ``fail`` fails the split naming the
column and the LSN; ``ignore`` drops the new column's values (NULL for a dropped or
retyped one) and counts them in the batch's note; ``evolve`` adds a new column to the
run's columns from that change on (nullable, in its own type: the rows before it hold
NULL), lands a dropped column as NULL from then on, and goes on through a retype that
lands as the same type (varchar(n) to text or varchar(m)); a retype that would change the
column's type in the sink (int to bigint, numeric(8,2) to numeric(12,2)) fails the split
naming the column, both types and the LSN: the sink holds the old type already, and
Parquet files of two types under one column are not one table.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import psycopg
import pyarrow as pa
from psycopg import pq, sql

from connectors.postgres import pgoutput
from connectors.postgres.connection import TableName, connect, error_words
from connectors.postgres.pgoutput import UNCHANGED, Value, format_lsn
from connectors.postgres.split import STREAM_SPLIT_ID, ChunkSplit
from connectors.postgres.types import TYPES_QUERY, PgColumn, numeric_modifier
from source_support.api import ADDED, CHANGED_TYPE, MISSING, OffsetEntry, RecordBatch, SchemaChange
from source_support.errors import ConfigError, SplitFailed
from source_support.schema import spark_type

#: Messages held on the client at once (one server-side cursor fetch).
FETCH_ROWS = 2_000
#: Changes one peek decodes at most (it grows when a whole peek was already landed).
PEEK_CHANGES = 50_000
MAX_BATCH_BYTES = 32 * 1024 * 1024
HARD_FACTOR = 4
POLL_S = 0.2
#: How long the stream waits for its database to come back before it fails.
OUTAGE_LIMIT_S = 300.0
#: "replication slot ... is active for PID": another session reads it now.
SLOT_BUSY = "55006"
CDC_FIELDS: tuple[pa.Field[Any], ...] = (
    pa.field("_op", pa.string()),
    pa.field("_lsn", pa.int64()),
    pa.field("_seq", pa.int64()),
    pa.field("_ts", pa.timestamp("us", tz="UTC")),
    pa.field("_before", pa.string()),
)
CDC_NAMES = frozenset(f.name for f in CDC_FIELDS)
TEXT_ARRAY_OID = 1009


def with_cdc_columns(schema: pa.Schema) -> pa.Schema:
    kept: list[pa.Field[Any]] = [
        pa.field(name, kind)
        for name, kind in zip(schema.names, schema.types, strict=True)
        if name not in CDC_NAMES
    ]
    return pa.schema([*kept, *CDC_FIELDS])


def snapshot_columns(rows: int, lsn: int) -> list[pa.Array[Any]]:
    """The cdc columns of ``rows`` snapshot rows read at consistent point ``lsn``."""
    return [
        pa.array(["r"] * rows, pa.string()),
        pa.array([lsn] * rows, pa.int64()),
        pa.array([0] * rows, pa.int64()),
        pa.nulls(rows, pa.timestamp("us", tz="UTC")),
        pa.nulls(rows, pa.string()),
    ]


def default_slot_name(flow_name: str, table: TableName) -> str:
    """``adf_`` and the flow's name (else the table's), as a slot name allows."""
    base = flow_name or f"{table.schema}_{table.name}"
    cleaned = "".join(c if c.isalnum() and c.isascii() else "_" for c in base.lower())
    return ("adf_" + cleaned)[:63]


def ensure_publication(conn: psycopg.Connection, publication: str, table: TableName) -> None:
    """Makes ``publication`` for ``table`` when missing; refuses one that does not publish it."""
    found = conn.execute(
        "SELECT 1 FROM pg_catalog.pg_publication WHERE pubname = %s", (publication,)
    ).fetchone()
    if found is None:
        conn.execute(
            sql.SQL("CREATE PUBLICATION {} FOR TABLE {}").format(
                sql.Identifier(publication), table.identifier
            )
        )
        conn.commit()
        return
    covers = conn.execute(
        "SELECT 1 FROM pg_catalog.pg_publication_tables WHERE pubname = %s AND schemaname = %s AND tablename = %s",
        (publication, table.schema, table.name),
    ).fetchone()
    if covers is None:
        raise ConfigError(
            "source.publication", f"publication {publication!r} does not publish {table.qualified}"
        )


@dataclass
class SlotStart:
    """A fresh slot: its consistent point, the snapshot exported there, and the idle
    replication connection that keeps the snapshot alive."""

    lsn: int
    snapshot: str
    connection: psycopg.Connection


def start_slot(url: str, slot: str, publication: str, table: TableName) -> SlotStart:
    """Makes the publication (when missing) and the slot, exporting its snapshot. A slot of
    that name already there is refused (ConfigError naming ``source.slot``)."""
    with connect(url) as conn:
        if conn.execute("SHOW wal_level").fetchone() != ("logical",):
            raise ConfigError("source.mode", "cdc needs the database's wal_level = logical")
        if slot_exists(conn, slot):
            raise ConfigError(
                "source.slot",
                f"replication slot {slot!r} exists already (another flow's, or left behind: "
                "pg_replication_slots lists them); name another",
            )
        ensure_publication(conn, publication, table)
    replication = psycopg.connect(url, autocommit=True, replication="database", connect_timeout=10)
    command = sql.SQL("CREATE_REPLICATION_SLOT {} LOGICAL pgoutput (SNAPSHOT 'export')").format(
        sql.Identifier(slot)
    )
    result = replication.pgconn.exec_(command.as_bytes(replication))
    if result.status != pq.ExecStatus.TUPLES_OK:
        message = (result.error_message or b"").decode(errors="replace").strip()
        replication.close()
        raise ConfigError("source.slot", f"cannot make replication slot {slot!r}: {message}")
    lsn = pgoutput.parse_lsn((result.get_value(0, 1) or b"").decode())
    snapshot = (result.get_value(0, 2) or b"").decode()
    return SlotStart(lsn, snapshot, replication)


def slot_exists(conn: psycopg.Connection, slot: str) -> bool:
    return (
        conn.execute("SELECT 1 FROM pg_catalog.pg_replication_slots WHERE slot_name = %s", (slot,)).fetchone()
        is not None
    )


def drop_slot(url: str, slot: str) -> bool:
    """Drops ``slot`` if it is there (ending a session that holds it); whether it was."""
    with connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT active_pid FROM pg_catalog.pg_replication_slots WHERE slot_name = %s", (slot,)
        ).fetchone()
        if row is None:
            return False
        if row[0] is not None:
            conn.execute("SELECT pg_terminate_backend(%s)", (row[0],))
        conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
        return True


@dataclass
class _Batch:
    """The rows a fetch gathers, column by column (text forms until ``table``)."""

    names: list[str]
    values: dict[str, list[Any]] = field(default_factory=dict[str, list[Any]])
    meta: dict[str, list[Any]] = field(default_factory=lambda: {f.name: [] for f in CDC_FIELDS})
    rows: int = 0
    bytes: int = 0

    def __post_init__(self) -> None:
        self.values = {name: [] for name in self.names}

    def add(
        self, op: str, row: dict[str, Value], lsn: int, seq: int, ts: Any, before: str | None, size: int
    ) -> None:
        for name in self.names:
            value = row.get(name)
            self.values[name].append(None if value is UNCHANGED else value)
        for key, value in zip(
            ("_op", "_lsn", "_seq", "_ts", "_before"), (op, lsn, seq, ts, before), strict=True
        ):
            self.meta[key].append(value)
        self.rows += 1
        self.bytes += size

    def add_column(self, name: str) -> None:
        """A column evolved in mid-batch: NULL in the rows gathered before it."""
        self.names.append(name)
        self.values[name] = [None] * self.rows


@dataclass
class _Shape:
    """How a Relation's columns meet the run's: whether each column's values are kept, and
    the changes its rows carry (counted on the batch that lands them)."""

    kept: list[bool]
    changes: list[SchemaChange]


class ChangeStream:
    """Reads the change stream of ``slot`` for the stream split (see the module)."""

    def __init__(
        self,
        url: str,
        slot: str,
        publication: str,
        table: TableName,
        columns: list[PgColumn],
        schema: pa.Schema,
        policy: str = "fail",
    ) -> None:
        self.url, self.slot, self.publication, self.table = url, slot, publication, table
        self.columns = {c.name: c for c in columns}
        self.schema = schema
        self.policy = policy
        self.conn: psycopg.Connection | None = None
        self.cursor: psycopg.ServerCursor | None = None
        self.peek_limit = PEEK_CHANGES
        self._peek_new = 0
        self._peek_rows = 0
        self._confirm_conn: psycopg.Connection | None = None
        #: Messages fetched from the peek and not decoded yet: a batch that ends inside a
        #: fetch leaves the rest here for the next batch (dropping them lost those changes).
        self._held: deque[bytes] = deque()
        self._relations: dict[int, pgoutput.Relation] = {}
        self._ours: set[int] = set()
        #: Type oid -> (pg_type.typname, an array's element typname).
        self._type_names: dict[int, tuple[str, str | None]] = {}
        self._loaders: dict[int, Callable[[bytes], Any]] = {}
        self._tx: pgoutput.Begin | None = None
        self._seq = 0
        #: (commit LSN, rows) of a transaction cut across batches: skipped when read again.
        self._partial: tuple[int, int] = (0, 0)
        self.ignored: dict[str, int] = {}
        self._down_since: float | None = None
        #: Each relation's columns as the run takes them (made at its first change not landed).
        self._shapes: dict[int, _Shape] = {}
        #: The schema changes the batch being read carries: (column, kind) -> its change.
        self._seen: dict[tuple[str, str], SchemaChange] = {}
        self._low = 0

    # -- reading -------------------------------------------------------------------------

    def fetch(self, split: ChunkSplit, max_records: int, timeout_s: float) -> RecordBatch | None:
        """The next batch of changes past the split's position; None when nothing came
        within ``timeout_s`` (or the database is away: it is waited for)."""
        deadline = time.monotonic() + timeout_s
        try:
            batch, end = self._read(split, max_records, deadline)
        except (psycopg.OperationalError, ConnectionError) as exc:
            self._close()
            now = time.monotonic()
            self._down_since = self._down_since or now
            if now - self._down_since >= OUTAGE_LIMIT_S:
                raise SplitFailed(
                    f"{split.split_id}: slot {self.slot!r} cannot be read: {error_words(exc)}",
                    split_id=split.split_id,
                ) from exc
            return None
        except psycopg.Error as exc:
            self._close()
            if getattr(exc, "sqlstate", None) == SLOT_BUSY:
                return None
            raise SplitFailed(
                f"{split.split_id}: slot {self.slot!r} cannot be read: {error_words(exc)}",
                split_id=split.split_id,
            ) from exc
        self._down_since = None
        if batch.rows == 0 and end == split.low + split.position:
            return None
        note = ""
        if self.ignored:
            counts = ", ".join(f"{name!r} ({n} values)" for name, n in sorted(self.ignored.items()))
            note = f"schema_change = 'ignore': values dropped of column {counts}"
        return RecordBatch(
            split_id=split.split_id,
            start=split.offset,
            end=OffsetEntry(split.split_id, end - split.low),
            records=self._table(batch),
            note=note,
            schema_changes=list(self._seen.values()),
        )

    def _read(self, split: ChunkSplit, max_records: int, deadline: float) -> tuple[_Batch, int]:
        position = split.low + split.position
        self._low, self._seen = split.low, {}
        batch = _Batch([n for n in self.schema.names if n not in CDC_NAMES])
        end = position
        max_bytes = MAX_BATCH_BYTES
        while True:
            if not self._held:
                if self.cursor is None:
                    self._open_peek()
                assert self.cursor is not None
                self._held.extend(data for (data,) in self.cursor.fetchmany(FETCH_ROWS))
            if not self._held:
                self._end_peek()
                if batch.rows or end != split.low + split.position or time.monotonic() >= deadline:
                    return batch, end
                time.sleep(min(POLL_S, max(0.0, deadline - time.monotonic())))
                continue
            while self._held:
                self._peek_rows += 1
                committed = self._message(pgoutput.decode(self._held.popleft()), position, batch)
                if committed is not None:
                    end = position = committed
                    if batch.rows >= max_records or batch.bytes >= max_bytes:
                        return batch, end
                elif batch.rows >= HARD_FACTOR * max_records or batch.bytes >= HARD_FACTOR * max_bytes:
                    assert self._tx is not None
                    self._partial = (self._tx.final_lsn, self._seq)
                    return batch, end

    def _open_peek(self) -> None:
        if self.conn is None:
            self.conn = connect(self.url, application_name=f"adf-cdc {self.slot}"[:63])
        self.cursor = self.conn.cursor(name="adf_changes")
        self.cursor.execute(
            "SELECT data FROM pg_logical_slot_peek_binary_changes(%s, NULL, %s, "
            "'proto_version', '1', 'publication_names', %s)",
            (self.slot, self.peek_limit, self.publication),
        )
        self._peek_new = self._peek_rows = 0

    def _end_peek(self) -> None:
        """Closes the peek; one that brought nothing new but was full grows the next."""
        if self.cursor is not None:
            with contextlib.suppress(psycopg.Error):
                self.cursor.close()
        self.cursor = None
        if self.conn is not None:
            self.conn.rollback()
        if self._peek_new == 0 and self._peek_rows >= self.peek_limit:
            self.peek_limit *= 2
        elif self._peek_new:
            self.peek_limit = PEEK_CHANGES

    def _message(self, message: pgoutput.Message, position: int, batch: _Batch) -> int | None:
        """Adds a change to ``batch``; the new position when ``message`` ends a transaction."""
        if isinstance(message, pgoutput.Begin):
            self._tx, self._seq = message, 0
            return None
        tx = self._tx
        if isinstance(message, pgoutput.Relation):  # sent once a peek: kept even in a landed one
            self._relations[message.oid] = message
            self._shapes.pop(message.oid, None)
            if (message.schema, message.name) == (self.table.schema, self.table.name):
                self._ours.add(message.oid)
            return None
        if tx is None or tx.final_lsn < position:
            return None  # landed already (or before the slot's first transaction)
        if isinstance(message, pgoutput.Commit):
            self._tx = None
            if self._partial[0] == tx.final_lsn:
                self._partial = (0, 0)
            return message.end_lsn
        row: dict[str, Value] | None = None
        before: str | None = None
        op = ""
        oid = (
            message.relation
            if isinstance(message, pgoutput.Insert | pgoutput.Update | pgoutput.Delete)
            else None
        )
        if oid is not None and oid in self._ours and oid not in self._shapes:
            self._shapes[oid] = self._shape(self._relations[oid], tx.final_lsn, batch)
        if isinstance(message, pgoutput.Insert) and message.relation in self._ours:
            op, row = "c", self._row(message.relation, message.new)
        elif isinstance(message, pgoutput.Update) and message.relation in self._ours:
            op, row = "u", self._row(message.relation, message.new)
            if message.old is not None:
                old = self._row(message.relation, message.old)
                before = json.dumps({k: v for k, v in old.items() if isinstance(v, str)})
        elif isinstance(message, pgoutput.Delete) and message.relation in self._ours:
            op, row = "d", self._row(message.relation, message.old)
        elif isinstance(message, pgoutput.Truncate) and self._ours.intersection(message.relations):
            op, row = "t", {}
        if row is None:
            return None
        self._seq += 1
        self._peek_new += 1
        partial_lsn, partial_rows = self._partial
        if partial_lsn == tx.final_lsn and self._seq <= partial_rows:
            return None  # read before a transient failure cut the transaction
        if oid is not None:
            self._count(oid, tx.final_lsn)
        size = sum(len(v) for v in row.values() if isinstance(v, str)) + len(before or "")
        batch.add(op, row, tx.final_lsn, self._seq, tx.commit_time, before, size)
        return None

    def _shape(self, relation: pgoutput.Relation, lsn: int, batch: _Batch) -> _Shape:
        """Compares ``relation``'s columns with the run's (``lsn``: the first transaction that
        uses it) and applies the policy (see the module): SplitFailed under ``fail``, and
        under ``evolve`` for a retype the sink cannot take."""
        self._types([c.type_oid for c in relation.columns])
        found = [self._pg_column(c) for c in relation.columns]
        fields = self._fields()
        where = f"LSN {format_lsn(lsn)}"
        changes: list[SchemaChange] = []
        refused: tuple[SchemaChange, str] | None = None
        for column in found:
            kind = fields.get(column.name)
            if kind is None:
                change = SchemaChange(column.name, ADDED, "", spark_type(column.arrow_type), self.policy)
                changes.append(change)
                refused = refused or (change, "was added")
                if self.policy == "evolve":
                    self._evolve(column, batch)
                continue
            known = self.columns.get(column.name)
            if kind == column.arrow_type and (known is None or pg_type(known) == pg_type(column)):
                continue
            old = pg_type(known) if known is not None and known.arrow_type == kind else spark_type(kind)
            change = SchemaChange(column.name, CHANGED_TYPE, old, pg_type(column), self.policy)
            changes.append(change)
            what = f"changed type from {old} ({spark_type(kind)}) to {pg_type(column)} ({spark_type(column.arrow_type)})"
            if kind != column.arrow_type and self.policy == "evolve":
                raise SplitFailed(
                    f"column {column.name!r} of {self.table.qualified} {what} at {where}: "
                    "source.schema_change = 'evolve' adds and drops columns but does not change a "
                    "column's type in the sink, which holds the old type already (restart the flow "
                    "from a new snapshot, or set 'ignore' to go on with NULL in it)",
                    split_id=STREAM_SPLIT_ID,
                    schema_changes=[replace(change, position=lsn - self._low, where=where)],
                )
            refused = refused or (change, what)
            if self.policy == "evolve":
                self.columns[column.name] = column  # the same type in the sink: its new loader
        names = {c.name for c in found}
        for name, kind in fields.items():
            if name not in names:
                change = SchemaChange(name, MISSING, spark_type(kind), "", self.policy)
                changes.append(change)
                refused = refused or (change, "was dropped")
        if refused is not None and self.policy == "fail":
            change, what = refused
            raise SplitFailed(
                f"column {change.column!r} of {self.table.qualified} {what} at {where}: "
                "source.schema_change = 'fail' stops the run (set 'evolve' to take it into the sink, "
                "or 'ignore' to go on without it)",
                split_id=STREAM_SPLIT_ID,
                schema_changes=[replace(change, position=lsn - self._low, where=where)],
            )
        fields = self._fields()
        return _Shape([fields.get(c.name) == c.arrow_type for c in found], changes)

    def _fields(self) -> dict[str, pa.DataType]:
        """The run's table columns (the change columns left out) and their Arrow types."""
        return {
            name: kind
            for name, kind in zip(self.schema.names, self.schema.types, strict=True)
            if name not in CDC_NAMES
        }

    def _evolve(self, column: PgColumn, batch: _Batch) -> None:
        """Adds ``column`` to the run's columns, after the table's and before the change columns."""
        self.columns[column.name] = column
        kept = [pa.field(name, kind) for name, kind in self._fields().items()]
        self.schema = pa.schema([*kept, column.field, *CDC_FIELDS])
        batch.add_column(column.name)

    def _count(self, oid: int, lsn: int) -> None:
        """Counts a landed row of relation ``oid`` for each schema change it carries."""
        for change in self._shapes[oid].changes:
            key = (change.column, change.kind)
            seen = self._seen.get(key)
            if seen is None:
                self._seen[key] = replace(change, position=lsn - self._low, records=1)
            else:
                self._seen[key] = replace(seen, records=seen.records + 1)

    def _pg_column(self, column: pgoutput.Column) -> PgColumn:
        """A Relation's column as the snapshot's ``describe`` makes it (numeric precision and
        scale from its type modifier)."""
        type_name, element = self._type_names.get(column.type_oid, ("text", None))
        precision, scale = None, None
        if (element or type_name) == "numeric":
            precision, scale = numeric_modifier(column.type_modifier)
        return PgColumn(column.name, type_name, element, precision, scale)

    def _types(self, oids: list[int]) -> None:
        """Learns the type name (and an array's element type name) of each of ``oids``."""
        missing = [oid for oid in oids if oid not in self._type_names]
        if missing:
            with connect(self.url) as conn:
                for oid, name, element in conn.execute(TYPES_QUERY, (missing,)):
                    self._type_names[oid] = (name, element)

    def _row(self, oid: int, values: tuple[Value, ...]) -> dict[str, Value]:
        """The tuple as {column: text}, without columns the run does not have (counted)."""
        relation = self._relations[oid]
        kept = self._shapes[oid].kept
        row: dict[str, Value] = {}
        for column, keep, value in zip(relation.columns, kept, values, strict=False):
            if not keep:
                if value is not None:
                    self.ignored[column.name] = self.ignored.get(column.name, 0) + 1
                continue
            row[column.name] = value
        return row

    # -- typing --------------------------------------------------------------------------

    def _table(self, batch: _Batch) -> pa.Table:
        arrays: list[Any] = []
        for name, kind in zip(self.schema.names, self.schema.types, strict=True):
            if name in CDC_NAMES:
                arrays.append(pa.array(batch.meta[name], kind))
                continue
            texts = batch.values[name]
            if pa.types.is_string(kind):
                arrays.append(pa.array(texts, kind))
                continue
            load = self._loader(kind, self.columns[name])
            arrays.append(pa.array([None if t is None else load(t.encode()) for t in texts], kind))
        return pa.Table.from_arrays(arrays, schema=self.schema)

    def _loader(self, arrow_type: pa.DataType, column: PgColumn) -> Callable[[bytes], Any]:
        """psycopg's text loader of the column's type (``text[]``'s for a list of strings)."""
        if pa.types.is_list(arrow_type) and pa.types.is_string(arrow_type.value_type):
            oid = TEXT_ARRAY_OID
        else:
            oid = self._oid_of(column.type_name)
        if oid not in self._loaders:
            loader = psycopg.adapters.get_loader(oid, pq.Format.TEXT)
            if loader is None:
                self._loaders[oid] = lambda data: data.decode()
            else:
                self._loaders[oid] = loader(oid, None).load
        return self._loaders[oid]

    def _oid_of(self, type_name: str) -> int:
        for oid, (name, _) in self._type_names.items():
            if name == type_name:
                return oid
        return 25  # text

    # -- confirming ----------------------------------------------------------------------

    def confirm(self, lsn: int) -> None:
        """Moves the slot to ``lsn`` (a checkpointed position); a busy slot or an away
        database is left for the next checkpoint."""
        try:
            if self._confirm_conn is None or self._confirm_conn.closed:
                self._confirm_conn = connect(self.url, autocommit=True, application_name="adf-cdc-confirm")
            row = self._confirm_conn.execute(
                "SELECT confirmed_flush_lsn::text FROM pg_catalog.pg_replication_slots WHERE slot_name = %s",
                (self.slot,),
            ).fetchone()
            if row is None or row[0] is None or pgoutput.parse_lsn(row[0]) >= lsn:
                return
            self._confirm_conn.execute(
                "SELECT pg_replication_slot_advance(%s, %s::pg_lsn)", (self.slot, format_lsn(lsn))
            )
        except (psycopg.Error, ConnectionError):
            if self._confirm_conn is not None:
                with contextlib.suppress(psycopg.Error):
                    self._confirm_conn.close()
            self._confirm_conn = None

    def _close(self) -> None:
        self.cursor = None
        self._held.clear()  # a new peek reads them again from the slot
        self._tx = None
        if self.conn is not None:
            with contextlib.suppress(psycopg.Error):
                self.conn.close()
        self.conn = None

    def close(self) -> None:
        self._close()
        if self._confirm_conn is not None:
            with contextlib.suppress(psycopg.Error):
                self._confirm_conn.close()
            self._confirm_conn = None


def pg_type(column: PgColumn) -> str:
    """The column's PostgreSQL type as a person writes it (``numeric(12,2)``, ``int4[]``)."""
    if column.element is not None:
        return f"{column.element}[]"
    if column.precision is not None:
        return f"{column.type_name}({column.precision},{column.scale or 0})"
    return column.type_name
