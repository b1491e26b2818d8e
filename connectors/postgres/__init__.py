"""PostgreSQL: the ``postgres`` connection kind (its key patterns are ``schema.table``
globs); ``connection`` and ``types`` hold what the source and the sink share."""

from connectors.postgres.connection import CONNECTION_KIND, DEFAULT_PORT, qualified_key, validate_url
from source_support.connections import ConnectionKind, register_connection_kind


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
        )
    )
