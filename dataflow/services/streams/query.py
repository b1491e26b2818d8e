"""How the streaming transform may run a flow's query over what keeps landing.

An unbounded run transforms its input in epochs (``dataflow.services.streaming``), and a
query's kind says what one epoch may run it over:

- stateless (projections, filters, CTEs, ``UNION ALL``, generators): each row once, in the
  epoch that took its batch;
- a tumbling event-time window (``GROUP BY window(ts, '10 seconds'), ...``): each window once,
  in the epoch in which the watermark passed its end, over the rows of that window alone;
- anything else (a GROUP BY without a window, a global aggregate, DISTINCT, ORDER BY, LIMIT,
  a join, a window function, a subquery expression): its result is known only when the
  input ends, so it runs once, over everything landed, after a ``[stop]`` rule ended it.

The kind is read from the query's tree as parsed by ``transform_policy_check``; the driver
also checks Spark's analyzed plan against it (``plan_contradiction``).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

import pyarrow as pa
from sqlglot import exp

from dataflow.transform_policy import FIELD, transform_policy_check
from source_support.durations import parse_duration_ms
from source_support.errors import ConfigError
from source_support.schema import parse_ddl


class QueryKind(StrEnum):
    STATELESS = "stateless"
    WINDOW = "window"
    WHOLE_INPUT = "whole_input"


@dataclass(frozen=True)
class StreamQuery:
    kind: QueryKind
    #: WINDOW: the event-time column, as the query names it, and the window's size.
    time_column: str = ""
    window_ms: int = 0
    #: WHOLE_INPUT: why the query needs the end of the input.
    reason: str = ""


#: Spark's aggregate functions that sqlglot parses as a plain call (``exp.Anonymous``);
#: the others parse to an ``exp.AggFunc``. tests/dataflow/services/streams/test_query.py checks both.
_ANONYMOUS_AGGREGATE_NAMES = """
    bitmap_construct_agg bitmap_or_agg count_min_sketch every grouping_id histogram_numeric
    hll_sketch_agg hll_union_agg kurtosis mean mode regr_avgx regr_avgy regr_count
    regr_intercept regr_r2 regr_slope regr_sxx regr_sxy regr_syy skewness some std try_avg
    try_sum
"""
ANONYMOUS_AGGREGATES = frozenset(_ANONYMOUS_AGGREGATE_NAMES.split())

#: Nodes whose result depends on rows of other epochs, with the reason shown to the user.
_WHOLE_INPUT_NODES: tuple[tuple[type[exp.Expression], str], ...] = (
    (exp.Window, "a window function (OVER) looks at rows across the whole input"),
    (exp.Limit, "LIMIT picks rows out of the whole input"),
    (exp.Offset, "OFFSET skips rows of the whole input"),
    (exp.Join, "a join matches rows across the whole input"),
    (exp.Intersect, "INTERSECT compares rows across the whole input"),
    (exp.Except, "EXCEPT compares rows across the whole input"),
    (exp.Pivot, "PIVOT aggregates the whole input"),
    (exp.Rollup, "ROLLUP adds totals over the whole input"),
    (exp.Cube, "CUBE adds totals over the whole input"),
    (exp.GroupingSets, "GROUPING SETS add totals over the whole input"),
)


def stream_query_classify(sql: str) -> StreamQuery:
    """The kind of ``sql`` (which must pass ``transform_policy_check``; ConfigError if not)."""
    query = transform_policy_check(sql)
    reason = _whole_input_node(query)
    if reason:
        return StreamQuery(QueryKind.WHOLE_INPUT, reason=reason)
    aggregating = _aggregating_selects(query)
    if not aggregating:
        return StreamQuery(QueryKind.STATELESS)
    windows = set()
    for select in aggregating:
        window = _tumbling_window(select)
        if isinstance(window, str):
            return StreamQuery(QueryKind.WHOLE_INPUT, reason=window)
        windows.add(window)
    if len(windows) > 1:
        return StreamQuery(
            QueryKind.WHOLE_INPUT, reason="its aggregations group by different event-time windows"
        )
    column, size = windows.pop()
    if column.lower() in _aliases(query):
        return StreamQuery(
            QueryKind.WHOLE_INPUT,
            reason=f"the window's time column {column!r} is computed by the query; "
            "a streaming window needs a TIMESTAMP column of the source",
        )
    return StreamQuery(QueryKind.WINDOW, time_column=column, window_ms=size)


def stream_query_check(sql: str, *, has_stop_rule: bool, schema_ddl: str | None = None) -> None:
    """Refuses (``ConfigError`` on ``transform.sql``) the query of an unbounded flow that
    needs the end of its input when the flow has no ``[stop]`` rule to end it, and a
    window whose time column is not a TIMESTAMP column of ``schema_ddl`` (when known)."""
    query = stream_query_classify(sql)
    if query.kind == QueryKind.WHOLE_INPUT and not has_stop_rule:
        raise ConfigError(
            FIELD,
            f"gives its result only when the input ends ({query.reason}), and this source has no "
            "end: add a [stop] rule, or group by an event-time window such as "
            "GROUP BY window(ts, '1 minute')",
        )
    if query.kind == QueryKind.WINDOW and schema_ddl:
        problem = time_column_problem(parse_ddl(schema_ddl), query.time_column)
        if problem:
            raise ConfigError(FIELD, problem)


def time_column_problem(schema: pa.Schema, column: str) -> str:
    """Why ``column`` cannot be a window's event time in ``schema`` (empty if it can)."""
    field = schema_field(schema, column)
    if field is None:
        return (
            f"the window's time column {column!r} is not a column of the schema ({', '.join(schema.names)})"
        )
    if not pa.types.is_timestamp(field.type):
        return f"the window's time column {field.name!r} is {field.type}, not a TIMESTAMP column"
    return ""


