"""The ``postgres`` sink: a table written exactly once per run or stream epoch.

Every attempt copies its rows (binary ``COPY``, built from Arrow: ``binary_copy``) into a
staging table of its own, then the caller's fence (``publish``) lets one transaction move
them into the table and record the run's or the epoch's key in the ledger (``ledger``): an
attempt that repeats, or that crashed after its commit, finds its key and adds nothing.
``replace`` deletes the old rows in that same transaction, so readers see the old rows or
the new ones, never a mix, and a run that fails leaves the old rows. A stream's epochs are
appended or upserted, each once.

A Spark result is copied partition by partition in Spark's own workers (``mapInArrow``):
memory holds one Arrow batch per partition, whatever the output's size. Landed Parquet files
(the identity transform) are copied batch by batch without Spark, over two connections at
once. An ``append`` or a ``replace`` of landed files into a table whose columns have the
types the rows are sent in skips the staging table (``direct``): one COPY into the table
itself, in the transaction that the fence commits with the ledger row. The staging table
holds each column in the type it is sent in (a decimal with its precision and scale), and
the move casts only the columns whose type differs from the target's; it records the row
count taken after the COPY, without counting again.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from dataclasses import dataclass, replace
from itertools import chain
from typing import TYPE_CHECKING, Any, Self, cast

import psycopg
import pyarrow as pa
import pyarrow.parquet as pq
from psycopg import errors

from connectors.postgres.catalog import relation, row_estimate
from connectors.postgres.connection import (
    CONNECTION_KIND,
    TableName,
    error_words,
    mask_url,
    parse_table_name,
    qualified_key,
    table_refusal,
    validate_url,
)
from connectors.postgres.connection import connect as connect_to
from connectors.postgres.ddl import check_key, check_output, own_table_refusal, table_columns
from connectors.postgres.direct import publish_direct
from connectors.postgres.ledger import (
    CommitKey,
    Mode,
    Staging,
    ensure_ledger,
    move,
    staged_bytes,
    sweep_staging,
)
from source_support.config import ConfigBase, connection_field, option
from source_support.errors import ConfigError
from source_support.registry import Environment, Publish, SinkConnector

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger("connectors.postgres")

MODES = ("replace", "append", "upsert")
#: The most Spark tasks (each a connection and a COPY) that copy a result into staging: a
#: shuffle's 200 small partitions would each pay for a connection and a transaction.
COPY_PARTITIONS = 8
#: Rows per Arrow batch read from landed files and copied.
BATCH_ROWS = 65_536
#: The connections that copy landed files into staging at once (each file a COPY of its
#: own): the database parses one COPY per backend, so two keep two cores busy.
STAGE_CONNECTIONS = 2
#: A test's hook: with this set to a file path, an attempt creates that file once its rows
#: are staged (or, on the direct path, copied into the table in its open transaction) and
#: waits there, before its fence and the commit, until it is killed.
PAUSE_BEFORE_MOVE_ENV = "DATAFLOW_TEST_POSTGRES_SINK_PAUSE"


class PostgresSinkConfig(ConfigBase, section="sink"):
    """A validated ``[sink]`` table of a postgres sink."""

    connection: str | None = connection_field(CONNECTION_KIND)
    url: str | None = option(
        "The database, as postgres://user:password@host:5432/dbname (the password is a secret); "
        "for staff and the operator only (others name a connection). Left out with no connection: the "
        "deployment's own database when it is PostgreSQL (staff and the operator only).",
        default=None,
        secret="url",
        example="postgres://app@127.0.0.1:5432/shop",
        address=CONNECTION_KIND,
    )
    table: str | None = option(
        "The table to write, as schema.table (a bare name is in public).",
        default=None,
        example="analytics.order_totals",
        scoped=True,
    )
    model: str | None = option(
        'Instead of table: a Django model ("app_label.ModelName"), whose table and database are written.',
        default=None,
        example="shop.OrderTotal",
    )
    mode: str = option(
        "replace: each bounded run's rows replace the table's in one transaction; append: each run's "
        "or stream epoch's rows are added once; upsert: inserted, or updating the row of the same key.",
        choices=MODES,
    )
    key: list[str] = option(
        "upsert: the columns of the table's primary key or unique index (ON CONFLICT (key) DO UPDATE).",
        default=[],
        example=["customer"],
    )
    create: bool = option(
        "Whether a missing table is created from the output's columns and types (upsert: with the key as "
        "its primary key), in the transaction that first writes it.",
        default=False,
    )

    def validate(self, env: Environment) -> Self:
        if (self.table is None) == (self.model is None):
            raise ConfigError("sink.table", "give sink.table or sink.model (one of them)")
        if self.connection is not None and not self.connection.strip():
            raise ConfigError("sink.connection", "must name a connection")
        if self.connection is not None and self.url is not None:
            raise ConfigError("sink.connection", "give sink.connection or sink.url, not both")
        if self.connection is None and self.url is None and self.model is None and not env.database_url:
            raise ConfigError(
                "sink.url",
                "is required: the deployment's own database is not PostgreSQL (or name a connection)",
            )
        config = self
        if self.url is not None:
            config = replace(config, url=validate_url(self.url, "sink.url"))
        if self.table is not None:
            name = parse_table_name(self.table, "sink.table")
            check_sink_table(name, (), env.reserved_tables, "sink.table")
            config = replace(config, table=name.qualified)
        if self.model is not None:
            model = env.model_table(self.model, "sink.model")
            check_sink_table(TableName(model.schema, model.name), (), env.reserved_tables, "sink.model")
        if self.mode == "upsert" and not self.key:
            raise ConfigError("sink.key", "is required with mode upsert: the columns a row is found by")
        if self.mode != "upsert" and self.key:
            raise ConfigError("sink.key", f"is for mode upsert only (mode is {self.mode})")
        if len(set(self.key)) != len(self.key) or not all(self.key):
            raise ConfigError("sink.key", "must list distinct column names")
        return config


def check_sink_table(
    table: TableName, patterns: tuple[str, ...], reserved: tuple[str, ...], field_name: str
) -> None:
    """Refuses the sink's own tables, the deployment's, and one outside ``patterns``."""
    refusal = own_table_refusal(table) or table_refusal(table, patterns, reserved)
    if refusal is not None:
        raise ConfigError(field_name, refusal)


@dataclass(frozen=True)
class SinkTarget:
    """Where a sink config writes, resolved for a run."""

    url: str
    table: TableName
    mode: Mode
    key: list[str]
    create: bool


def sink_target(config: dict[str, Any], env: Environment) -> SinkTarget:
    """The database and table of a stored config, resolved in ``env``: a ConfigError if the
    table is the deployment's own or outside what its connection allows."""
    typed = PostgresSinkConfig.from_dict(config)
    patterns: tuple[str, ...] = ()
    if typed.connection:
        target = env.connection(typed.connection, "sink.connection")
        url, patterns = target.url, tuple(qualified_key(p) for p in target.key_patterns)
    elif typed.url:
        url = typed.url
    elif typed.model:
        url = env.model_table(typed.model, "sink.model").url
    elif env.database_url:
        url = env.database_url
    else:
        raise ConfigError("sink.url", "is required: the deployment's own database is not PostgreSQL")
    if typed.model is not None:
        model = env.model_table(typed.model, "sink.model")
        table, field_name = TableName(model.schema, model.name), "sink.model"
    else:
        assert typed.table is not None  # validate required one of them
        table, field_name = parse_table_name(typed.table, "sink.table"), "sink.table"
    check_sink_table(table, patterns, env.reserved_tables, field_name)
    return SinkTarget(url, table, cast(Mode, typed.mode), list(typed.key), typed.create)


