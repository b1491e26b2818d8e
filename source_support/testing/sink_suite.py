"""The cases every sink passes (Flink ``SinkTestSuiteBase``), on a real local Spark session.

A sink's tests subclass ``SinkConformanceSuite`` and give it a ``SinkContext`` through the
``sink_context`` fixture: the sink's connector, a config for a fresh target, and a plain
reader of what the target holds (pyarrow over its files, ``XRANGE`` over its stream)::

    class TestParquetSink(SinkConformanceSuite):
        @pytest.fixture()
        def sink_context(self, tmp_path):
            return FilesSinkContext(tmp_path, "parquet")

The cases call the connector's own ``write`` and ``append`` with Spark DataFrames, and the
caller's fence as a ``publish`` callable that accepts, refuses or crashes: a bounded run
replaces the sink whole (or, for a stream, adds its rows once per run) and leaves the old
content intact when it fails before it publishes; a stream's epoch is added once whatever
attempts repeat or crash between staging and publishing; an aborted attempt leaves nothing
visible; the rows read back have the declared columns, types and values.

The ``spark`` fixture is a small local session (one core, no UI), shared by the process;
a test suite with a session of its own overrides the fixture.
"""

from __future__ import annotations

import datetime
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import DataFrame, SparkSession

from source_support.registry import Environment, Publish, SinkConnector
from source_support.typed_arrow import fields_of

Record = dict[str, Any]

#: The rows' declared schema, in Spark's words and in Arrow's.
DDL = "id BIGINT, name STRING, amount DOUBLE, day DATE, at TIMESTAMP"
SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("name", pa.string()),
        ("amount", pa.float64()),
        ("day", pa.date32()),
        ("at", pa.timestamp("us", tz="UTC")),
    ]
)
_UTC = datetime.UTC


def rows(first: int, count: int) -> list[Record]:
    """``count`` rows of ids ``first``...; every fifth has nulls where a column may have one."""
    out: list[Record] = []
    for n in range(first, first + count):
        empty = n % 5 == 4
        out.append(
            {
                "id": n,
                "name": None if empty else f"name-{n}",
                "amount": None if empty else n * 1.25,
                "day": None if empty else datetime.date(2024, 1, 1) + datetime.timedelta(days=n),
                "at": None if empty else datetime.datetime(2024, 1, 1, 12, 0, n % 60, 1000 * n, tzinfo=_UTC),
            }
        )
    return out


def from_text(records: Sequence[Mapping[str, Any]], schema: pa.Schema = SCHEMA) -> pa.Table:
    """Records whose values a sink keeps as text or JSON (``"2024-01-02"``, ``"1.5"``), as
    ``schema`` types them: each column's values are cast to the declared type, so a value
    written in a form its type does not read back fails here."""
    columns: list[pa.Array[Any]] = []
    for column in fields_of(schema):
        values = [record.get(column.name) for record in records]
        typed: pa.Array[Any] = pa.array(values).cast(column.type)  # a column of nulls casts too
        columns.append(typed)
    return pa.Table.from_arrays(columns, schema=schema)


class SinkContext(ABC):
    """A sink under test: its connector, a fresh target, and a plain reader of that target."""

    #: How a bounded run writes: ``"replace"`` (the target whole, e.g. a directory) or
    #: ``"append"`` (each run's rows added once, e.g. a stream).
    bounded_writes: str = "replace"
    #: Whether the sink keeps each column's type (Parquet); one that keeps text (CSV, JSON
    #: lines, a stream's entries) is read back through ``from_text``.
    keeps_types: bool = False

    @property
    @abstractmethod
    def connector(self) -> SinkConnector:
        """The sink type as registered."""

    @property
    @abstractmethod
    def env(self) -> Environment: ...

    @abstractmethod
    def config(self) -> dict[str, Any]:
        """The validated ``[sink]`` table (without ``type``) of the target."""

    @abstractmethod
    def read(self) -> pa.Table:
        """What the target holds as a plain reader sees it (complete files or entries,
        never staging), with the columns it has; empty (no columns) when there is nothing."""

    def close(self) -> None:  # noqa: B027 - most contexts hold nothing to release
        """Removes what the test wrote."""


