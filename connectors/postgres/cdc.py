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

Schema changes (a Relation message whose columns differ from the run's): ``fail`` fails the
split naming the column and the LSN; ``ignore`` drops the new column's values (NULL for a
dropped or retyped one) and counts them in the batch's note.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psycopg
import pyarrow as pa
from psycopg import pq, sql

from connectors.postgres import pgoutput
from connectors.postgres.connection import TableName, connect, error_words
from connectors.postgres.pgoutput import UNCHANGED, Value, format_lsn
from connectors.postgres.split import ChunkSplit
from connectors.postgres.types import PgColumn
from source_support.api import OffsetEntry, RecordBatch
from source_support.errors import ConfigError, SplitFailed

SCHEMA_CHANGES = ("fail", "ignore")
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
        self._relations: dict[int, pgoutput.Relation] = {}
        self._ours: set[int] = set()
        self._type_names: dict[int, str] = {}
        self._loaders: dict[int, Callable[[bytes], Any]] = {}
        self._tx: pgoutput.Begin | None = None
        self._seq = 0
        #: (commit LSN, rows) of a transaction cut across batches: skipped when read again.
        self._partial: tuple[int, int] = (0, 0)
        self.ignored: dict[str, int] = {}
        self._down_since: float | None = None

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
        )

    def _read(self, split: ChunkSplit, max_records: int, deadline: float) -> tuple[_Batch, int]:
        position = split.low + split.position
        batch = _Batch([n for n in self.schema.names if n not in CDC_NAMES])
        end = position
        max_bytes = MAX_BATCH_BYTES
        while True:
            if self.cursor is None:
                self._open_peek()
            assert self.cursor is not None
            messages = self.cursor.fetchmany(FETCH_ROWS)
            for (data,) in messages:
                self._peek_rows += 1
                committed = self._message(pgoutput.decode(data), position, batch)
                if committed is not None:
                    end = position = committed
                    if batch.rows >= max_records or batch.bytes >= max_bytes:
                        return batch, end
                elif batch.rows >= HARD_FACTOR * max_records or batch.bytes >= HARD_FACTOR * max_bytes:
                    assert self._tx is not None
                    self._partial = (self._tx.final_lsn, self._seq)
                    return batch, end
            if messages:
                continue
            self._end_peek()
            if batch.rows or end != split.low + split.position or time.monotonic() >= deadline:
                return batch, end
            time.sleep(min(POLL_S, max(0.0, deadline - time.monotonic())))

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
            self._relation(message, tx.final_lsn if tx else 0)
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
        size = sum(len(v) for v in row.values() if isinstance(v, str)) + len(before or "")
        batch.add(op, row, tx.final_lsn, self._seq, tx.commit_time, before, size)
        return None

    def _relation(self, relation: pgoutput.Relation, lsn: int) -> None:
        self._relations[relation.oid] = relation
        if (relation.schema, relation.name) != (self.table.schema, self.table.name):
            return
        self._ours.add(relation.oid)
        types = self._types([c.type_oid for c in relation.columns])
        seen = {c.name: types.get(c.type_oid, "") for c in relation.columns}
        changes: list[tuple[str, str]] = []
        for name, type_name in seen.items():
            if name not in self.columns:
                changes.append((name, "was added"))
            elif self.columns[name].type_name != type_name:
                changes.append((name, f"changed type from {self.columns[name].type_name} to {type_name}"))
        changes += [(name, "was dropped") for name in self.columns if name not in seen]
        if changes and self.policy == "fail":
            name, what = changes[0]
            raise SplitFailed(
                f"column {name!r} of {self.table.qualified} {what} at LSN {format_lsn(lsn)}: "
                "source.schema_change = 'fail' stops the run (set 'ignore' to go on without it)",
                split_id="changes",
            )

    def _types(self, oids: list[int]) -> dict[int, str]:
        missing = [oid for oid in oids if oid not in self._type_names]
        if missing:
            with connect(self.url) as conn:
                for oid, name in conn.execute(
                    "SELECT oid::int8, typname FROM pg_catalog.pg_type WHERE oid = ANY(%s)", (missing,)
                ):
                    self._type_names[oid] = name
        return self._type_names

    def _row(self, oid: int, values: tuple[Value, ...]) -> dict[str, Value]:
        """The tuple as {column: text}, without columns the run does not have (counted)."""
        relation = self._relations[oid]
        row: dict[str, Value] = {}
        for column, value in zip(relation.columns, values, strict=False):
            known = self.columns.get(column.name)
            if known is None or known.type_name != self._type_names.get(column.type_oid):
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
        for oid, name in self._type_names.items():
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