def connect(url: str) -> psycopg.Connection[Any]:
    return connect_to(url, autocommit=True, application_name="activedataflow-sink")


def check(config: dict[str, Any], env: Environment) -> list[str]:
    """The sink's table and its row estimate (``pg_class.reltuples``), or that the first
    run makes it (``create``), or what failed (unreachable, no such table)."""
    target = sink_target(config, env)
    field = "sink.connection" if config.get("connection") else "sink.url"
    name = target.table.qualified
    try:
        with connect(target.url) as conn:
            oid = relation(conn, target.table)
            rows = row_estimate(conn, target.table, oid) if oid is not None else None
    except ConnectionError as exc:
        raise ConfigError(field, str(exc)) from None
    except psycopg.Error as exc:
        raise ConfigError(field, f"cannot read {mask_url(target.url)}: {error_words(exc)}") from None
    if rows is not None:
        return [f"table {name}: about {rows} rows (pg_class.reltuples), mode {target.mode}"]
    if target.create:
        return [f"table {name}: does not exist yet (the first run makes it: create = true)"]
    raise ConfigError("sink.table", f"table {name} does not exist (set create = true to make it)")


def prepare(conn: psycopg.Connection[Any], target: SinkTarget, schema: pa.Schema) -> None:
    """Refuses, before anything is written, an output the table cannot take (naming the
    column), a missing table without ``create``, or an upsert key without a unique index."""
    if len(set(schema.names)) != len(schema.names):
        raise ConfigError("sink.table", f"the output has a column name twice ({', '.join(schema.names)})")
    for name in target.key:
        if name not in schema.names:
            raise ConfigError(
                "sink.key", f"{name!r} is not a column of the output ({', '.join(schema.names)})"
            )
    columns = table_columns(conn, target.table)
    if columns is None:
        if not target.create:
            raise ConfigError(
                "sink.table", f"{target.table} does not exist; create it, or set create = true to make it"
            )
    else:
        check_output(schema, columns, target.table)
        if target.mode == "upsert":
            check_key(conn, target.table, target.key)
    with suppress(errors.UniqueViolation):  # another sink made it at the same moment
        ensure_ledger(conn, target.table)