def schema_field(schema: pa.Schema, column: str) -> pa.Field | None:
    """The field of ``schema`` that Spark resolves ``column`` to (names are case-insensitive)."""
    return next((f for f in schema if f.name.lower() == column.lower()), None)


def _whole_input_node(query: exp.Expression) -> str:
    for node in query.walk():
        for kind, reason in _WHOLE_INPUT_NODES:
            if isinstance(node, kind):
                return reason
        if isinstance(node, exp.Distinct) and isinstance(node.parent, exp.Select):
            return "SELECT DISTINCT compares rows across the whole input"
        if isinstance(node, exp.Values) or (isinstance(node, exp.Select) and not node.args.get("from")):
            return "rows that do not come from 'source' (VALUES, a SELECT without FROM) would repeat in every epoch"
        if isinstance(node, exp.Union) and node.args.get("distinct"):
            return "UNION (without ALL) compares rows across the whole input"
        if type(node) is exp.Order and not isinstance(node.parent, exp.WithinGroup):
            # Not SORT BY, CLUSTER BY, DISTRIBUTE BY (exp.Order's subclasses): they only
            # place rows among Spark's partitions, which an epoch may do on its own.
            return "ORDER BY sorts the whole input"
        if isinstance(node, exp.Query) and not _is_relation(node):
            return "a subquery expression (IN, EXISTS, a scalar subquery) reads the whole input"
    return ""


def _is_relation(query: exp.Expression) -> bool:
    """Whether a SELECT is the query itself, a CTE, a branch of UNION ALL or a derived
    table, rather than an expression (``IN (SELECT ...)``, ``EXISTS``, a scalar subquery)."""
    parent = query.parent
    while isinstance(parent, exp.Subquery):
        parent = parent.parent
    return parent is None or isinstance(parent, (exp.From, exp.Join, exp.CTE, exp.With, exp.SetOperation))


def _aggregating_selects(query: exp.Expression) -> list[exp.Select]:
    selects: dict[int, exp.Select] = {}
    for node in query.walk():
        if isinstance(node, exp.Select) and (node.args.get("group") or node.args.get("having")):
            selects[id(node)] = node
        elif _is_aggregate(node):
            select = node.find_ancestor(exp.Select)
            if select is not None:
                selects[id(select)] = select
    return list(selects.values())


def _is_aggregate(node: exp.Expression) -> bool:
    if isinstance(node, exp.Anonymous):
        return node.name.lower() in ANONYMOUS_AGGREGATES
    return isinstance(node, (exp.AggFunc, exp.Any))


def _tumbling_window(select: exp.Select) -> tuple[str, int] | str:
    """(time column, size in ms) of the tumbling window ``select`` groups by, or why it
    needs the whole input."""
    group = select.args.get("group")
    if group is None:
        return "an aggregate without GROUP BY (a global count, sum...) covers the whole input"
    calls = [c for c in (_resolve(item, select) for item in group.expressions) if _call_name(c)]
    if any(_call_name(c) == "session_window" for c in calls):
        return "a session window can grow to any length: it closes only when the input ends"
    windows = [c for c in calls if isinstance(c, exp.Anonymous) and _call_name(c) == "window"]
    if not windows:
        return "GROUP BY without an event-time window: a group is complete only when the input ends"
    return _window_of(windows[0])


