"""What a Spark SQL transform may do: one query over the view ``source``, by an allow-list.

The query is parsed with sqlglot (dialect spark) and every node of the tree must be of an
allowed kind; every function it calls must be one of Spark's built-in functions that compute
a value from their arguments. Anything else (a script transform, reflection, a table-valued or
file-reading function, a command, a second statement) is refused with ``ConfigError`` on
``transform.sql``, saying what was found and why it is refused.

An allow-list rather than a deny-list: a Spark release that adds a function that runs code or
reads files adds nothing here. What sqlglot does not know (``exp.Anonymous``) passes only when
its name is listed in ``FUNCTIONS``.

Decisions: generators (``explode``, ``json_tuple``, ``stack``, ``inline``...) are allowed in the
SELECT list and in ``LATERAL VIEW``, never as a table in FROM; ``TABLESAMPLE`` is refused (a
retried transform would sample other rows, and a transform is replayed after a crash);
``${...}`` is refused (Spark's variable substitution reads the environment; the session also
turns it off); hints are limited to the planner's own (join strategies, repartitioning).
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from typing import NoReturn

import sqlglot
from django.conf import settings
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError
from sqlglot.tokens import TokenType

from source_support.errors import ConfigError


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


FIELD = "transform.sql"
SOURCE_VIEW = "source"
#: Parentheses (and brackets) nested deeper than this are refused before parsing: the parser
#: recurses about 20 Python frames per level (a RecursionError near 45), and no transform
#: needs more. A deep chain of another kind (``NOT NOT ...``) is refused by the RecursionError.
MAX_NESTING = 32

# Spark's built-in functions that compute a value from their arguments (scalar, aggregate,
# window, generator in the SELECT list, higher-order). Not here on purpose: reflect,
# java_method, try_reflect (call Java methods), xpath* and from_xml/schema_of_xml (XML
# parsers), from_protobuf/to_protobuf (read a descriptor file), from_avro/to_avro, version,
# input_file_name/input_file_block_* (name the server's landing files: its paths and run
# identities), read_files, range and every other table-valued function.
FUNCTIONS = _words(
    """
    abs acos acosh add_months aes_decrypt aes_encrypt aggregate and any any_value
    approx_count_distinct approx_percentile array array_agg array_append array_compact
    array_contains array_distinct array_except array_insert array_intersect array_join array_max
    array_min array_position array_prepend array_remove array_repeat array_size array_sort
    array_union arrays_overlap arrays_zip ascii asin asinh assert_true atan atan2 atanh avg
    base64 between bigint bin binary bit_and bit_count bit_get bit_length bit_or bit_xor
    bitmap_bit_position bitmap_bucket_number bitmap_construct_agg bitmap_count bitmap_or_agg
    bool_and bool_or boolean bround btrim cardinality case cast cbrt ceil ceiling char
    char_length character_length chr coalesce collate collation collect_list collect_set concat
    concat_ws contains conv convert_timezone corr cos cosh cot count count_if count_min_sketch
    covar_pop covar_samp crc32 csc cume_dist curdate current_date current_timestamp
    current_timezone date date_add date_diff date_format date_from_unix_date date_part date_sub
    date_trunc dateadd datediff datepart day dayname dayofmonth dayofweek dayofyear decimal
    decode degrees dense_rank div double e element_at elt encode endswith equal_null every
    exists exp explode explode_outer expm1 extract factorial filter find_in_set first
    first_value flatten float floor forall format_number format_string from_csv from_json
    from_unixtime from_utc_timestamp get get_json_object getbit greatest grouping grouping_id
    hash hex histogram_numeric hll_sketch_agg hll_sketch_estimate hll_union hll_union_agg hour
    hypot if ifnull ilike in initcap inline inline_outer instr int is_valid_utf8 is_variant_null isnan
    isnotnull isnull json_array_length json_object_keys json_tuple kurtosis lag last
    last_day last_value lcase lead least left len length levenshtein like listagg ln localtimestamp
    locate log log10 log1p log2 lower lpad ltrim luhn_check make_date make_dt_interval
    make_interval make_timestamp make_timestamp_ltz make_timestamp_ntz make_valid_utf8
    make_ym_interval map map_concat map_contains_key map_entries map_filter map_from_arrays
    map_from_entries map_keys map_values map_zip_with mask max max_by md5 mean median min
    min_by minute mod mode monotonically_increasing_id month monthname months_between
    named_struct nanvl negative next_day not now nth_value ntile nullif nullifzero nvl nvl2
    octet_length or overlay parse_json parse_url percent_rank percentile percentile_approx
    percentile_cont percentile_disc pi pmod posexplode posexplode_outer position positive pow
    power printf quarter radians raise_error rand randn random randstr rank regexp
    regexp_count regexp_extract regexp_extract_all regexp_instr regexp_like regexp_replace
    regexp_substr regr_avgx regr_avgy regr_count regr_intercept regr_r2 regr_slope regr_sxx
    regr_sxy regr_syy repeat replace reverse right rint rlike round row_number rpad rtrim
    schema_of_csv schema_of_json schema_of_variant sec second sentences sequence session_window
    sha sha1 sha2 shiftleft shiftright shiftrightunsigned shuffle sign signum sin sinh size
    skewness slice smallint some sort_array soundex space spark_partition_id split split_part
    sqrt stack startswith std stddev stddev_pop stddev_samp str_to_map string string_agg struct
    substr substring substring_index sum tan tanh timestamp timestamp_micros timestamp_millis
    timestamp_seconds timestampadd timestampdiff tinyint to_binary to_char to_csv to_date
    to_json to_number to_timestamp to_timestamp_ltz to_timestamp_ntz to_unix_timestamp
    to_utc_timestamp to_varchar to_variant_object transform transform_keys transform_values
    translate trim trunc try_add try_aes_decrypt try_avg try_divide try_element_at try_mod
    try_multiply try_parse_json try_parse_url try_subtract try_sum try_to_binary try_to_number
    try_to_timestamp try_url_decode try_validate_utf8 try_variant_get typeof ucase unbase64
    unhex uniform unix_date unix_micros unix_millis unix_seconds unix_timestamp upper
    url_decode url_encode uuid validate_utf8 var_pop var_samp variance variant_get weekday
    weekofyear when width_bucket window window_time xxhash64 year zeroifnull zip_with
    """
)

#: The sqlglot node kinds that the names in ``FUNCTIONS`` parse to (``sum`` -> ``Sum``,
#: ``date_format`` -> ``TimeToStr``). tests/dataflow/test_transform_policy.py derives this list
#: again from ``FUNCTIONS``, so a sqlglot upgrade that changes it fails a test, not a user.
FUNCTION_NODES = _words(
    """
    Abs AddMonths AnyValue ApproxDistinct ApproxQuantile ArgMax ArgMin Array ArrayAgg ArrayFilter
    ArrayIntersect ArrayRemove ArraySize ArraySlice ArraySort ArrayToString ArrayUniqueAgg Ascii
    AtTimeZone Avg BitwiseAndAgg BitwiseCountAgg BitwiseOrAgg BitwiseXorAgg Cast CastToStrType Cbrt Ceil
    Chr Coalesce Concat ConcatWs Contains ConvertTimezone Count CountIf CurrentDate CurrentTimestamp
    DateDiff DateFromUnixDate DateTrunc Day DayOfMonth DayOfWeek DayOfYear Decode DecodeCase Encode
    EndsWith Exp Explode ExplodeOuter Extract First FirstValue Flatten Floor FromBase64 FromTimeZone
    GenerateSeries Greatest GroupConcat Grouping Hex If Initcap Inline IsNan JSONFormat JSONPath Lag
    Last LastDay LastValue Lead Least Left Length Levenshtein Ln Log LogicalAnd LogicalOr Lower MD5
    MakeInterval Map MapFromEntries Max Median Min Month MonthsBetween NthValue Nullif Nvl2 Pad
    ParseJSON PercentileCont PercentileDisc Posexplode PosexplodeOuter Quantile Quarter Rand Randn
    Reduce RegexpExtract RegexpExtractAll RegexpReplace RegexpSplit Repeat Replace Reverse Right Round
    RowNumber SHA SHA2 Sign SortArray Soundex Space SplitPart Sqrt StartsWith Stddev StddevPop
    StddevSamp StrPosition StrToMap StrToTime StrToUnix Struct Substring SubstringIndex Sum
    TimeStrToTime TimeToStr TimestampAdd TimestampDiff TimestampTrunc ToBase64 ToChar ToNumber Transform
    Translate Trim TsOrDsAdd TsOrDsToDate Typeof Unhex UnixDate UnixMicros UnixMillis UnixSeconds
    UnixToStr Upper Uuid VarMap Variance VariancePop WeekOfYear Year
    """
)

#: Planner hints: they choose a join strategy or a partitioning, nothing else.
HINTS = _words(
    """
    broadcast broadcastjoin mapjoin merge shuffle_merge mergejoin shuffle_hash
    shuffle_replicate_nl repartition coalesce repartition_by_range rebalance
    """
)

# Node kinds that make up a query and its expressions. Functions (exp.Func) and binary
# operators (exp.Binary) are checked on their own below.
_NODES: tuple[type[exp.Expression], ...] = (
    exp.Select,
    exp.Union,
    exp.Intersect,
    exp.Except,
    exp.Values,
    exp.Subquery,
    exp.With,
    exp.CTE,
    exp.TableAlias,
    exp.From,
    exp.Join,
    exp.Lateral,
    exp.Where,
    exp.Group,
    exp.Having,
    exp.Qualify,
    exp.Order,
    exp.Ordered,
    exp.Limit,
    exp.Offset,
    exp.Distinct,
    exp.Cluster,
    exp.Distribute,
    exp.Sort,
    exp.Rollup,
    exp.Cube,
    exp.GroupingSets,
    exp.Pivot,
    exp.PivotAlias,
    exp.Window,
    exp.WindowSpec,
    exp.Table,
    exp.Tuple,
    exp.Star,
    exp.Column,
    exp.Identifier,
    exp.Literal,
    exp.Alias,
    exp.Aliases,
    exp.Null,
    exp.Boolean,
    exp.Paren,
    exp.Not,
    exp.Neg,
    exp.BitwiseNot,
    exp.Bracket,
    exp.DataType,
    exp.DataTypeParam,
    exp.ColumnDef,
    exp.Interval,
    exp.IntervalSpan,
    exp.Var,
    exp.HexString,
    exp.Lambda,
    exp.Filter,
    exp.IgnoreNulls,
    exp.RespectNulls,
    exp.WithinGroup,
    exp.Any,
    exp.All,
    exp.Exists,
    exp.In,
    exp.Between,
    exp.Hint,
    exp.JoinHint,
    # Written with their own syntax rather than as a call.
    exp.Case,
    exp.TryCast,
    exp.JSONPathPart,
)

_DESCRIBED: dict[type[exp.Expression], str] = {
    exp.QueryTransform: "a script transform (TRANSFORM ... USING runs a program)",
    exp.TableSample: "TABLESAMPLE (a retried transform would sample other rows)",
    exp.Version: "time travel (VERSION or TIMESTAMP AS OF)",
    exp.Placeholder: "a parameter placeholder",
    exp.Parameter: "a parameter",
    exp.Into: "INTO",
}


def transform_policy_check(sql: str) -> exp.Expression:
    """The parsed query if ``sql`` is one query that only reads the view ``source``.

    Raises ``ConfigError("transform.sql", ...)`` naming what is refused and why.
    """
    if "${" in sql:
        _refuse("uses ${...}: variable substitution is not allowed (it can read the environment)")
    _check_size(sql)
    tokens = _tokens(sql)
    _check_tokens(tokens)
    _check_nesting(tokens)
    try:
        statements = [s for s in sqlglot.parse(_for_parsing(sql, tokens), read="spark") if s is not None]
    except (ParseError, TokenError) as exc:
        _refuse(f"does not parse: {_first_line(exc)}")
    except RecursionError:
        _refuse("is nested too deeply to check")
    if len(statements) != 1:
        _refuse(f"must be one query over the view 'source'; found {len(statements)} statements")
    query = statements[0]
    if not isinstance(query, (exp.Query, exp.Values)):
        kind = str(query.this).upper() if isinstance(query, exp.Command) else query.key.upper()
        _refuse(f"must be one SELECT query (WITH, UNION, VALUES allowed), not a {kind} statement")
    _Walk(query).run()
    return query


def _refuse(reason: str) -> NoReturn:
    raise ConfigError(FIELD, reason)


def _tokens(sql: str) -> list:
    try:
        return sqlglot.tokenize(sql, read="spark")
    except (TokenError, ParseError) as exc:
        _refuse(f"does not parse: {_first_line(exc)}")


def _check_size(sql: str) -> None:
    """Refuses a query whose check would cost the web tier too much CPU, before it is
    tokenized: more bytes than ``DATAFLOW_TRANSFORM_MAX_SQL_BYTES`` (the figures that set the
    limits are in dataflow/settings.py)."""
    size, limit = len(sql.encode()), settings.DATAFLOW_TRANSFORM_MAX_SQL_BYTES
    if size > limit:
        _refuse(
            f"is {size:,} bytes, more than DATAFLOW_TRANSFORM_MAX_SQL_BYTES = {limit:,}; shorten the query"
        )


def _check_tokens(tokens: list) -> None:
    """Refuses a query of more tokens than ``DATAFLOW_TRANSFORM_MAX_SQL_TOKENS`` before it is
    parsed: the parse costs about 50-130 microseconds a token."""
    limit = settings.DATAFLOW_TRANSFORM_MAX_SQL_TOKENS
    if len(tokens) > limit:
        _refuse(
            f"has {len(tokens):,} tokens, more than DATAFLOW_TRANSFORM_MAX_SQL_TOKENS = {limit:,}; "
            "shorten the query"
        )


def _check_nesting(tokens: list) -> None:
    depth = 0
    for token in tokens:
        if token.token_type in (TokenType.L_PAREN, TokenType.L_BRACKET):
            depth += 1
            if depth > MAX_NESTING:
                _refuse(f"is nested too deeply (at most {MAX_NESTING} levels of parentheses)")
        elif token.token_type in (TokenType.R_PAREN, TokenType.R_BRACKET):
            depth -= 1


def _for_parsing(sql: str, tokens: list) -> str:
    """``sql`` with ``window(`` quoted as a function name: sqlglot takes WINDOW for the clause
    keyword and cannot parse Spark's ``window(ts, '5 minutes')`` in GROUP BY. Only the text
    checked changes; Spark runs ``sql`` as given."""
    out, last = [], 0
    for token, following in zip(tokens, tokens[1:], strict=False):
        if token.token_type == TokenType.WINDOW and following.token_type == TokenType.L_PAREN:
            out.append(sql[last : token.start])
            out.append(f"`{token.text}`")
            last = token.end + 1
    out.append(sql[last:])
    return "".join(out)


@dataclass
class _Walk:
    query: exp.Expression

    def run(self) -> None:
        ctes = {cte.alias_or_name.lower() for cte in self.query.find_all(exp.CTE)}
        self.readable = ctes | {SOURCE_VIEW}
        try:
            for node in self.query.walk():
                self.check(node)
        except RecursionError:
            _refuse("is nested too deeply to check")

    def check(self, node: exp.Expression) -> None:
        if isinstance(node, exp.Dot) and isinstance(node.expression, exp.Func):
            _refuse(
                f"calls {node.sql(dialect='spark')[:80]}: a function may not be named "
                "with a catalog or database, only by its plain name"
            )
        if isinstance(node, exp.Binary):  # operators, and AND/OR (which are also Func)
            return
        if isinstance(node, exp.Table):
            self.check_table(node)
        elif isinstance(node, exp.Func) and (
            isinstance(node, exp.Anonymous) or isinstance(node.parent, (exp.Hint, exp.JoinHint))
        ):
            self.check_function(node)
        elif not (isinstance(node, _NODES) or type(node).__name__ in FUNCTION_NODES):
            what = _DESCRIBED.get(type(node), f"{type(node).__name__} ({node.sql(dialect='spark')[:60]})")
            _refuse(f"uses {what}, which a transform may not use; only a query over 'source' is allowed")

    def check_table(self, table: exp.Table) -> None:
        shown = table.sql(dialect="spark")[:80]
        if isinstance(table.parent, exp.JoinHint) and isinstance(table.this, exp.Identifier):
            return  # BROADCAST(b) names a relation of the query, it reads nothing
        if not isinstance(table.this, exp.Identifier):
            _refuse(f"reads {shown}: a table-valued function or a file; only the view 'source' may be read")
        if table.db or table.catalog:
            _refuse(f"reads {shown}: a file or another table; only the view 'source' may be read")
        if table.name.lower() not in self.readable:
            _refuse(f"reads table {table.name!r}; only the view 'source' (and the query's CTEs) may be read")

    def check_function(self, func: exp.Func) -> None:
        name = func.name.lower() if isinstance(func, exp.Anonymous) else func.key
        if isinstance(func.parent, (exp.Hint, exp.JoinHint)):
            if name not in HINTS:
                _refuse(f"uses the hint {name.upper()}; allowed hints: {', '.join(sorted(HINTS))}")
        elif name not in FUNCTIONS:
            _refuse(f"calls {name}(), which is not an allowed function{_why(name)}")


def _why(name: str) -> str:
    if name in {"reflect", "java_method", "try_reflect"}:
        return ": it calls Java methods"
    if name.startswith("input_file_"):
        return ": it names the service's landing files, not your data"
    if name in {"read_files", "range"} or name.startswith("read_"):
        return ": it is a table-valued function; only the view 'source' may be read"
    return ": a transform may use Spark's built-in functions that compute values"


def _first_line(exc: Exception) -> str:
    text = str(exc).strip()
    return re.sub(r"\x1b\[[0-9;]*m", "", text.splitlines()[0]) if text else type(exc).__name__


# Names Spark may resolve without a column of that name (niladic functions).
_NILADIC = {"current_date", "current_timestamp", "current_user", "user", "session_user", "localtimestamp"}
# Functions whose output columns Spark names itself (``col``, ``pos``, ``c0``, a struct's
# fields): a query that uses one unaliased may refer to names no text of the query shows.
_SELF_NAMING = (exp.Explode, exp.Posexplode, exp.Inline, exp.ExplodeOuter, exp.PosexplodeOuter)
_SELF_NAMING_ANONYMOUS = {"json_tuple", "stack", "inline_outer"}


def transform_columns_check(query: exp.Expression, columns: list[str], partition_by: list[str]) -> None:
    """Refuses a column reference that nothing defines, and a ``partition_by`` column that the
    query does not output, with the nearest names as a suggestion.

    Conservative, without Spark: a name is accepted when the schema, an alias, a CTE or
    lambda parameter anywhere in the query defines it; qualified names (``t.x``, a struct's
    ``user.name``) are left to Spark's own analysis when the run starts.
    """
    schema = {c.lower(): c for c in columns}
    defined = set(schema) | _NILADIC | _defined_names(query)
    if not _has_self_naming(query):
        for column in query.find_all(exp.Column):
            if column.table or isinstance(column.this, exp.Star):
                continue
            name = column.name
            if name.lower() not in defined:
                raise ConfigError(
                    FIELD,
                    f"refers to column {name!r}, which the schema does not have"
                    f"{_suggest(name, schema.values())} (columns: {', '.join(columns)})",
                )
    outputs = _output_names(query, columns)
    if outputs is None:
        return
    for name in partition_by:
        if name.lower() not in {o.lower() for o in outputs}:
            raise ConfigError(
                "sink.partition_by",
                f"names {name!r}, which the transform does not output{_suggest(name, outputs)} "
                f"(outputs: {', '.join(outputs)})",
            )


def _defined_names(query: exp.Expression) -> set[str]:
    names: set[str] = set()
    for node in query.walk():
        if isinstance(node, exp.Alias):
            names.add(node.alias.lower())
        elif isinstance(node, exp.TableAlias):
            names.add(node.name.lower())
            names |= {c.name.lower() for c in node.columns}
        elif isinstance(node, (exp.Lambda, exp.Aliases)):
            names |= {e.name.lower() for e in node.expressions}
        elif isinstance(node, exp.Pivot):
            # A PIVOT's columns are named by its IN values; an UNPIVOT's by its own names.
            for part in node.walk():
                if isinstance(part, (exp.Literal, exp.Identifier)):
                    names.add(str(part.this).lower())
    return names


def _has_self_naming(query: exp.Expression) -> bool:
    for node in query.walk():
        if isinstance(node, _SELF_NAMING) and not isinstance(node.parent, exp.Alias):
            return True
        if isinstance(node, exp.Anonymous) and node.name.lower() in _SELF_NAMING_ANONYMOUS:
            return True
        if isinstance(node, exp.Lateral):
            return True
    return False


def transform_output_names(query: exp.Expression, columns: list[str]) -> list[str] | None:
    """The names of the query's output columns over a source of ``columns``, or None when
    they cannot be told without Spark."""
    return _output_names(query, columns)


def _output_names(query: exp.Expression, columns: list[str]) -> list[str] | None:
    """The names of the query's output columns, or None when they cannot be told without Spark."""
    while isinstance(query, (exp.SetOperation, exp.Subquery)):
        query = query.this
    if not isinstance(query, exp.Select):
        return None
    reads_source_alone = (
        isinstance(query.args.get("from"), exp.From)
        and isinstance(query.args["from"].this, exp.Table)
        and query.args["from"].this.name.lower() == SOURCE_VIEW
        and not query.args.get("joins")
        and not query.args.get("laterals")
        and not query.args.get("pivots")
        and not query.args["from"].this.args.get("pivots")
        and not query.args.get("with")
    )
    outputs: list[str] = []
    for projection in query.expressions:
        if isinstance(projection, exp.Star) and reads_source_alone:
            outputs.extend(columns)
        elif isinstance(projection, exp.Star) or (
            isinstance(projection, exp.Column) and isinstance(projection.this, exp.Star)
        ):
            return None
        elif isinstance(projection, (exp.Alias, exp.Column)):
            outputs.append(projection.alias_or_name)
        else:
            return None
    return outputs


def _suggest(name: str, candidates) -> str:
    close = difflib.get_close_matches(name.lower(), [c.lower() for c in candidates], n=3, cutoff=0.6)
    originals = {c.lower(): c for c in candidates}
    return f"; did you mean {' or '.join(repr(originals[c]) for c in close)}?" if close else ""