def publish_staged(
    config: dict[str, Any],
    env: Environment,
    schema: pa.Schema,
    stage: Callable[[Staging, str], int],
    *,
    commit_key: CommitKey,
    attempt: str,
    publish: Publish,
    landed: Sequence[str] | None = None,
) -> bool:
    """Stages the output through ``stage(staging, url)`` (the rows it staged), then lets
    ``publish`` move them into the table; whether it was published. The ``landed`` files
    of an append or a replace go straight into the table instead when its columns have the
    types they are sent in (``direct``)."""
    target = sink_target(config, env)
    with connect(target.url) as conn:
        prepare(conn, target, schema)
        if landed is not None and target.mode != "upsert":
            direct = publish_direct(
                conn,
                target.table,
                schema,
                lambda: chain.from_iterable(_landed_batches(landed, schema)),
                mode=target.mode,
                create=target.create,
                commit_key=commit_key,
                rows_if_committed=lambda: _landed_rows(landed),
                publish=publish,
                before_fence=_pause_for_test,
            )
            if direct is not None:
                if direct:
                    sweep_staging(conn, target.table, commit_key)
                return direct
        staging = Staging.create(conn, target.table, schema, commit_key, attempt)
        published = False
        try:
            stage(staging, target.url)
            rows = staging.count(conn)
            _pause_for_test()

            def swap() -> None:
                move(
                    conn,
                    staging,
                    target.table,
                    mode=target.mode,
                    key=target.key,
                    create=target.create,
                    commit_key=commit_key,
                    staged_rows=rows,
                )

            published = publish(rows, swap)
        finally:
            staging.drop(conn)
        if published:
            sweep_staging(conn, target.table, commit_key)
    return published


def _pause_for_test() -> None:
    marker = os.environ.get(PAUSE_BEFORE_MOVE_ENV)
    if not marker:
        return
    with open(marker, "a"):
        pass
    while True:  # until the test kills the process
        time.sleep(1)


def _check_mode_for_stream(config: dict[str, Any]) -> None:
    if config.get("mode") == "replace":
        raise ConfigError(
            "sink.mode",
            "replace is for bounded flows; a stream's epochs are appended or upserted (append, upsert)",
        )


# The sink's four ways in.


def write(
    df: DataFrame, config: dict[str, Any], *, attempt_key: str, publish: Publish, env: Environment
) -> bool:
    """A bounded run's Spark result, copied by each partition in Spark's workers."""
    schema = frame_schema(df)
    return publish_staged(
        config,
        env,
        schema,
        lambda staging, url: _stage_frame(df, staging, url),
        commit_key=CommitKey.of_attempt(attempt_key),
        attempt=attempt_key,
        publish=publish,
    )


def append(
    df: DataFrame, config: dict[str, Any], *, epoch_key: str, publish: Publish, env: Environment
) -> bool:
    """One epoch of a streaming transform, added once per ``epoch_key``."""
    _check_mode_for_stream(config)
    schema = frame_schema(df)
    return publish_staged(
        config,
        env,
        schema,
        lambda staging, url: _stage_frame(df, staging, url),
        commit_key=CommitKey.of_epoch(epoch_key),
        attempt=epoch_key,
        publish=publish,
    )


def append_table(
    table: pa.Table, config: dict[str, Any], *, epoch_key: str, publish: Publish, env: Environment
) -> bool:
    """A small epoch collected as Arrow, added once per ``epoch_key``."""
    _check_mode_for_stream(config)
    return publish_staged(
        config,
        env,
        table.schema,
        lambda staging, url: _stage_batches(staging, url, [table.to_batches(max_chunksize=BATCH_ROWS)]),
        commit_key=CommitKey.of_epoch(epoch_key),
        attempt=epoch_key,
        publish=publish,
    )


def write_landed(
    paths: Sequence[str],
    schema: pa.Schema,
    config: dict[str, Any],
    *,
    attempt_key: str,
    publish: Publish,
    env: Environment,
) -> bool:
    """A bounded run's landed Parquet files as its whole output, without Spark."""
    return publish_staged(
        config,
        env,
        schema,
        lambda staging, url: _stage_batches(staging, url, _landed_batches(paths, schema)),
        commit_key=CommitKey.of_attempt(attempt_key),
        attempt=attempt_key,
        publish=publish,
        landed=paths,
    )


