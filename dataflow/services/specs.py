"""Flow specs: the TOML shape (``[flow] [source] [format] [transform] [sink]``), validated.

Every entry point (TOML, admin, API) turns its input into this shape and calls
``flow_spec_validate``; a refused spec raises ``ConfigError`` naming the field.
"""

from __future__ import annotations

import re
from typing import Any

import sqlglot
from django.conf import settings
from sqlglot import exp

from source_support.errors import ConfigError
from source_support.formats import validate_format
from source_support.registry import Environment, validate_sink, validate_source

FLOW_FIELDS: dict[str, tuple[type, Any, tuple[int, int] | None]] = {
    "name": (str, None, None),
    "description": (str, "", None),
    "parallelism": (int, 4, (1, 256)),
    "batch_size": (int, 10_000, (1, 10_000_000)),
    "poll_interval_ms": (int, 500, (10, 600_000)),
    "skip_errors": (bool, False, None),
    "max_errors": (int, 1000, (0, 2**31 - 1)),
}
SECTIONS = ("flow", "source", "format", "transform", "sink")
NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,99}$")
SOURCE_VIEW = "source"


def environment() -> Environment:
    return Environment(
        allowed_roots=tuple(settings.DATAFLOW_ALLOWED_ROOTS),
        base_dir=settings.DATAFLOW_BASE_DIR,
    )


def flow_spec_validate(doc: dict[str, Any]) -> dict[str, Any]:
    """Validates a whole spec and returns the DataFlow field values it describes."""
    if not isinstance(doc, dict):
        raise ConfigError(
            "flow",
            "a flow spec is a table with [flow], [source], [format], [transform], [sink]",
        )
    for section in doc:
        if section not in SECTIONS:
            raise ConfigError(section, f"is not a section of a flow ({', '.join(SECTIONS)})")
    for section in SECTIONS:
        if section != "format" and not isinstance(doc.get(section), dict):
            raise ConfigError(section, "is required")
    flow = _validate_flow_table(doc["flow"])
    env = environment()
    source_type, source_config = validate_source(doc["source"], env)
    fmt = validate_format(doc.get("format") or {"type": "csv"})
    sql = _validate_transform(doc["transform"])
    sink_type, sink_config = validate_sink(doc["sink"], env)
    return {
        **flow,
        "source_type": source_type,
        "source_config": source_config,
        "format_type": fmt.type,
        "format_options": fmt.options,
        "transform_sql": sql,
        "sink_type": sink_type,
        "sink_config": sink_config,
    }


def flow_spec_of(flow) -> dict[str, Any]:
    """The spec of a stored flow, in the TOML shape (what ``applyflows`` would take)."""
    return {
        "flow": {name: getattr(flow, name) for name in FLOW_FIELDS},
        "source": {"type": flow.source_type, **flow.source_config},
        "format": {"type": flow.format_type, **flow.format_options},
        "transform": {"sql": flow.transform_sql},
        "sink": {"type": flow.sink_type, **flow.sink_config},
    }


def _validate_flow_table(table: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in table:
        if name not in FLOW_FIELDS:
            raise ConfigError(f"flow.{name}", f"is not a field of flow ({', '.join(FLOW_FIELDS)})")
    for name, (kind, default, bounds) in FLOW_FIELDS.items():
        value = table.get(name, default)
        if value is None:
            raise ConfigError(f"flow.{name}", "is required")
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise ConfigError(f"flow.{name}", f"must be a {kind.__name__}")
        if bounds and not bounds[0] <= value <= bounds[1]:
            raise ConfigError(f"flow.{name}", f"must be between {bounds[0]} and {bounds[1]}")
        out[name] = value
    if not NAME_RE.match(out["name"]):
        raise ConfigError("flow.name", "must be lowercase letters, digits, '-' or '_' (at most 100)")
    return out


def _validate_transform(table: dict[str, Any]) -> str:
    for name in table:
        if name != "sql":
            raise ConfigError(f"transform.{name}", "is not a field of transform (sql)")
    sql = table.get("sql")
    if not isinstance(sql, str) or not sql.strip():
        raise ConfigError("transform.sql", "is required: a Spark SQL query over the view 'source'")
    try:
        statements = [s for s in sqlglot.parse(sql, read="spark") if s is not None]
    except sqlglot.errors.ParseError as exc:
        raise ConfigError("transform.sql", f"does not parse: {_first_line(exc)}") from None
    if len(statements) != 1 or not isinstance(statements[0], exp.Query):
        raise ConfigError("transform.sql", "must be one SELECT query (WITH and UNION allowed)")
    query = statements[0]
    ctes = {cte.alias_or_name.lower() for cte in query.find_all(exp.CTE)}
    for table_ref in query.find_all(exp.Table):
        name = table_ref.name.lower()
        if not isinstance(table_ref.this, exp.Identifier):
            raise ConfigError(
                "transform.sql",
                f"reads {table_ref.sql(dialect='spark')}; only the view 'source' may be read",
            )
        if table_ref.db or table_ref.catalog:
            raise ConfigError(
                "transform.sql",
                f"reads {table_ref.sql(dialect='spark')}; only the view 'source' may be read",
            )
        if name not in ctes and name != SOURCE_VIEW:
            raise ConfigError(
                "transform.sql",
                f"reads table {name!r}; only the view 'source' may be read",
            )
    return sql.strip().rstrip(";")


def _first_line(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0]
