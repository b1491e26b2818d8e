"""Spark DDL schemas (``id BIGINT, ts TIMESTAMP``) as Arrow schemas, and back."""

from __future__ import annotations

import re

import pyarrow as pa

from source_support.errors import ConfigError

_SIMPLE = {
    "TINYINT": pa.int8(),
    "BYTE": pa.int8(),
    "SMALLINT": pa.int16(),
    "SHORT": pa.int16(),
    "INT": pa.int32(),
    "INTEGER": pa.int32(),
    "BIGINT": pa.int64(),
    "LONG": pa.int64(),
    "FLOAT": pa.float32(),
    "REAL": pa.float32(),
    "DOUBLE": pa.float64(),
    "STRING": pa.string(),
    "VARCHAR": pa.string(),
    "BOOLEAN": pa.bool_(),
    "DATE": pa.date32(),
    "TIMESTAMP": pa.timestamp("us", tz="UTC"),
    "TIMESTAMP_LTZ": pa.timestamp("us", tz="UTC"),
    "TIMESTAMP_NTZ": pa.timestamp("us"),
}
_FIELD = re.compile(
    r"^\s*(`[^`]+`|[A-Za-z_][A-Za-z0-9_]*)\s+([A-Za-z_]+)\s*(\(\s*(\d+)\s*(?:,\s*(\d+)\s*)?\))?\s*$"
)


def parse_ddl(ddl: str, *, field: str = "format.schema") -> pa.Schema:
    """Parses ``name TYPE, ...``; refuses unknown types and repeated names, naming them."""
    if not ddl or not ddl.strip():
        raise ConfigError(field, "is empty")
    fields = []
    for part in _split_top_level(ddl):
        match = _FIELD.match(part)
        if not match:
            raise ConfigError(field, f"cannot read column {part.strip()!r}; expected 'name TYPE'")
        name, type_name, _, precision, scale = match.groups()
        name = name.strip("`")
        type_name = type_name.upper()
        if type_name in ("DECIMAL", "NUMERIC", "DEC"):
            precision, scale = int(precision or 10), int(scale or 0)
            if not (1 <= precision <= 38 and scale <= precision):
                reason = "precision must be 1 to 38, scale at most the precision"
                raise ConfigError(field, f"column {name!r} DECIMAL({precision},{scale}): {reason}")
            fields.append(pa.field(name, pa.decimal128(precision, scale)))
        elif type_name in _SIMPLE and (precision is None or type_name == "VARCHAR"):
            fields.append(pa.field(name, _SIMPLE[type_name]))
        else:
            raise ConfigError(field, f"column {name!r} has an unknown type {type_name!r}")
    names = [f.name.lower() for f in fields]  # Spark resolves names case-insensitively
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ConfigError(field, f"column names repeat: {', '.join(repeated)}")
    return pa.schema(fields)


def to_ddl(schema: pa.Schema) -> str:
    """The Spark DDL of an Arrow schema (the inverse of ``parse_ddl`` on its types)."""
    return ", ".join(f"`{f.name}` {_spark_type(f.type)}" for f in schema)


def widen(schema: pa.Schema) -> pa.Schema:
    """Types as inferred from a sample, widened so later rows fit more often."""
    out = []
    for f in schema:
        t = f.type
        if pa.types.is_integer(t):
            t = pa.int64()
        elif pa.types.is_floating(t):
            t = pa.float64()
        elif pa.types.is_timestamp(t):
            t = pa.timestamp("us", tz="UTC")
        elif (
            pa.types.is_null(t)
            or pa.types.is_large_string(t)
            or not (pa.types.is_boolean(t) or pa.types.is_date32(t) or pa.types.is_string(t))
        ):
            t = pa.string()
        out.append(pa.field(f.name, t))
    return pa.schema(out)


def _spark_type(t: pa.DataType) -> str:
    if pa.types.is_decimal(t):
        return f"DECIMAL({t.precision},{t.scale})"
    if pa.types.is_timestamp(t):
        return "TIMESTAMP" if t.tz else "TIMESTAMP_NTZ"
    for name, arrow_type in _SIMPLE.items():
        if arrow_type == t:
            return name
    return "STRING"


def _split_top_level(ddl: str) -> list[str]:
    parts, depth, current = [], 0, []
    for ch in ddl:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return parts
