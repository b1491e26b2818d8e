"""Stream epochs without Spark for the simplest stateless queries: column projections and a
filter of comparisons with literals, evaluated by pyarrow over the epoch's landed files.

A Spark job costs an epoch 0.2-0.4 s on a warm session whatever its size (planning,
scheduling, the collect), which is most of a small epoch's latency; the same filter in
pyarrow takes milliseconds. Only queries whose result pyarrow computes exactly as Spark
would are taken (``arrow_plan`` answers None for any other, and Spark runs it):

- ``SELECT`` of ``*``, columns named exactly as the schema names them, and ``column AS
  alias``, each output name once, ``FROM source``, nothing else (no join, group, order,
  limit, distinct, function or expression in the projection);
- ``WHERE`` of ``AND``, ``OR``, ``NOT``, ``IS [NOT] NULL``, boolean columns, and the six
  comparisons between a column and a literal of its family: an integer literal with an
  integer or floating column, a decimal literal with a floating column, a string literal
  with a string column, ``TRUE``/``FALSE`` with a boolean column;
- columns of the plain types that Spark and pyarrow write alike (``writes_alike_with_arrow``).

SQL's three-valued logic is pyarrow's Kleene logic, and a filter drops a null condition as
``WHERE`` does. Spark orders NaN above every number (and NaN = NaN), IEEE below none: a
floating column's ``>`` and ``>=`` also take NaN, as Spark does. A floating column against
zero is left to Spark: Parquet's dictionary filter in Spark's reader drops -0.0 from
``x = 0``, which the comparison itself would keep (``test_arrow_query.py`` found it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError

from dataflow.transform_policy import SOURCE_VIEW

#: Integer literals beyond this are Spark DECIMALs, compared otherwise: left to Spark.
_MAX_EXACT_INT = 2**62

_FLIPPED = {
    exp.GT: exp.LT,
    exp.GTE: exp.LTE,
    exp.LT: exp.GT,
    exp.LTE: exp.GTE,
    exp.EQ: exp.EQ,
    exp.NEQ: exp.NEQ,
}
_COMPARE: dict[type[exp.Expression], Callable[..., Any]] = {
    exp.EQ: pc.equal,
    exp.NEQ: pc.not_equal,
    exp.GT: pc.greater,
    exp.GTE: pc.greater_equal,
    exp.LT: pc.less,
    exp.LTE: pc.less_equal,
}
#: The Arrow forms of the Spark types ``writes_alike_with_arrow`` takes.
_PLAIN_TYPES = (
    pa.types.is_boolean,
    pa.types.is_integer,
    pa.types.is_floating,
    pa.types.is_string,
    pa.types.is_large_string,
    pa.types.is_binary,
    pa.types.is_date32,
)

#: A table's rows -> a boolean array (or chunked array) of whether each passes.
Condition = Callable[[pa.Table], Any]


@dataclass(frozen=True)
class ArrowPlan:
    """A query pyarrow computes as Spark would: the source columns it reads, the filter, and
    each output column (its name, the source column it is)."""

    schema: pa.Schema
    outputs: tuple[tuple[str, str], ...]
    condition: Condition | None

    def read(self, paths: list[str]) -> pa.Table:
        """The result over landed Parquet files, each read with the run's schema."""
        needed = sorted({source for _, source in self.outputs} | set(self._filter_columns()))
        table = ds.dataset(paths, schema=self.schema, format="parquet").to_table(columns=needed or None)
        return self.apply(table)

    def apply(self, table: pa.Table) -> pa.Table:
        """The result over ``table`` (of the run's schema, or its needed columns)."""
        if self.condition is not None:
            table = table.filter(self.condition(table))
        return pa.table(
            [table.column(source) for _, source in self.outputs],
            schema=pa.schema([self.schema.field(source).with_name(name) for name, source in self.outputs]),
        )

    def _filter_columns(self) -> list[str]:
        return [f.name for f in self.schema] if self.condition is not None else []


def arrow_plan(sql: str, schema: pa.Schema) -> ArrowPlan | None:
    """The plan of ``sql`` over the view ``source`` of ``schema`` if pyarrow computes it
    exactly as Spark would (see the module's docstring), else None."""
    if not all(any(check(f.type) for check in _PLAIN_TYPES) for f in schema):
        return None
    try:
        query = sqlglot.parse_one(sql, read="spark")
    except (ParseError, TokenError):
        return None
    if not isinstance(query, exp.Select) or not _only_select_from_where(query):
        return None
    source = query.args["from"].this
    if not isinstance(source, exp.Table) or source.name.lower() != SOURCE_VIEW or source.db or source.alias:
        return None
    outputs = _outputs(query.expressions, schema)
    if outputs is None:
        return None
    where = query.args.get("where")
    condition = None
    if where is not None:
        condition = _condition(where.this, schema)
        if condition is None:
            return None
    return ArrowPlan(schema=schema, outputs=outputs, condition=condition)


