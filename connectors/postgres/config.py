"""The ``[source]`` table of a postgres source. Nothing here connects: a flow may be defined
before its database is up (``Source.check_input`` connects when a run starts).

Where a source reads: a named ``connection`` (its key patterns are ``schema.table`` globs),
a ``url`` (staff and the operator), or neither (staff and the operator: the deployment's
own database, when it is PostgreSQL). What it reads: a ``table``, a ``query`` (one plain
SELECT, checked: ``connectors.postgres.query``) or a Django ``model`` (its table and
database, resolved on the Django side through ``Environment.model_table``). Whatever the
patterns say, the deployment's own tables (``Environment.reserved_tables``) are refused.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Self

from connectors.postgres.connection import (
    CONNECTION_KIND,
    MAX_NAME_CHARS,
    TableName,
    parse_table_name,
    qualified_key,
    table_refusal,
    validate_url,
)
from connectors.postgres.query import query_tables
from source_support.config import ConfigBase, connection_field, option
from source_support.errors import ConfigError
from source_support.registry import Environment

MODES = ("snapshot", "incremental", "cdc")
SCHEMA_CHANGES = ("fail", "evolve", "ignore")
DEFAULT_CHUNK_ROWS = 100_000
#: What PostgreSQL allows in a replication slot's name (and what we allow a publication's).
SLOT_NAME = re.compile(r"[a-z0-9_]{1,63}")


class PostgresSourceConfig(ConfigBase):
    """A validated ``[source]`` table of a postgres source."""

    connection: str | None = connection_field(CONNECTION_KIND)
    url: str | None = option(
        "The database, such as postgres://app:password@db.example.com:5432/shop; for staff and the "
        "operator only (others name a connection). Left out with no connection: the deployment's own "
        "database when it is PostgreSQL (staff and the operator only).",
        default=None,
        secret="url",
        example="postgres://app@127.0.0.1:5432/shop",
        address=CONNECTION_KIND,
    )
    table: str | None = option(
        "The table to read, schema.table (a bare name is in public).",
        default=None,
        example="public.orders",
        scoped=True,
    )
    query: str | None = option(
        "Instead of table: one plain SELECT over tables the connection allows (checked, and run in a "
        "READ ONLY transaction); read as one split.",
        default=None,
        example="SELECT id, amount FROM public.orders WHERE amount > 100",
    )
    model: str | None = option(
        'Instead of table: a Django model ("app_label.ModelName"), whose table and database are read.',
        default=None,
        example="shop.Order",
    )
    mode: str = option(
        "snapshot: every row at one point in time, in key-range chunks read in parallel; incremental: "
        "the rows whose cursor column is past the last successful run's high mark (for scheduled runs); "
        "cdc: a snapshot, then every change from a replication slot (unbounded; wal_level = logical).",
        default="snapshot",
        choices=MODES,
    )
    key: str | None = option(
        "The integer column the table is cut into chunks by (left out: the primary key when it is one "
        "integer column; a table without one is cut into ctid page ranges).",
        default=None,
        example="id",
    )
    chunk_rows: int = option(
        "About how many rows each chunk (a split) holds.",
        default=DEFAULT_CHUNK_ROWS,
        minimum=1,
        maximum=100_000_000,
    )
    cursor: str | None = option(
        "incremental: a column whose values only grow (updated_at, id): a run reads the rows past the "
        "previous successful run's highest value.",
        default=None,
        example="updated_at",
    )

    slot: str | None = option(
        "cdc: the logical replication slot the flow makes when its run starts and drops when the "
        "flow is deleted (left out: adf_ and the flow's name).",
        default=None,
        example="adf_orders",
    )
    publication: str | None = option(
        "cdc: the publication the slot reads, made for the table when missing (left out: the slot's name).",
        default=None,
        example="adf_orders",
    )
    schema_change: str | None = option(
        "cdc: a column added, dropped or retyped while the flow runs: fail (left out) stops the run "
        "naming the column and the LSN; evolve takes a new column into the sink from that change on "
        "(nullable, in its own type; NULL in the rows before it), lands a dropped one as NULL from then "
        "on, and fails on a retype that would change the column's type in the sink (int to bigint), "
        "naming the column, both types and the LSN; ignore goes on without it, counting the values "
        "dropped. Every change is listed on the run.",
        default=None,
        choices=SCHEMA_CHANGES,
    )

    @classmethod
    def address_keys(cls, table: Mapping[str, Any]) -> list[tuple[str, str]] | None:
        """The tables a ``query`` reads: the connection's patterns must cover each (the
        ``table`` option is scoped; a ``model`` is resolved on the Django side)."""
        query = table.get("query")
        if not isinstance(query, str):
            return []
        try:
            return [("query", name.qualified) for name in query_tables(query)]
        except ConfigError:
            return []  # the validation names what is wrong with the query

    def validate(self, env: Environment) -> Self:
        given = [name for name in ("table", "query", "model") if getattr(self, name) is not None]
        if len(given) != 1:
            raise ConfigError(
                "source.table",
                "give one of source.table, source.query or source.model"
                + (f" (not {' and '.join(given)})" if given else ""),
            )
        if self.connection is not None and not self.connection.strip():
            raise ConfigError("source.connection", "must name a connection")
        if self.connection is not None and self.url is not None:
            raise ConfigError("source.connection", "give source.connection or source.url, not both")
        config = self
        if self.url is not None:
            config = replace(config, url=validate_url(self.url, "source.url"))
        if self.table is not None:
            name = parse_table_name(self.table, "source.table")
            check_table(name, (), env.reserved_tables, "source.table")
        if self.query is not None:
            for name in query_tables(self.query):
                check_table(name, (), env.reserved_tables, "source.query")
        if self.model is not None:
            model = env.model_table(self.model, "source.model")
            check_table(TableName(model.schema, model.name), (), env.reserved_tables, "source.model")
        for field_name in ("key", "cursor"):
            value = getattr(self, field_name)
            if value is not None and not 0 < len(value.strip()) <= MAX_NAME_CHARS:
                raise ConfigError(
                    f"source.{field_name}", f"must name a column (1 to {MAX_NAME_CHARS} characters)"
                )
        if self.mode == "incremental" and self.cursor is None:
            raise ConfigError(
                "source.cursor", "is required in incremental mode: a column whose values only grow"
            )
        if self.mode != "incremental" and self.cursor is not None:
            raise ConfigError("source.cursor", "is read only in incremental mode (source.mode)")
        if self.query is not None and self.mode == "incremental":
            raise ConfigError("source.mode", "incremental reads a table or a model, not a query")
        if self.mode == "cdc" and self.query is not None:
            raise ConfigError("source.mode", "cdc reads a table or a model, not a query")
        for field_name in ("slot", "publication", "schema_change"):
            value = getattr(self, field_name)
            if value is None:
                continue
            if self.mode != "cdc":
                raise ConfigError(f"source.{field_name}", "is read only in cdc mode (source.mode)")
            if field_name != "schema_change" and not SLOT_NAME.fullmatch(value):
                raise ConfigError(
                    f"source.{field_name}", "must be 1 to 63 lower-case letters, digits and underscores"
                )
        if self.query is not None and self.key is not None:
            raise ConfigError("source.key", "a query is read as one split: leave source.key out")
        return config


def check_table(
    table: TableName, patterns: tuple[str, ...], reserved: tuple[str, ...], field_name: str
) -> None:
    """Refuses a table the deployment uses, or one outside ``patterns``."""
    refusal = table_refusal(table, patterns, reserved)
    if refusal is not None:
        raise ConfigError(field_name, refusal)


@dataclass(frozen=True)
class PostgresTarget:
    """Where a config reads, resolved for a run: the URL (credentials in it), the field a
    refusal of it names, the connection's table patterns (empty: any) and the reserved
    table globs."""

    url: str
    address_field: str
    patterns: tuple[str, ...]
    reserved: tuple[str, ...]


def postgres_target(config: PostgresSourceConfig, env: Environment) -> PostgresTarget:
    """The database a config reads, resolved in ``env`` (ConfigError naming the field)."""
    section = config.SECTION
    if config.connection:
        target = env.connection(config.connection, f"{section}.connection")
        patterns = tuple(qualified_key(p) for p in target.key_patterns)
        return PostgresTarget(target.url, f"{section}.connection", patterns, env.reserved_tables)
    if config.url:
        return PostgresTarget(config.url, f"{section}.url", (), env.reserved_tables)
    if config.model:
        url = env.model_table(config.model, f"{section}.model").url
        return PostgresTarget(url, f"{section}.model", (), env.reserved_tables)
    if not env.database_url:
        raise ConfigError(
            f"{section}.url",
            "is required: the deployment's own database is not PostgreSQL (or name a connection)",
        )
    return PostgresTarget(env.database_url, f"{section}.url", (), env.reserved_tables)


def source_table(config: PostgresSourceConfig, env: Environment) -> TableName | None:
    """The table a config reads (None: a query)."""
    if config.table is not None:
        return parse_table_name(config.table, f"{config.SECTION}.table")
    if config.model is not None:
        model = env.model_table(config.model, f"{config.SECTION}.model")
        return TableName(model.schema, model.name)
    return None