class Crash(Exception):
    """A crash of the process that publishes, simulated by the fence."""


def accept(rows: int, swap: Callable[[], object]) -> bool:
    """The fence of an attempt that may publish."""
    swap()
    return True


def refuse(rows: int, swap: Callable[[], object]) -> bool:
    """The fence of a stale or aborted attempt."""
    return False


def crash_before_swap(rows: int, swap: Callable[[], object]) -> bool:
    raise Crash("the process died after staging, before it published")


def crash_after_swap(rows: int, swap: Callable[[], object]) -> bool:
    swap()
    raise Crash("the process died after it published, before its fence recorded it")


def local_spark() -> SparkSession:
    """The process's Spark session if it has one, else a small local one (made on the first
    call, in the test process: never at import)."""
    return SparkSession.getActiveSession() or (
        SparkSession.builder.master("local[1]")
        .appName("sink-conformance")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "1")
        .getOrCreate()
    )


def frozen(table: pa.Table) -> Counter[tuple[tuple[str, Any], ...]]:
    return Counter(tuple(sorted(record.items())) for record in table.to_pylist())


class SinkConformanceSuite:
    """The sink cases; a subclass provides the ``sink_context`` fixture."""

    @pytest.fixture()
    def sink_context(self) -> Iterator[SinkContext]:
        raise NotImplementedError("a SinkConformanceSuite subclass provides the sink_context fixture")

    @pytest.fixture()
    def spark(self) -> SparkSession:
        return local_spark()

    # What the cases are made of.

    def frame(self, spark: SparkSession, first: int, count: int, *, failing: bool = False) -> DataFrame:
        """The rows as a DataFrame of the declared schema; ``failing``: one whose last row
        fails as Spark computes it (the write fails before anything is published)."""
        df = spark.createDataFrame([tuple(r.values()) for r in rows(first, count)], DDL).coalesce(1)
        if failing:
            last = first + count - 1
            df = df.selectExpr(
                f"IF(id = {last}, CAST(raise_error('a row that cannot be computed') AS BIGINT), id) AS id",
                "name",
                "amount",
                "day",
                "at",
            )
        return df

    def write(self, context: SinkContext, df: DataFrame, attempt_key: str, publish: Publish = accept) -> bool:
        return context.connector.write(
            df, context.config(), attempt_key=attempt_key, publish=publish, env=context.env
        )

    def append(self, context: SinkContext, df: DataFrame, epoch_key: str, publish: Publish = accept) -> bool:
        append = context.connector.append
        if append is None:
            pytest.skip(f"the {context.connector.type} sink takes no stream")
        return append(df, context.config(), epoch_key=epoch_key, publish=publish, env=context.env)

    def assert_holds(self, context: SinkContext, expected: list[Record], what: str) -> None:
        """The sink holds ``expected``, each row once (order aside), read back typed."""
        table = context.read()
        if not expected or not table.num_rows:
            assert table.num_rows == len(expected), (
                f"{what}: the sink holds {table.num_rows} rows, not {len(expected)}"
            )
            return
        table = (
            table.select(SCHEMA.names).cast(SCHEMA) if context.keeps_types else from_text(table.to_pylist())
        )
        got, wanted = frozen(table), frozen(pa.Table.from_pylist(expected, schema=SCHEMA))
        missing, extra = wanted - got, got - wanted
        assert got == wanted, (
            f"{what}: {sum(missing.values())} rows missing (e.g. {list(missing)[:2]}), "
            f"{sum(extra.values())} extra or repeated (e.g. {list(extra)[:2]})"
        )

    # The cases.

    def test_a_bounded_run_replaces_the_sink_whole(
        self, sink_context: SinkContext, spark: SparkSession
    ) -> None:
        assert self.write(sink_context, self.frame(spark, 0, 6), "run1-1")
        self.assert_holds(sink_context, rows(0, 6), "after the first run")

        assert self.write(sink_context, self.frame(spark, 100, 4), "run2-1")

        if sink_context.bounded_writes == "replace":
            self.assert_holds(sink_context, rows(100, 4), "a second run replaces the first's rows")
        else:
            self.assert_holds(sink_context, rows(0, 6) + rows(100, 4), "a second run adds its rows")
            self.write(sink_context, self.frame(spark, 100, 4), "run2-2")
            self.assert_holds(
                sink_context, rows(0, 6) + rows(100, 4), "another attempt of a run adds nothing"
            )

    def test_a_run_that_fails_before_it_publishes_leaves_the_old_content(
        self, sink_context: SinkContext, spark: SparkSession
    ) -> None:
        assert self.write(sink_context, self.frame(spark, 0, 6), "run1-1")

        with pytest.raises(Exception, match="a row that cannot be computed"):
            self.write(sink_context, self.frame(spark, 100, 4, failing=True), "run2-1")
        self.assert_holds(sink_context, rows(0, 6), "after a write that failed")
        with pytest.raises(Crash):
            self.write(sink_context, self.frame(spark, 100, 4), "run2-2", crash_before_swap)
        self.assert_holds(sink_context, rows(0, 6), "after a crash before the publish")

        assert self.write(sink_context, self.frame(spark, 100, 4), "run2-3")
        expected = rows(100, 4) if sink_context.bounded_writes == "replace" else rows(0, 6) + rows(100, 4)
        self.assert_holds(sink_context, expected, "after the attempt that published")

    def test_an_aborted_attempt_leaves_nothing_visible(
        self, sink_context: SinkContext, spark: SparkSession
    ) -> None:
        df = self.frame(spark, 0, 6)

        assert not self.write(sink_context, df, "run1-1", refuse)
        self.assert_holds(sink_context, [], "after a refused bounded write")
        assert not self.append(sink_context, df, "stream1-000001", refuse)
        self.assert_holds(sink_context, [], "after a refused epoch")

    def test_a_stream_epoch_is_added_once_whatever_attempts_repeat_or_crash(
        self, sink_context: SinkContext, spark: SparkSession
    ) -> None:
        first, second, third = self.frame(spark, 0, 5), self.frame(spark, 10, 5), self.frame(spark, 20, 5)

        self.append(sink_context, first, "stream1-000001")
        self.append(sink_context, first, "stream1-000001")  # the same epoch again
        self.assert_holds(sink_context, rows(0, 5), "an epoch appended twice")
        with pytest.raises(Crash):
            self.append(sink_context, second, "stream1-000002", crash_before_swap)
        self.assert_holds(sink_context, rows(0, 5), "an epoch that crashed before it published")
        self.append(sink_context, second, "stream1-000002")
        with pytest.raises(Crash):
            self.append(sink_context, third, "stream1-000003", crash_after_swap)
        self.append(sink_context, third, "stream1-000003")

        self.assert_holds(sink_context, rows(0, 5) + rows(10, 5) + rows(20, 5), "after retried epochs")

    def test_the_rows_read_back_have_the_declared_schema(
        self, sink_context: SinkContext, spark: SparkSession
    ) -> None:
        self.write(sink_context, self.frame(spark, 0, 10), "run1-1")

        table = sink_context.read()
        assert sorted(table.column_names) == sorted(SCHEMA.names), f"columns {table.column_names}"
        if sink_context.keeps_types:
            for field in fields_of(SCHEMA):
                kept = fields_of(table.schema)[table.schema.get_field_index(field.name)].type
                assert _same_kind(kept, field.type), f"{field.name}: declared {field.type}, written {kept}"
        self.assert_holds(sink_context, rows(0, 10), "the rows written")


def _same_kind(written: pa.DataType, declared: pa.DataType) -> bool:
    """Whether a type read back is the declared one, up to its width or unit (Spark writes
    Parquet timestamps as INT96, which Arrow reads in nanoseconds without a zone)."""
    kinds = (
        pa.types.is_integer,
        pa.types.is_floating,
        pa.types.is_string,
        pa.types.is_date,
        pa.types.is_timestamp,
    )
    return any(kind(written) and kind(declared) for kind in kinds)