def append_landed(
    paths: Sequence[str],
    schema: pa.Schema,
    config: dict[str, Any],
    *,
    epoch_key: str,
    publish: Publish,
    env: Environment,
) -> bool:
    """One epoch's landed Parquet files, added once per ``epoch_key``, without Spark."""
    _check_mode_for_stream(config)
    return publish_staged(
        config,
        env,
        schema,
        lambda staging, url: _stage_batches(staging, url, _landed_batches(paths, schema)),
        commit_key=CommitKey.of_epoch(epoch_key),
        attempt=epoch_key,
        publish=publish,
        landed=paths,
    )


def takes_landed(config: dict[str, Any]) -> bool:
    return True


def staging_bytes(config: dict[str, Any], attempt_key: str) -> int | None:
    """What the bounded write ``attempt_key`` holds in its staging table so far (the
    transform's watch stops a write past ``DATAFLOW_TRANSFORM_MAX_STAGING_BYTES``); 0 on
    the direct path, which stages nothing; None when the database cannot be asked (a
    connection's URL is only known to a run)."""
    typed = PostgresSinkConfig.from_dict(config)
    if typed.url is None or typed.table is None:
        return None
    table = parse_table_name(typed.table, "sink.table")
    with connect(typed.url) as conn:
        return staged_bytes(conn, table, CommitKey.of_attempt(attempt_key), attempt_key)


def _landed_batches(paths: Sequence[str], schema: pa.Schema) -> Iterator[Iterator[pa.RecordBatch]]:
    """Each landed file's batches (one part per file), cast to the run's schema."""
    for path in paths:
        yield (batch.cast(schema) for batch in _file_batches(path, schema.names))


def _landed_rows(paths: Sequence[str]) -> int:
    """The rows of the landed files, from their footers."""
    return sum(pq.ParquetFile(path).metadata.num_rows for path in paths)


def _file_batches(path: str, columns: list[str]) -> Iterator[pa.RecordBatch]:
    reader: Any = pq.ParquetFile(path)  # the stubs leave iter_batches' arguments untyped
    batches: Iterator[pa.RecordBatch] = reader.iter_batches(BATCH_ROWS, columns=columns)
    return batches


def _stage_batches(staging: Staging, url: str, parts: Iterable[Iterable[pa.RecordBatch]]) -> int:
    """Copies each part's batches into ``staging``, the parts shared by up to
    ``STAGE_CONNECTIONS`` connections (each part one COPY in a transaction of its own, as
    ``Staging.copy_part`` makes it); the rows copied."""
    numbered = list(enumerate(parts))
    if len(numbered) <= 1 or STAGE_CONNECTIONS <= 1:
        return _stage_parts(staging, url, numbered)
    lanes = min(STAGE_CONNECTIONS, len(numbered))
    with ThreadPoolExecutor(max_workers=lanes, thread_name_prefix="postgres-stage") as pool:
        futures = [pool.submit(_stage_parts, staging, url, numbered[lane::lanes]) for lane in range(lanes)]
        return sum(future.result() for future in futures)


def _stage_parts(staging: Staging, url: str, parts: Sequence[tuple[int, Iterable[pa.RecordBatch]]]) -> int:
    rows = 0
    with connect(url) as conn:
        for part, batches in parts:
            rows += staging.copy_part(conn, part, batches)
    return rows


# Spark.


def frame_schema(df: DataFrame) -> pa.Schema:
    """The Arrow schema of a DataFrame's rows as ``mapInArrow`` hands them over."""
    from pyspark.sql.pandas.types import to_arrow_schema  # noqa: PLC0415 - Spark only where a job runs

    return to_arrow_schema(df.schema)


def _stage_frame(df: DataFrame, staging: Staging, url: str) -> int:
    """Each partition of ``df`` copied into ``staging`` by the Spark task that computes it;
    the rows copied (a retried task replaces its partition's rows)."""
    copy = _PartitionCopy(url, staging)
    counts = df.coalesce(COPY_PARTITIONS).mapInArrow(copy, "rows long").collect()  # pyright: ignore[reportArgumentType]
    return sum(int(row["rows"]) for row in counts)


@dataclass(frozen=True)
class _PartitionCopy:
    """What a Spark task runs (pickled to the worker): its partition's batches into staging."""

    url: str
    staging: Staging

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext  # noqa: PLC0415 - in the Spark worker

        context = TaskContext.get()
        part = context.partitionId() if context is not None else 0
        with connect(self.url) as conn:
            rows = self.staging.copy_part(conn, part, batches)
        yield pa.record_batch({"rows": pa.array([rows], pa.int64())})


#: The sink type, registered with the connector (``connectors.postgres.register``).
SINK = SinkConnector(
    type="postgres",
    config=PostgresSinkConfig,
    write=write,
    append=append,
    write_landed=write_landed,
    append_landed=append_landed,
    append_table=append_table,
    takes_landed=takes_landed,
    staging_bytes=staging_bytes,
    check=check,
    description="A PostgreSQL table, written exactly once per run or stream epoch (replace, append or upsert).",
)