def _only_select_from_where(query: exp.Select) -> bool:
    allowed = {"expressions", "from", "where"}
    return query.args.get("from") is not None and all(
        key in allowed or value in (None, [], False) for key, value in query.args.items()
    )


def _outputs(projections: list[exp.Expression], schema: pa.Schema) -> tuple[tuple[str, str], ...] | None:
    outputs: list[tuple[str, str]] = []
    for item in projections:
        if isinstance(item, exp.Star):
            outputs.extend((name, name) for name in schema.names)
        elif isinstance(item, exp.Column):
            name = _column_name(item, schema)
            if name is None:
                return None
            outputs.append((name, name))
        elif isinstance(item, exp.Alias) and isinstance(item.this, exp.Column):
            name = _column_name(item.this, schema)
            if name is None or not item.alias:
                return None
            outputs.append((item.alias, name))
        else:
            return None
    names = [name for name, _ in outputs]
    return tuple(outputs) if outputs and len(set(names)) == len(names) else None


def _column_name(column: exp.Column, schema: pa.Schema) -> str | None:
    """The schema's name of ``column`` if it names one exactly (unqualified or ``source.``)."""
    if isinstance(column.this, exp.Star) or column.args.get("db") or column.args.get("catalog"):
        return None
    if column.table and column.table.lower() != SOURCE_VIEW:
        return None
    name = column.name
    return name if schema.get_field_index(name) >= 0 else None


def _condition(node: exp.Expression, schema: pa.Schema) -> Condition | None:
    if isinstance(node, exp.Paren):
        return _condition(node.this, schema)
    if isinstance(node, (exp.And, exp.Or)):
        left, right = _condition(node.this, schema), _condition(node.expression, schema)
        if left is None or right is None:
            return None
        combine = pc.and_kleene if isinstance(node, exp.And) else pc.or_kleene
        return lambda t: combine(left(t), right(t))
    if isinstance(node, exp.Not):
        inner = _condition(node.this, schema)
        return None if inner is None else (lambda t: pc.invert(inner(t)))
    if (
        isinstance(node, exp.Is)
        and isinstance(node.expression, exp.Null)
        and isinstance(node.this, exp.Column)
    ):
        name = _column_name(node.this, schema)
        return None if name is None else (lambda t: pc.is_null(t.column(name), nan_is_null=False))
    if isinstance(node, exp.Column):
        name = _column_name(node, schema)
        if name is None or not pa.types.is_boolean(schema.field(name).type):
            return None
        return lambda t: t.column(name)
    if type(node) in _COMPARE:
        return _comparison(node, schema)
    return None


def _comparison(node: exp.Expression, schema: pa.Schema) -> Condition | None:
    kind: type[exp.Expression] = type(node)
    column, literal = node.this, node.expression
    if not isinstance(column, exp.Column):
        column, literal, kind = literal, column, _FLIPPED[kind]
    if not isinstance(column, exp.Column):
        return None
    name = _column_name(column, schema)
    if name is None:
        return None
    column_type = schema.field(name).type
    value = _literal(literal, column_type)
    if value is None:
        return None
    compare = _COMPARE[kind]
    if pa.types.is_floating(column_type) and kind in (exp.GT, exp.GTE):
        return lambda t: pc.or_kleene(compare(t.column(name), value), pc.is_nan(t.column(name)))
    return lambda t: compare(t.column(name), value)


def _literal(node: exp.Expression, column_type: pa.DataType) -> pa.Scalar | None:
    """``node`` as a scalar to compare with a column of ``column_type``, if Spark compares
    them in that type (see the module's docstring)."""
    negative = isinstance(node, exp.Neg)
    if negative:
        node = node.this
    if isinstance(node, exp.Boolean) and not negative:
        return pa.scalar(bool(node.this)) if pa.types.is_boolean(column_type) else None
    if not isinstance(node, exp.Literal):
        return None
    text = node.this
    if node.is_string:
        if negative or not (pa.types.is_string(column_type) or pa.types.is_large_string(column_type)):
            return None
        return pa.scalar(text, pa.string())
    if not (pa.types.is_integer(column_type) or pa.types.is_floating(column_type)):
        return None
    sign = -1 if negative else 1
    if pa.types.is_floating(column_type) and _is_zero(text):
        return None  # Parquet's dictionary filter in Spark's reader tells -0.0 from 0.0
    if text.isdigit():
        number = sign * int(text)
        if abs(number) > _MAX_EXACT_INT:
            return None
        return pa.scalar(number, pa.int64()) if pa.types.is_integer(column_type) else pa.scalar(float(number))
    if not pa.types.is_floating(column_type):
        return None  # a decimal literal against an integer column: Spark compares as DECIMAL
    try:
        return pa.scalar(sign * float(text))
    except ValueError:
        return None


def _is_zero(text: str) -> bool:
    try:
        return float(text) == 0
    except ValueError:
        return False