def _resolve(item: exp.Expression, select: exp.Select) -> exp.Expression:
    """A GROUP BY item, with an alias or an ordinal replaced by the projection it names."""
    projections = select.expressions
    if isinstance(item, exp.Literal) and not item.is_string and item.this.isdigit():
        index = int(item.this) - 1
        item = projections[index] if 0 <= index < len(projections) else item
    elif isinstance(item, exp.Column) and not item.table:
        named = [p for p in projections if isinstance(p, exp.Alias) and p.alias.lower() == item.name.lower()]
        item = named[0] if named else item
    return item.this if isinstance(item, exp.Alias) else item


def _call_name(node: exp.Expression) -> str:
    return node.name.lower() if isinstance(node, exp.Anonymous) else ""


def _window_of(call: exp.Anonymous) -> tuple[str, int] | str:
    args = call.expressions
    shown = f"window({', '.join(a.sql(dialect='spark') for a in args)})"
    if not 2 <= len(args) <= 3 or not isinstance(args[0], exp.Column):
        return f"{shown} is not a tumbling window over a column (window(ts, '10 seconds'))"
    if args[0].table and args[0].table.lower() not in _relation_names(call):
        return f"{shown}: the window's time column must be a top-level column of the source, not a field"
    sizes = [size for a in args[1:] if (size := _duration_ms(a)) is not None]
    if len(sizes) < len(args) - 1:
        return f"{shown}: the window's duration must be a literal such as '10 seconds' or '1 minute'"
    if len(set(sizes)) > 1:
        return f"{shown} is a sliding window; the streaming transform emits tumbling windows"
    if sizes[0] <= 0:
        return f"{shown}: the window's duration must be positive"
    return args[0].name, sizes[0]


def _relation_names(node: exp.Expression) -> set[str]:
    """Names a column may be qualified with: the view, CTEs and table aliases."""
    root = node.root()
    names = {"source"} | {cte.alias_or_name.lower() for cte in root.find_all(exp.CTE)}
    return names | {alias.name.lower() for alias in root.find_all(exp.TableAlias)}


def _duration_ms(arg: exp.Expression) -> int | None:
    if not (isinstance(arg, exp.Literal) and arg.is_string):
        return None
    text = arg.this.strip()
    if text.lower().startswith("interval "):
        text = text[len("interval ") :]
    try:
        return parse_duration_ms(text)
    except ValueError:
        return None


def _aliases(query: exp.Expression) -> set[str]:
    names = set()
    for node in query.walk():
        if isinstance(node, exp.Alias):
            names.add(node.alias.lower())
        elif isinstance(node, exp.TableAlias):
            names |= {c.name.lower() for c in node.columns}
    return names


#: Spark plan nodes (analyzed) that contradict a kind: found there, the classification missed
#: something, and the run fails rather than write a wrong result.
_REFUSED_IN_ANY_EPOCH = (
    "Window",
    "GlobalLimit",
    "Deduplicate",
    "Distinct",
    "Join",
    "Intersect",
    "Except",
    "Expand",
    "ScalarSubquery",
    "Exists",
    "ListQuery",
)
_PLAN_NODES_REFUSED = {
    QueryKind.STATELESS: ("Aggregate", *_REFUSED_IN_ANY_EPOCH),
    QueryKind.WINDOW: _REFUSED_IN_ANY_EPOCH,
}


def plan_contradiction(frame, kind: QueryKind) -> str:
    """What Spark's analyzed plan of ``frame`` holds that a ``kind`` query may not (empty:
    nothing; also empty on Spark Connect, where the plan is not on this side)."""
    jdf = getattr(frame, "_jdf", None)
    refused = _PLAN_NODES_REFUSED.get(kind, ())
    if jdf is None or not refused:
        return ""
    try:
        plan = jdf.queryExecution().analyzed().toJSON()
    except Exception:  # noqa: BLE001 - a plan that cannot be shown as JSON; the tree was checked
        return ""
    found = [name for name in refused if f'.{name}"' in plan]
    if not found:
        return ""
    return (
        f"Spark's plan of the query has {', '.join(found)}, which a {kind.value.replace('_', ' ')} "
        "streaming query may not have"
    )
