"""The postgres source: a table (or a checked query) read in chunks at one point in time."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, cast

import psycopg
import pyarrow as pa
from psycopg import sql

from connectors.postgres.catalog import (
    chunk_key,
    column_type,
    cursor_condition,
    cursor_marks,
    describe,
    plan_chunks,
    relation,
)
from connectors.postgres.cdc import ChangeStream, default_slot_name, drop_slot, start_slot, with_cdc_columns
from connectors.postgres.config import PostgresSourceConfig, check_table, postgres_target, source_table
from connectors.postgres.connection import TableName, connect, error_words, mask_url, trusted_sql
from connectors.postgres.enumerator import ChunkEnumerator, ChunkPlan
from connectors.postgres.pgoutput import format_lsn, parse_lsn
from connectors.postgres.query import checked_query
from connectors.postgres.reader import ChunkQuery, ChunkReader
from connectors.postgres.snapshot import hold_snapshot
from connectors.postgres.split import ChunkSplit, ChunkSplitSerializer
from connectors.postgres.types import arrow_schema
from source_support.api import Boundedness, Source, SourceReaderContext, SplitEnumeratorContext
from source_support.errors import ConfigError
from source_support.formats import FormatSpec
from source_support.reader_base import SourceReaderBase
from source_support.registry import BuildContext


class PostgresSource(Source[ChunkSplit]):
    """Reads ``table`` (or ``query``) of the database at ``url`` (see the package)."""

    def __init__(
        self,
        *,
        url: str,
        table: TableName | None,
        query: str | None = None,
        key: str | None = None,
        chunk_rows: int = 100_000,
        batch_size: int = 10_000,
        schema: pa.Schema | None = None,
        address_field: str = "source.url",
        patterns: tuple[str, ...] = (),
        reserved: tuple[str, ...] = (),
        hold: bool = True,
        cursor: str | None = None,
        previous_mark: str | None = None,
        slot: str | None = None,
        publication: str | None = None,
        schema_change: str = "fail",
        slot_owned: bool = False,
    ) -> None:
        self.url, self.table, self.key, self.chunk_rows = url, table, key, chunk_rows
        self.query = query
        self.batch_size, self.schema, self.address_field = batch_size, schema, address_field
        self.patterns, self.reserved, self.hold = patterns, reserved, hold
        #: Incremental: the cursor column, and the high mark of the last succeeded run.
        self.cursor, self.previous_mark = cursor, previous_mark
        #: cdc (a slot given): the slot and publication, and the schema-change policy.
        self.slot, self.publication, self.schema_change = slot, publication or slot, schema_change
        #: An earlier run of the flow made the slot (and the flow was not deleted since): a
        #: new run resumes from it, as Debezium does after a stop, instead of refusing it.
        self.slot_owned = slot_owned
        #: A cdc run makes a slot and a publication: a preview may not read it so.
        self.reads_without_trace = slot is None
        self._chunk_query: ChunkQuery | None = None

    @classmethod
    def from_config(
        cls, config: PostgresSourceConfig, fmt: FormatSpec, context: BuildContext
    ) -> PostgresSource:
        if fmt.options.get("schema"):
            raise ConfigError(
                "format.schema", "a postgres source's columns come from the table: leave it out"
            )
        target = postgres_target(config, context.env)
        table = source_table(config, context.env)
        field = "source.model" if config.model else "source.table"
        if table is not None:
            check_table(table, target.patterns, target.reserved, field)
        query = None
        if config.query is not None:
            query, tables = checked_query(config.query)
            for name in tables:
                check_table(name, target.patterns, target.reserved, "source.query")
        return cls(
            url=target.url,
            table=table,
            query=query,
            key=config.key,
            chunk_rows=config.chunk_rows,
            batch_size=context.batch_size,
            schema=context.schema,
            address_field=target.address_field,
            patterns=target.patterns,
            reserved=target.reserved,
            cursor=config.cursor if config.mode == "incremental" else None,
            previous_mark=previous_mark(context.previous_state),
            **cdc_options(config, context, table),
            hold=not context.probe,
        )

    @property
    def boundedness(self) -> Boundedness:
        return Boundedness.CONTINUOUS_UNBOUNDED if self.slot else Boundedness.BOUNDED

    @property
    def split_serializer(self) -> ChunkSplitSerializer:
        return ChunkSplitSerializer()

    def _connect(self) -> psycopg.Connection:
        try:
            return connect(self.url)
        except ConnectionError as exc:
            raise ConfigError(self.address_field, str(exc)) from None

    def _cursor_type(self, conn: psycopg.Connection, oid: int) -> str | None:
        if self.cursor is None:
            return None
        found = column_type(conn, oid, self.cursor)
        if found is None:
            raise ConfigError("source.cursor", f"the table has no column {self.cursor!r}")
        return found

    def _chunking(self, conn: psycopg.Connection) -> tuple[int | None, str | None]:
        """(the table's oid, the chunk key) ; ConfigError naming the field."""
        if self.table is None:
            return None, None
        oid = relation(conn, self.table)
        if oid is None:
            raise ConfigError(
                "source.table", f"{self.table.qualified!r} does not exist in {mask_url(self.url)}"
            )
        try:
            return oid, chunk_key(conn, oid, self.key, "source.key")
        except ValueError as exc:
            raise ConfigError("source.key", str(exc)) from None

    def _plan(self) -> ChunkPlan:
        """The cut of the table, computed inside a freshly exported snapshot that is then
        held for the readers (``connectors.postgres.snapshot``)."""
        if self.slot is not None:
            return self._cdc_plan()
        if self.table is None:
            holder = hold_snapshot(self.url) if self.hold else None
            plan = ChunkPlan("query", 0, 1, 1, 0, holder.snapshot if holder else None)
            if holder is not None:
                holder.start()
            return plan
        if not self.hold:
            with self._connect() as conn:
                return self._table_plan(conn, None)
        holder = hold_snapshot(self.url)
        try:
            plan = self._table_plan(holder.conn, holder.snapshot)
        except BaseException:
            holder.release()
            raise
        holder.start()
        return plan

    def _cdc_plan(self) -> ChunkPlan:
        """The chunks cut in the snapshot a new slot exported at its consistent point, and
        the change stream from there (``connectors.postgres.cdc``)."""
        assert self.table is not None and self.slot is not None and self.publication is not None
        if self.slot_owned:
            resumed = self._resume_plan()
            if resumed is not None:
                return resumed
        try:
            start = start_slot(self.url, self.slot, self.publication, self.table)
        except ConnectionError as exc:
            raise ConfigError(self.address_field, str(exc)) from None
        holder = hold_snapshot(self.url, (start.connection, start.snapshot))
        try:
            with self._connect() as conn:
                conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
                conn.execute(sql.SQL("SET TRANSACTION SNAPSHOT {}").format(sql.Literal(start.snapshot)))
                plan = self._table_plan(conn, start.snapshot)
        except BaseException:
            holder.release()
            drop_slot(self.url, self.slot)
            raise
        holder.start()
        return replace(plan, stream_lsn=start.lsn)

    def _resume_plan(self) -> ChunkPlan | None:
        """The change stream alone, from the slot's confirmed position, if the slot the flow
        owns is still there (None: it is gone, a new one is made with a new snapshot). The
        slot was confirmed up to the last checkpoint the earlier run committed, so nothing
        it did not land is skipped."""
        assert self.slot is not None
        try:
            with self._connect() as conn:
                row = conn.execute(
                    "SELECT confirmed_flush_lsn::text FROM pg_catalog.pg_replication_slots "
                    "WHERE slot_name = %s",
                    (self.slot,),
                ).fetchone()
        except psycopg.Error as exc:
            raise ConfigError(
                self.address_field, f"cannot read {mask_url(self.url)}: {error_words(exc)}"
            ) from None
        if row is None or row[0] is None:
            return None
        return ChunkPlan("key", 0, 1, 0, 0, stream_lsn=parse_lsn(row[0]))

    def _table_plan(self, conn: psycopg.Connection, snapshot: str | None) -> ChunkPlan:
        assert self.table is not None
        oid, key = self._chunking(conn)
        assert oid is not None
        cursor_type = self._cursor_type(conn, oid)
        if self.cursor is None or cursor_type is None:
            return plan_chunks(conn, self.table, oid, key=key, chunk_rows=self.chunk_rows, snapshot=snapshot)
        low = self.previous_mark
        high = cursor_marks(conn, self.table, self.cursor, cursor_type, low)
        if high is None:  # nothing past the mark: one empty chunk, and the mark carried on
            return ChunkPlan("key" if key else "ctid", 0, 1, 1, 0, snapshot, low, None)
        where = cursor_condition(self.cursor, cursor_type, low, high)
        plan = plan_chunks(
            conn, self.table, oid, key=key, chunk_rows=self.chunk_rows, snapshot=snapshot, where=where
        )
        return replace(plan, mark_low=low, mark_high=high)

    def create_enumerator(self, context: SplitEnumeratorContext[ChunkSplit]) -> ChunkEnumerator:
        return ChunkEnumerator(context, plan=self._plan, state=None)

    def restore_enumerator(
        self, context: SplitEnumeratorContext[ChunkSplit], state: dict[str, Any]
    ) -> ChunkEnumerator:
        return ChunkEnumerator(context, plan=self._plan, state=state)

    def chunk_query(self) -> ChunkQuery:
        """The columns and the way chunks are selected (asked of the database once)."""
        if self._chunk_query is None:
            with self._connect() as conn:
                if self.table is None:
                    assert self.query is not None
                    columns = describe(conn, trusted_sql(self.query))
                    self._chunk_query = ChunkQuery(columns, None, None, self.query)
                else:
                    oid, key = self._chunking(conn)
                    assert oid is not None
                    columns = describe(conn, sql.SQL("SELECT * FROM {}").format(self.table.identifier))
                    cursor_type = self._cursor_type(conn, oid)
                    self._chunk_query = ChunkQuery(columns, self.table, key, None, self.cursor, cursor_type)
        return self._chunk_query

    def create_reader(self, context: SourceReaderContext) -> SourceReaderBase[ChunkSplit]:
        reader = ChunkReader(self.url, self.chunk_query(), self.run_schema(), self._change_stream)
        return SourceReaderBase(context, reader, batch_size=self.batch_size)

    def _change_stream(self) -> ChangeStream:
        assert self.table is not None and self.slot is not None and self.publication is not None
        columns = self.chunk_query().columns
        return ChangeStream(
            self.url, self.slot, self.publication, self.table, columns, self.run_schema(), self.schema_change
        )

    def run_schema(self) -> pa.Schema:
        """The run's schema, or the table's columns (and a cdc source's change columns)."""
        return self.schema or self.infer_schema()

    def infer_schema(self) -> pa.Schema:
        schema = arrow_schema(self.chunk_query().columns)
        return with_cdc_columns(schema) if self.slot else schema

    def _wal_lag(self, lsn: int) -> int | None:
        """The change stream's lag: bytes of WAL written past ``lsn`` (None: the database
        cannot be asked now)."""
        try:
            with connect(self.url) as conn:
                row = conn.execute("SELECT pg_current_wal_lsn() - %s::pg_lsn", (format_lsn(lsn),)).fetchone()
        except (psycopg.Error, ConnectionError):
            return None
        return max(0, int(row[0])) if row and row[0] is not None else None

    def release(self, states: Sequence[Mapping[str, Any] | None]) -> None:
        """Drops the cdc slot (a slot left behind holds WAL back until the disk fills) if a
        run of the flow made it: a slot of that name the flow was refused is another's."""
        made = any(made_slot(state) for state in states)
        if self.slot is not None and made:
            try:
                drop_slot(self.url, self.slot)
            except ConnectionError as exc:
                raise ConfigError(self.address_field, str(exc)) from None

    def describe_found(self, splits: Sequence[ChunkSplit]) -> list[str]:
        """The table (or query) and its row estimate (``pg_class.reltuples``), in chunks."""
        what = f"table {self.table}" if self.table is not None else "query"
        rows = sum(split.estimate for split in splits)
        return [f"{what}: about {rows} rows (pg_class.reltuples), {len(splits)} chunks"]

    def check_input(self) -> None:
        """Refuses to start a run whose database cannot be reached, whose table is missing or
        whose chunk key cannot cut it."""
        try:
            self.chunk_query()
        except psycopg.Error as exc:
            raise ConfigError(
                self.address_field, f"cannot read {mask_url(self.url)}: {error_words(exc)}"
            ) from None

    def split_lags(self, splits: Mapping[str, tuple[dict[str, Any], int]]) -> dict[str, int | None]:
        """Rows of each chunk not read yet, of its estimate (a key chunk: its keys past the
        position, at the chunk's density; others: the estimate until finished)."""
        lags: dict[str, int | None] = {}
        for split_id, (payload, position) in splits.items():
            split = ChunkSplitSerializer().deserialize(payload)
            if split.kind == "cdc":
                lags[split_id] = self._wal_lag(split.low + position)
            elif split.kind == "key" and split.high is not None and split.high > split.low:
                left = max(0.0, 1 - position / (split.high - split.low))
                lags[split_id] = round(split.estimate * left)
            else:
                lags[split_id] = split.estimate if position == 0 else None
        return lags


def cdc_options(
    config: PostgresSourceConfig, context: BuildContext, table: TableName | None
) -> dict[str, Any]:
    """The slot, publication and schema-change policy of a cdc config (none otherwise)."""
    if config.mode != "cdc" or table is None:
        return {}
    slot = config.slot or default_slot_name(context.flow_name, table)
    return {
        "slot": slot,
        "publication": config.publication or slot,
        "schema_change": config.schema_change or "fail",
        "slot_owned": any(made_slot(state) for state in context.earlier_states),
    }


def made_slot(state: Mapping[str, Any] | None) -> bool:
    """Whether the run whose enumerator state this is made a cdc slot."""
    plan: Any = (state or {}).get("plan")
    return isinstance(plan, dict) and bool(cast(dict[str, Any], plan).get("stream_lsn"))


def previous_mark(state: Mapping[str, Any] | None) -> str | None:
    """The high mark an incremental run left in its enumerator state (the mark it read up
    to, or the one it carried on when it found nothing new)."""
    plan: Any = (state or {}).get("plan")
    if not isinstance(plan, dict):
        return None
    marks = cast(dict[str, Any], plan)
    mark = marks.get("mark_high") or marks.get("mark_low")
    return mark if isinstance(mark, str) else None
