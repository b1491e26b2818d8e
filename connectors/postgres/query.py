"""The ``query`` of a postgres source: one plain SELECT, checked over its parse tree.

Parsed with sqlglot (PostgreSQL dialect) and refused unless it is a single SELECT (UNIONs
and CTEs of SELECTs too) whose every function is one sqlglot knows as a plain SQL function
or one of a short allow-list: a function sqlglot does not know (``pg_read_file``,
``dblink``, ``lo_import``, ``query_to_xml``, ``set_config``, a user's own function) could
read files or other tables, write, or change settings, so it is refused. Locking clauses
(``FOR UPDATE``), ``SELECT INTO`` and table functions in ``FROM`` are refused too. Every
table it names is returned (CTE names aside) so the caller checks each against the
connection's patterns and the reserved tables. The query also runs in a READ ONLY
transaction: a check missed here still cannot write.
"""

from __future__ import annotations

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError

from connectors.postgres.connection import DEFAULT_SCHEMA, TableName
from source_support.errors import ConfigError

FIELD = "source.query"
MAX_QUERY_CHARS = 64 * 1024
#: Functions sqlglot parses as unknown (``Anonymous``) that read nothing but their arguments.
ALLOWED_ANONYMOUS = frozenset(
    {"date_trunc", "to_char", "to_date", "to_timestamp", "jsonb_extract_path_text", "json_extract_path_text"}
)
#: Known expressions that still reach beyond the query's tables.
REFUSED_EXPRESSIONS: tuple[type[exp.Expression], ...] = (exp.Lock, exp.Into, exp.Command)
#: Known functions that change or reveal what a plain SELECT must not.
REFUSED_FUNCTIONS = frozenset({"current_setting", "set_config", "pg_sleep", "nextval", "setval"})


def query_tables(query: str) -> list[TableName]:
    """The tables ``query`` reads (each once, in order), after refusing anything but one plain
    SELECT (see the module's docstring); a ConfigError naming ``source.query`` otherwise."""
    return checked_query(query)[1]


def checked_query(query: str) -> tuple[str, list[TableName]]:
    """``query_tables``, and the query as it is run: every table written with its schema
    (``public`` where none was given). PostgreSQL looks a bare name up in ``pg_catalog``
    before ``public``, so ``pg_stat_activity`` would otherwise pass as ``public.pg_stat_activity``
    and read the catalog."""
    if len(query) > MAX_QUERY_CHARS:
        raise ConfigError(FIELD, f"is longer than {MAX_QUERY_CHARS} characters")
    try:
        statements = [s for s in sqlglot.parse(query, read="postgres") if s is not None]
    except ParseError as exc:
        raise ConfigError(FIELD, f"is not a query PostgreSQL would run: {str(exc).splitlines()[0]}") from None
    if len(statements) != 1:
        raise ConfigError(FIELD, f"must be one SELECT (found {len(statements)} statements)")
    tree = statements[0]
    if not isinstance(tree, exp.Query) or not isinstance(
        tree, exp.Select | exp.Union | exp.Intersect | exp.Except
    ):
        raise ConfigError(FIELD, f"must be a SELECT, not {tree.key.upper()}")
    for node in tree.walk():
        _check_node(node)
    ctes = {cte.alias_or_name.lower() for cte in tree.find_all(exp.CTE)}
    tables: dict[str, TableName] = {}
    for table in tree.find_all(exp.Table):
        if not isinstance(table.this, exp.Identifier):
            raise ConfigError(FIELD, f"{table.sql('postgres')!r}: only tables may be read in FROM")
        if not table.args.get("db") and table.name.lower() in ctes:
            continue
        if table.args.get("catalog"):
            raise ConfigError(FIELD, f"{table.sql('postgres')!r}: name tables as schema.table")
        name = TableName(_part(table.args.get("db")) or DEFAULT_SCHEMA, _part(table.this))
        table.set("db", exp.Identifier(this=name.schema, quoted=True))
        table.set("this", exp.Identifier(this=name.name, quoted=True))
        tables.setdefault(name.qualified, name)
    if not tables:
        raise ConfigError(FIELD, "reads no table")
    return tree.sql("postgres"), list(tables.values())


def _part(identifier: object) -> str:
    if not isinstance(identifier, exp.Identifier):
        return ""
    return identifier.name if identifier.quoted else identifier.name.lower()


def _check_node(node: exp.Expression) -> None:
    if isinstance(node, REFUSED_EXPRESSIONS):
        raise ConfigError(FIELD, f"{node.sql('postgres')[:80]!r} is not allowed in a read-only query")
    if isinstance(node, exp.Anonymous):
        name = str(node.this).lower()
        if name not in ALLOWED_ANONYMOUS:
            raise ConfigError(
                FIELD,
                f"function {name}() is not allowed here (only plain SQL functions: it could reach "
                "beyond the tables the query names)",
            )
    elif isinstance(node, exp.Func) and node.sql_name().lower() in REFUSED_FUNCTIONS:
        raise ConfigError(FIELD, f"function {node.sql_name().lower()}() is not allowed here")
    if isinstance(node, exp.DML | exp.DDL) and not isinstance(node, exp.Query):
        raise ConfigError(FIELD, f"{node.key.upper()} is not allowed in a read-only query")
