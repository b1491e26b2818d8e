"""What the postgres source and sink share: URLs, table names, quoting and connecting.

A table is named ``schema.table`` (``orders`` alone is ``public.orders``); names are
compared as PostgreSQL folds unquoted identifiers (lower case), so a pattern or a reserved
glob cannot be dodged by writing ``Auth_User``. Every statement is composed with
``psycopg.sql`` (``Identifier``, ``Literal``): no name a user typed is pasted into SQL.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable
from dataclasses import dataclass
from typing import LiteralString, cast
from urllib.parse import urlsplit

import psycopg
from psycopg import sql

from source_support.connections import ConnectionTarget
from source_support.errors import ConfigError
from source_support.options import mask_url_credentials

#: The kind of named connection a ``url`` may be replaced by.
CONNECTION_KIND = "postgres"
URL_SCHEMES = ("postgres://", "postgresql://")
DEFAULT_PORT = 5432
DEFAULT_SCHEMA = "public"
CONNECT_TIMEOUT_S = 10
#: Tables the connector itself keeps in a target database (the sink's ledger and staging
#: tables): reserved like the deployment's own (``dataflow.services.reserved``).
LEDGER_TABLE = "adf_sink_ledger"
STAGING_PREFIX = "adf_staging_"
OWN_TABLE_GLOBS = (f"*.{LEDGER_TABLE}", f"*.{STAGING_PREFIX}*")
#: Schemas of PostgreSQL's own catalogs: never read through a flow.
CATALOG_GLOBS = ("pg_catalog.*", "information_schema.*", "pg_toast.*")
MAX_NAME_CHARS = 63  # NAMEDATALEN - 1


def mask_url(url: str) -> str:
    return mask_url_credentials(url)


def validate_url(url: str, field: str) -> str:
    """``url`` if it names a PostgreSQL database (postgres:// or postgresql://, a host and a
    database); the error shows it masked."""
    url = url.strip()
    if not url.startswith(URL_SCHEMES):
        raise ConfigError(field, f"{mask_url(url)!r} must start with {' or '.join(URL_SCHEMES)}")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise ConfigError(field, f"{mask_url(url)!r}: the port is not valid ({exc})") from None
    if not parts.hostname:
        raise ConfigError(field, f"{mask_url(url)!r} names no host")
    if port is not None and not 0 < port < 65536:
        raise ConfigError(field, f"{mask_url(url)!r}: the port must be between 1 and 65535")
    if not parts.path.strip("/"):
        raise ConfigError(field, f"{mask_url(url)!r} names no database (postgres://user@host:5432/DBNAME)")
    return url


@dataclass(frozen=True)
class TableName:
    """A table as ``schema.table``, each part as PostgreSQL stores it."""

    schema: str
    name: str

    @property
    def qualified(self) -> str:
        return f"{self.schema}.{self.name}"

    @property
    def identifier(self) -> sql.Identifier:
        return sql.Identifier(self.schema, self.name)

    def __str__(self) -> str:
        return self.qualified


def parse_table_name(text: str, field: str) -> TableName:
    """``schema.table`` or ``table`` (in ``public``): unquoted parts fold to lower case,
    ``"Quoted"`` parts keep theirs. A ConfigError naming ``field`` for anything else."""
    parts = _split_name(text.strip(), field)
    if len(parts) == 1:
        parts = [DEFAULT_SCHEMA, *parts]
    if len(parts) != 2:
        raise ConfigError(field, f"{text!r} is not a table name (schema.table, or table in public)")
    return TableName(parts[0], parts[1])


def _split_name(text: str, field: str) -> list[str]:
    parts: list[str] = []
    index = 0
    while index <= len(text):
        if text[index : index + 1] == '"':
            end = index + 1
            name = ""
            while True:
                close = text.find('"', end)
                if close < 0:
                    raise ConfigError(field, f"{text!r}: a quote is not closed")
                name += text[end:close]
                if text[close + 1 : close + 2] == '"':  # "" inside quotes is one quote
                    name += '"'
                    end = close + 2
                    continue
                index = close + 1
                break
        else:
            end = text.find(".", index)
            end = len(text) if end < 0 else end
            name = text[index:end].strip().lower()
            index = end
            if not name or any(c.isspace() or c in '";' for c in name):
                raise ConfigError(field, f"{text!r} is not a table name (schema.table)")
        if not name or len(name) > MAX_NAME_CHARS or "\0" in name:
            raise ConfigError(field, f"{text!r}: each name is 1 to {MAX_NAME_CHARS} characters")
        parts.append(name)
        if index >= len(text):
            break
        if text[index] != ".":
            raise ConfigError(field, f"{text!r} is not a table name (schema.table)")
        index += 1
        if index == len(text):
            raise ConfigError(field, f"{text!r} ends with a dot")
    return parts


def qualified_key(text: str) -> str:
    """A table name or a pattern over them as the connection's patterns see it:
    ``orders`` -> ``public.orders``, case folded (a glob stays a glob)."""
    text = text.strip()
    if '"' in text:
        try:
            return parse_table_name(text, "table").qualified
        except ConfigError:
            return text
    return text.lower() if "." in text else f"{DEFAULT_SCHEMA}.{text.lower()}"


def table_reserved(table: str, reserved: Iterable[str]) -> str | None:
    """The reserved glob that ``table`` (``schema.table``) matches, if any."""
    key = table.lower()
    return next((glob for glob in reserved if fnmatch.fnmatchcase(key, glob.lower())), None)


def table_refusal(table: TableName, patterns: Iterable[str], reserved: Iterable[str]) -> str | None:
    """Why ``table`` may not be read or written (a table the deployment uses, one outside
    the connection's patterns); None if it may."""
    clash = table_reserved(table.qualified, reserved)
    if clash is not None:
        return f"{table.qualified!r} is a table the deployment itself uses ({clash}): never read or written"
    listed = [qualified_key(p) for p in patterns]
    if listed and not any(fnmatch.fnmatchcase(table.qualified, p) for p in listed):
        return f"{table.qualified!r} is outside the tables its connection allows ({', '.join(listed)})"
    return None


def trusted_sql(text: str) -> sql.SQL:
    """``text`` as SQL, for text the connector made itself or checked before: a type name
    from the catalog's ``format_type``, a query parsed and written again by
    ``connectors.postgres.query`` (psycopg asks for a literal string: nothing a user typed
    goes through here unchecked)."""
    return sql.SQL(cast(LiteralString, text))


def connect(
    url: str,
    *,
    autocommit: bool = False,
    application_name: str = "activedataflow",
    timeout_s: int = CONNECT_TIMEOUT_S,
) -> psycopg.Connection:
    """A psycopg connection to ``url`` (with a connect timeout); ``ConnectionError`` naming
    the masked URL when it cannot be made."""
    try:
        return psycopg.connect(
            url,
            autocommit=autocommit,
            connect_timeout=timeout_s,
            application_name=application_name,
        )
    except psycopg.Error as exc:
        raise ConnectionError(f"cannot connect to {mask_url(url)}: {error_words(exc)}") from None


def error_words(exc: BaseException) -> str:
    """A psycopg error in one line."""
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


#: The most tables a test of a connection lists.
MAX_LISTED_TABLES = 100


def connection_check(target: ConnectionTarget) -> list[str]:
    """A test of a PostgreSQL connection: the server's version, then the tables its
    patterns match (at most ``MAX_LISTED_TABLES``) with their row estimates
    (``pg_class.reltuples``); ConfigError naming ``connection`` with what failed."""
    patterns = [qualified_key(p) for p in target.key_patterns] or ["*.*"]
    try:
        with connect(target.url, autocommit=True, application_name="activedataflow-check") as conn:
            version = conn.execute("SHOW server_version").fetchone()
            rows = conn.execute(
                "SELECT n.nspname || '.' || c.relname, c.reltuples::bigint FROM pg_catalog.pg_class c "
                "JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
                "WHERE c.relkind IN ('r', 'p') AND n.nspname NOT IN ('pg_catalog', 'information_schema') "
                "ORDER BY 1"
            ).fetchall()
    except (ConnectionError, psycopg.Error) as exc:
        reason = error_words(exc) if isinstance(exc, psycopg.Error) else str(exc)
        raise ConfigError("connection", reason) from None
    lines = [f"{mask_url(target.url)}: PostgreSQL {version[0] if version else '?'} answers"]
    tables = [
        (name, estimate)
        for name, estimate in rows
        if any(fnmatch.fnmatchcase(name.lower(), p) for p in patterns)
        and table_reserved(name, target.reserved_keys) is None
    ]
    more = f" (the first {MAX_LISTED_TABLES})" if len(tables) > MAX_LISTED_TABLES else ""
    lines.append(f"{len(tables)} tables match {', '.join(patterns)}{more}")
    return lines + [
        f"{name}: about {max(0, estimate)} rows (pg_class.reltuples)"
        for name, estimate in tables[:MAX_LISTED_TABLES]
    ]
