"""The conformance kit over the postgres source: on the machine's server, and on a private
cluster that the outage case stops and starts again (a restart while chunks are read)."""

from __future__ import annotations

import psycopg
import pytest
from psycopg import sql

from connectors.postgres.connection import TableName
from connectors.postgres.source import PostgresSource
from source_support.testing import ExternalContext, Record, SourceOptions
from source_support.testing.suite import SourceConformanceSuite
from tests.postgres_server import PrivatePostgres

ROWS_PER_SPLIT = SourceConformanceSuite.records_per_split


class PostgresContext(ExternalContext):
    """One table ``(id bigint primary key, split bigint, text text)``; split i's records are
    rows whose ids the kit numbers in write order, and the source cuts the table into
    chunks of ``records_per_split`` rows (key ranges of the primary key). A record the kit
    ``append``s lands in the table (read by a chunk that has not passed its key yet: a
    bounded snapshot reads the table as it was when the run started, so this case does not
    apply)."""

    def __init__(self, url: str, schema: str, *, server: PrivatePostgres | None = None) -> None:
        self.url, self.server = url, server
        self.table = TableName(schema, "items")
        self.written: list[Record] = []
        with self.connect() as conn:
            conn.execute(
                sql.SQL("CREATE TABLE {} (id bigint PRIMARY KEY, split bigint, text text)").format(
                    self.table.identifier
                )
            )

    def connect(self) -> psycopg.Connection:
        return psycopg.connect(self.url, autocommit=True)

    def splits_wanted(self, count: int) -> None:
        self.splits = count

    def write(self, split_index: int, records: list[Record]) -> list[Record]:
        with self.connect() as conn, conn.cursor() as cur:
            cur.executemany(
                sql.SQL("INSERT INTO {} (id, split, text) VALUES (%s, %s, %s)").format(self.table.identifier),
                [(r["id"], r["split"], r["text"]) for r in records],
            )
            cur.execute(sql.SQL("ANALYZE {}").format(self.table.identifier))
        self.written += records
        return records

    def source(self, options: SourceOptions) -> PostgresSource:
        return PostgresSource(
            url=self.url, table=self.table, chunk_rows=ROWS_PER_SPLIT, batch_size=options.batch_size
        )

    def expected(self) -> list[Record]:
        return list(self.written)

    def stop_system(self) -> None:
        if self.server is None:
            super().stop_system()
        else:
            self.server.stop()

    def start_system(self) -> None:
        if self.server is None:
            super().start_system()
        else:
            self.server.start()


class TestPostgresConformance(SourceConformanceSuite):
    @pytest.fixture()
    def external_context(self, pg_url, schema):
        return PostgresContext(pg_url, schema)


class TestPostgresRestartConformance(SourceConformanceSuite):
    """Only the case that restarts PostgreSQL, on the private cluster."""

    @pytest.fixture()
    def external_context(self, private_postgres):
        with private_postgres.connect() as conn:
            conn.execute("DROP SCHEMA IF EXISTS kit CASCADE")
            conn.execute("CREATE SCHEMA kit")
        return PostgresContext(private_postgres.url, "kit", server=private_postgres)

    def test_the_external_system_going_away_and_coming_back_loses_nothing(self, external_context):
        super().test_the_external_system_going_away_and_coming_back_loses_nothing(external_context)


# The restart class runs only its restart case: the others are TestPostgresConformance's.
for _name in dir(SourceConformanceSuite):
    if (
        _name.startswith("test_")
        and _name != "test_the_external_system_going_away_and_coming_back_loses_nothing"
    ):
        setattr(TestPostgresRestartConformance, _name, None)
