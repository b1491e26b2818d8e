"""The sink kit over the postgres sink in each mode, against a real PostgreSQL, on a local
Spark session: the kit's rows are read back with psycopg, typed as the table holds them."""

from __future__ import annotations

from typing import Any

import psycopg
import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from source_support.errors import ConfigError
from source_support.registry import SINKS, Environment, SinkConnector
from source_support.testing.sink_suite import SinkConformanceSuite, SinkContext
from tests.connectors.postgres.conftest import postgres_url


class PostgresSinkContext(SinkContext):
    """The table ``<schema>.kit`` made by the sink (``create = true``); a plain reader
    selects it (nothing when it does not exist yet)."""

    keeps_types = True

    def __init__(self, schema: str, env: Environment, mode: str) -> None:
        self.schema, self._env, self.mode = schema, env, mode
        self.bounded_writes = "replace" if mode == "replace" else "append"

    @property
    def connector(self) -> SinkConnector:
        return SINKS["postgres"]

    @property
    def env(self) -> Environment:
        return self._env

    def config(self) -> dict[str, Any]:
        table = {"url": postgres_url(), "table": f"{self.schema}.kit", "mode": self.mode, "create": True}
        if self.mode == "upsert":
            table["key"] = ["id"]
        return self.connector.validate(table, self._env)

    def read(self) -> pa.Table:
        with psycopg.connect(postgres_url()) as conn:
            exists = conn.execute("SELECT to_regclass(%s)", (f"{self.schema}.kit",)).fetchone()
            if exists is None or exists[0] is None:
                return pa.table({})
            cursor = conn.execute(f"SELECT * FROM {self.schema}.kit")
            names = [d.name for d in cursor.description or []]
            rows = cursor.fetchall()
        table = (
            pa.Table.from_pylist([dict(zip(names, r, strict=True)) for r in rows]) if rows else pa.table({})
        )
        if rows and "at" in names:  # psycopg gives timestamptz in the session's zone: the same instants
            at = table["at"].cast(pa.timestamp("us", tz="UTC"))
            table = table.set_column(names.index("at"), "at", at)
        return table


class _PostgresKit(SinkConformanceSuite):
    # Each case runs Spark jobs and a COPY (3-10 s each in the fast lane): the whole suite
    # runs the kit; the fast lane has the sink's own tests (test_sink.py).
    pytestmark = pytest.mark.slow
    mode = ""

    @pytest.fixture()
    def sink_context(self, pg_schema, pg_env):
        return PostgresSinkContext(pg_schema, pg_env, self.mode)


class TestReplaceMode(_PostgresKit):
    mode = "replace"

    def test_an_aborted_attempt_leaves_nothing_visible(self, sink_context, spark):
        assert not self.write(sink_context, self.frame(spark, 0, 6), "run1-1", lambda rows, swap: False)
        self.assert_holds(sink_context, [], "after a refused bounded write")

    def test_a_stream_epoch_is_added_once_whatever_attempts_repeat_or_crash(
        self, sink_context: SinkContext, spark: SparkSession
    ) -> None:
        """A stream's epochs are appended or upserted: replace is refused for them, naming the field."""
        with pytest.raises(ConfigError, match="sink.mode"):
            self.append(sink_context, self.frame(spark, 0, 5), "stream1-000001")


class TestAppendMode(_PostgresKit):
    mode = "append"


class TestUpsertMode(_PostgresKit):
    mode = "upsert"
