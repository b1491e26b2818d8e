"""PostgreSQL: a source that reads a table (or a checked query) in key-range or ctid chunks
at one exported snapshot, an exactly-once table sink (``sink``: staged binary COPY, one
move transaction with a ledger), and the ``postgres`` connection kind (table patterns are
``schema.table`` globs). ``connection`` and ``types`` hold what the source and sink share."""

from connectors.postgres.config import PostgresSourceConfig
from connectors.postgres.connection import (
    CONNECTION_KIND,
    DEFAULT_PORT,
    connection_check,
    qualified_key,
    validate_url,
)
from connectors.postgres.sink import SINK
from connectors.postgres.source import PostgresSource
from source_support.connections import ConnectionKind, register_connection_kind
from source_support.registry import SourceConnector, register_sink, register_source


def register() -> None:
    """The entry point of the ``activedataflow.connectors`` group (``pyproject.toml``)."""
    register_connection_kind(
        ConnectionKind(
            type=CONNECTION_KIND,
            description="A PostgreSQL database (postgres:// or postgresql://): tables to read or write; "
            "its key patterns are schema.table globs.",
            validate_url=validate_url,
            default_port=DEFAULT_PORT,
            pinnable_schemes=("postgres", "postgresql"),
            key_of=qualified_key,
            check=connection_check,
        )
    )
    register_source(
        SourceConnector(
            type="postgres",
            config=PostgresSourceConfig,
            build=PostgresSource.from_config,
            description="A PostgreSQL table (or a checked SELECT) read at one point in time, in key-range "
            "chunks read in parallel; in cdc mode, then every change to it from a replication slot.",
            boundedness="config",
            unbounded=lambda config: config.mode == "cdc",
        )
    )
    register_sink(SINK)
