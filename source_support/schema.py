"""Spark DDL schemas (``id BIGINT, user STRUCT<name: STRING>``) as Arrow schemas, and back.

Nested types follow Spark's DDL: ``STRUCT<name: TYPE, ...>`` (the colon is optional),
``ARRAY<TYPE>``, ``MAP<KEY, VALUE>`` and ``DECIMAL(p, s)``, nested to any depth.
"""

from __future__ import annotations

import functools
import re

import pyarrow as pa

from source_support.errors import ConfigError
from source_support.typed_arrow import fields_of

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
    "BINARY": pa.binary(),
    "DATE": pa.date32(),
    "TIMESTAMP": pa.timestamp("us", tz="UTC"),
    "TIMESTAMP_LTZ": pa.timestamp("us", tz="UTC"),
    "TIMESTAMP_NTZ": pa.timestamp("us"),
}
_DECIMAL = ("DECIMAL", "NUMERIC", "DEC")
#: Deeper nesting than this is refused (a parser must not recurse without bound).
MAX_NESTING = 32
_TOKEN = re.compile(r"\s*(?:(`[^`]*`)|([A-Za-z_][A-Za-z0-9_]*)|(\d+)|([<>(),:]))")


class _Unreadable(ValueError):
    """The text is not ``name TYPE``; the caller says which column."""


class _UnknownType(ValueError):
    def __init__(self, type_name: str) -> None:
        super().__init__(type_name)
        self.type_name = type_name


class _BadDecimal(ValueError):
    pass


def parse_ddl(ddl: str, *, field: str = "format.schema") -> pa.Schema:
    """Parses ``name TYPE, ...``; refuses unknown types and repeated names, naming them."""
    if not ddl or not ddl.strip():
        raise ConfigError(field, "is empty")
    fields: list[pa.Field[pa.DataType]] = []
    for part in _split_top_level(ddl):
        fields.append(_parse_column(part, field))
    names = [f.name.lower() for f in fields]  # Spark resolves names case-insensitively
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ConfigError(field, f"column names repeat: {', '.join(repeated)}")
    return pa.schema(fields)


def parse_type(text: str, *, field: str = "format.schema") -> pa.DataType:
    """One Spark type (``ARRAY<STRING>``) as an Arrow type."""
    tokens = _Tokens(text)
    try:
        arrow_type = _read_type(tokens, 0)
        tokens.expect_end()
    except _UnknownType as exc:
        raise ConfigError(field, f"unknown type {exc.type_name!r}") from None
    except (_Unreadable, _BadDecimal) as exc:
        raise ConfigError(field, f"cannot read type {text.strip()!r}: {exc}") from None
    return arrow_type


def _parse_column(part: str, field: str) -> pa.Field[pa.DataType]:
    tokens = _Tokens(part)
    name = None
    try:
        name = tokens.name()
        arrow_type = _read_type(tokens, 0)
        tokens.expect_end()
    except _UnknownType as exc:
        raise ConfigError(field, f"column {name!r} has an unknown type {exc.type_name!r}") from None
    except _BadDecimal as exc:
        raise ConfigError(field, f"column {name!r} {exc}") from None
    except _Unreadable as exc:
        text = part.strip()
        text = text if len(text) <= 200 else text[:200] + "..."
        if name is not None and tokens.failed_on_type:
            raise ConfigError(field, f"column {name!r}: cannot read its type ({exc}): {text!r}") from None
        raise ConfigError(field, f"cannot read column {text!r}; expected 'name TYPE'") from None
    return pa.field(name, arrow_type)


class _Tokens:
    def __init__(self, text: str) -> None:
        self.items: list[str] = []
        self.failed_on_type = False
        pos = 0
        while pos < len(text):
            if text[pos:].strip() == "":
                break
            match = _TOKEN.match(text, pos)
            if not match:
                raise _Unreadable(f"unexpected {text[pos:].strip()[:20]!r}")
            # one group of the pattern matches: the token
            self.items.append(next(group for group in match.groups() if group is not None))
            pos = match.end()
        self.at = 0

    def peek(self) -> str | None:
        return self.items[self.at] if self.at < len(self.items) else None

    def take(self) -> str:
        token = self.peek()
        if token is None:
            raise _Unreadable("it ends too early")
        self.at += 1
        return token

    def accept(self, token: str) -> bool:
        if self.peek() == token:
            self.at += 1
            return True
        return False

    def expect(self, token: str) -> None:
        if not self.accept(token):
            raise _Unreadable(f"expected {token!r}")

    def expect_end(self) -> None:
        if self.peek() is not None:
            raise _Unreadable(f"unexpected {self.peek()!r}")

    def name(self) -> str:
        token = self.take()
        if token.startswith("`"):
            return token[1:-1]
        if not (token[0].isalpha() or token[0] == "_"):
            raise _Unreadable(f"expected a name, got {token!r}")
        return token

    def number(self) -> int:
        token = self.take()
        if not token.isdigit():
            raise _Unreadable(f"expected a number, got {token!r}")
        return int(token)


def _read_type(tokens: _Tokens, depth: int) -> pa.DataType:
    if depth > MAX_NESTING:
        raise _Unreadable(f"types nest deeper than {MAX_NESTING} levels")
    word = tokens.take()
    if not (word[0].isalpha() or word[0] == "_"):
        tokens.failed_on_type = True
        raise _Unreadable(f"expected a type, got {word!r}")
    upper = word.upper()
    if upper in _DECIMAL or upper in ("ARRAY", "MAP", "STRUCT"):
        tokens.failed_on_type = True
    if upper in _DECIMAL:
        precision, scale = 10, 0
        if tokens.accept("("):
            precision = tokens.number()
            if tokens.accept(","):
                scale = tokens.number()
            tokens.expect(")")
        if not (1 <= precision <= 38 and scale <= precision):
            reason = "precision must be 1 to 38, scale at most the precision"
            raise _BadDecimal(f"DECIMAL({precision},{scale}): {reason}")
        return pa.decimal128(precision, scale)
    if upper in ("VARCHAR", "CHAR") and tokens.accept("("):
        tokens.number()
        tokens.expect(")")
        return pa.string()
    if upper == "ARRAY":
        tokens.expect("<")
        item = _read_type(tokens, depth + 1)
        tokens.expect(">")
        return pa.list_(item)
    if upper == "MAP":
        tokens.expect("<")
        key = _read_type(tokens, depth + 1)
        tokens.expect(",")
        value = _read_type(tokens, depth + 1)
        tokens.expect(">")
        return pa.map_(key, value)
    if upper == "STRUCT":
        tokens.expect("<")
        children: list[pa.Field[pa.DataType]] = []
        if not tokens.accept(">"):
            while True:
                name = tokens.name()
                tokens.accept(":")
                children.append(pa.field(name, _read_type(tokens, depth + 1)))
                if tokens.accept(">"):
                    break
                tokens.expect(",")
        names = [c.name.lower() for c in children]
        if len(set(names)) != len(names):
            raise _Unreadable("a STRUCT repeats a field name")
        return pa.struct(children)
    if upper in _SIMPLE:
        if tokens.peek() == "(":
            tokens.failed_on_type = True
            raise _Unreadable(f"{upper} takes no arguments")
        return _SIMPLE[upper]
    raise _UnknownType(upper)


def to_ddl(schema: pa.Schema) -> str:
    """The Spark DDL of an Arrow schema (the inverse of ``parse_ddl`` on its types)."""
    return ", ".join(f"`{name}` {spark_type(t)}" for name, t in zip(schema.names, schema.types, strict=True))


@functools.lru_cache(maxsize=256)
def spark_type(t: pa.DataType) -> str:
    """The Spark type name of an Arrow type; STRING for types Spark has no name for."""
    if pa.types.is_decimal(t):
        return f"DECIMAL({t.precision},{t.scale})"
    if pa.types.is_timestamp(t):
        return "TIMESTAMP" if t.tz else "TIMESTAMP_NTZ"
    if pa.types.is_map(t):
        return f"MAP<{spark_type(t.key_type)}, {spark_type(t.item_type)}>"
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return f"ARRAY<{spark_type(t.value_type)}>"
    if pa.types.is_struct(t):
        inner = ", ".join(f"`{f.name}`: {spark_type(f.type)}" for f in fields_of(t))
        return f"STRUCT<{inner}>"
    for name, arrow_type in _SIMPLE.items():
        if arrow_type == t:
            return name
    return "STRING"


def widen(schema: pa.Schema) -> pa.Schema:
    """Types as inferred from a sample, widened so later rows fit more often; nested types
    are widened inside (an empty list seen in the sample becomes a list of strings)."""
    return pa.schema(
        [pa.field(name, _widen_type(t)) for name, t in zip(schema.names, schema.types, strict=True)]
    )


def _widen_type(t: pa.DataType) -> pa.DataType:
    if pa.types.is_integer(t):
        return pa.int64()
    if pa.types.is_floating(t):
        return pa.float64()
    if pa.types.is_timestamp(t):
        return pa.timestamp("us", tz="UTC")
    if pa.types.is_boolean(t) or pa.types.is_date32(t) or pa.types.is_string(t):
        return t
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return pa.list_(_widen_type(t.value_type))
    if pa.types.is_struct(t) and t.num_fields:
        return pa.struct([pa.field(f.name, _widen_type(f.type)) for f in fields_of(t)])
    if pa.types.is_map(t):
        return pa.map_(_widen_type(t.key_type), _widen_type(t.item_type))
    return pa.string()


def _split_top_level(ddl: str) -> list[str]:
    parts: list[str] = []
    current: list[str] = []
    depth, quoted = 0, False
    for ch in ddl:
        if ch == "`":
            quoted = not quoted
        elif not quoted and ch in "(<":
            depth += 1
        elif not quoted and ch in ")>":
            depth -= 1
        if ch == "," and depth == 0 and not quoted:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return parts
