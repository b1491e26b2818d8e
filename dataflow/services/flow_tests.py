"""Flow tests from fixtures (``[[test]]``): a flow's transform run on a local Spark session
over a few input records, compared with the rows it should give.

Each test's input goes through the flow's real ``[format]`` parser (a file, or inline
``records`` given to the JSON lines parser with the flow's schema), lands as Parquet as a
run lands it, and the flow's SQL and ``[[expect]]`` run over it in Spark. The output is
compared with ``expect`` (a CSV or JSON lines file read with the output's types) or
inline ``rows``, by type and value: 1 and "1" differ, 1.50 and 1.5 in a decimal column do
not; a column missing from an inline row is null. Order counts only with ``ordered = true``.
"""

from __future__ import annotations

import datetime as dt
import json
import tempfile
from collections import Counter
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from dataflow.services.expectations import expectations_apply, expectations_validate
from dataflow.services.specs import flow_tests_validate
from dataflow.services.toml_import import flow_spec_from_toml_bytes
from dataflow.spark.jobs import quiet_query_errors
from dataflow.spark.session import spark_job
from dataflow.transform_policy import SOURCE_VIEW, transform_policy_check
from source_support.errors import ConfigError
from source_support.formats import JSON_LAYOUT_SAMPLE, CsvFormat, FormatSpec, RecordFormat, validate_format
from source_support.lines import UTF8_BOM
from source_support.schema import to_ddl

#: How many rows of each kind a failing test's diff shows.
DIFF_ROWS_SHOWN = 20
#: The most rows a fixture may hold: a flow test is a few records, not a data set.
MAX_FIXTURE_ROWS = 100_000
TEST_SUFFIX = ".test.toml"


@dataclass
class FlowTestResult:
    """One ``[[test]]``'s outcome: ``report`` is empty when it passed, else why not (the
    diff of rows, or the error)."""

    file: str
    name: str
    passed: bool
    report: str = ""


def flow_tests_run(*, path: Path) -> list[FlowTestResult]:
    """Runs the tests of the flow file ``path`` (its ``[[test]]`` and those of the
    ``NAME.test.toml`` beside it) or of a ``NAME.test.toml`` (the flow is ``NAME.toml``
    beside it). A ConfigError names the file and field of a flow or test that is refused."""
    flow_path, test_paths = _files_of(path)
    flow = _load(flow_path)
    tests: list[tuple[Path, dict[str, Any]]] = []
    for test_path in test_paths:
        doc = flow if test_path == flow_path else _load(test_path)
        extra = set(doc) - {"test"} if test_path != flow_path else set()
        if extra:
            raise ConfigError(
                f"{test_path}: {sorted(extra)[0]}", "a .test.toml file holds only [[test]] tables"
            )
        try:
            checked = flow_tests_validate(doc.get("test"))
        except ConfigError as exc:
            raise ConfigError(f"{test_path}: {exc.field}", exc.reason) from None
        tests += [(test_path, t) for t in checked]
    if not tests:
        raise ConfigError(f"{flow_path}: test", "the flow has no [[test]] (nor a .test.toml beside it)")
    try:
        fmt, sql, expectations = _flow_parts(flow)
    except ConfigError as exc:
        raise ConfigError(f"{flow_path}: {exc.field}", exc.reason) from None
    with spark_job() as spark, quiet_query_errors(), tempfile.TemporaryDirectory() as scratch:
        return [
            _run_one(spark, fmt, sql, expectations, test_path, test, Path(scratch) / f"{i}.parquet")
            for i, (test_path, test) in enumerate(tests)
        ]


def _files_of(path: Path) -> tuple[Path, list[Path]]:
    if path.name.endswith(TEST_SUFFIX):
        flow_path = path.with_name(path.name.removesuffix(TEST_SUFFIX) + ".toml")
        if not flow_path.is_file():
            raise ConfigError(str(path), f"its flow {flow_path.name} is not beside it")
        return flow_path, [path]
    beside = path.with_name(path.name.removesuffix(".toml") + TEST_SUFFIX)
    return path, [path, *([beside] if beside.is_file() else [])]


def _load(path: Path) -> dict[str, Any]:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(str(path), f"cannot be read: {exc.strerror}") from None
    try:
        return flow_spec_from_toml_bytes(data)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc.field}", exc.reason) from None


def _flow_parts(doc: dict[str, Any]) -> tuple[FormatSpec, str, list[dict[str, str]]]:
    """The flow's format, SQL and expectations, checked as a save checks them."""
    fmt_table = doc.get("format") or {"type": "csv"}
    if not isinstance(fmt_table, dict):
        raise ConfigError("format", "must be a table")
    fmt = validate_format(fmt_table)
    if fmt.type not in ("csv", "jsonl"):
        raise ConfigError("format.type", f"flow tests read csv and json records, not {fmt.type}")
    transform = doc.get("transform")
    sql = transform.get("sql") if isinstance(transform, dict) else None
    if not isinstance(sql, str) or not sql.strip():
        raise ConfigError("transform.sql", "is required: a Spark SQL query over the view 'source'")
    query = transform_policy_check(sql)
    return fmt, sql.strip().rstrip(";"), expectations_validate(doc.get("expect"), query=query)


def _run_one(spark, fmt, sql, expectations, test_path: Path, test: dict[str, Any], scratch: Path):
    name = test["name"]
    try:
        records = _input(fmt, test, base=test_path.parent)
        pq.write_table(records, scratch)
        spark.read.schema(to_ddl(records.schema)).parquet(str(scratch)).createOrReplaceTempView(SOURCE_VIEW)
        result, _ = expectations_apply(spark.sql(sql), expectations)
        actual = result.toArrow()
        expected = _expected(test, actual.schema, base=test_path.parent)
    except Exception as exc:  # noqa: BLE001 - whatever stops a test is its report
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return FlowTestResult(str(test_path), name, False, f"error: {message}")
    report = rows_diff(
        actual=actual.to_pylist(),
        expected=expected,
        columns=actual.column_names,
        ordered=test.get("ordered", False),
    )
    return FlowTestResult(str(test_path), name, not report, report)


def _input(fmt: FormatSpec, test: dict[str, Any], *, base: Path) -> pa.Table:
    if "records" in test:
        lines = b"".join(json.dumps(r, default=str).encode() + b"\n" for r in test["records"])
        jsonl = FormatSpec("jsonl", {k: v for k, v in fmt.options.items() if k == "schema"})
        return parse_records(jsonl.build(), lines, where="records")
    data = _fixture(base, test["input"], "input")
    return parse_records(fmt.build(), data, where=test["input"])


def _expected(test: dict[str, Any], schema: pa.Schema, *, base: Path) -> list[dict[str, Any]]:
    if "rows" in test:
        unknown = sorted({k for row in test["rows"] for k in row} - set(schema.names))
        if unknown:
            raise ConfigError(
                "rows", f"name {unknown[0]!r}, not a column of the output ({', '.join(schema.names)})"
            )
        decimals = {f.name for f in schema if pa.types.is_decimal(f.type)}
        return [
            {c: _decimal(row.get(c)) if c in decimals else row.get(c) for c in schema.names}
            for row in test["rows"]
        ]
    name = test["expect"]
    data = _fixture(base, name, "expect")
    reader = CsvFormat(schema=schema) if name.endswith(".csv") else FormatSpec("jsonl", {}).build(schema)
    return parse_records(reader, data, where=name).to_pylist()


def _decimal(value: Any) -> Any:
    """A decimal column's expected value: TOML has no decimals, so a number or a string
    of one ("3.75") is taken exactly."""
    if isinstance(value, str | int | float) and not isinstance(value, bool):
        try:
            return Decimal(str(value))
        except InvalidOperation:
            return value
    return value


def _fixture(base: Path, name: str, field: str) -> bytes:
    path = base / name
    try:
        return path.read_bytes()
    except OSError as exc:
        raise ConfigError(field, f"{path} cannot be read: {exc.strerror}") from None


def parse_records(fmt: Any, data: bytes, *, where: str) -> pa.Table:
    """The records of a whole file's ``data`` through the format's parser, as a reader
    parses a file (its header, its layout); a bad record is an error naming its line."""
    if not isinstance(fmt, RecordFormat):
        raise ConfigError(where, "flow tests read csv and json records")
    data = data.removeprefix(UTF8_BOM)
    if fmt.chooses_by_head:
        fmt = fmt.for_file(data[:JSON_LAYOUT_SAMPLE])
    if fmt.schema is None:
        fmt = fmt.with_schema(fmt.infer_schema(data))
    body = 0
    if fmt.has_header:
        end = data.find(b"\n")
        body = len(data) if end < 0 else end + 1
        if isinstance(fmt, CsvFormat):
            fmt = fmt.bind_header(data[:body])
    elif fmt.preamble_bytes:
        body = fmt.preamble_length(data[: fmt.preamble_bytes])
    table, bad = fmt.parse(data[body:], body)
    if bad:
        line = data.count(b"\n", 0, bad[0].position) + 1
        raise ConfigError(where, f"line {line}: {bad[0].reason}: {bad[0].raw[:200]}")
    if table.num_rows > MAX_FIXTURE_ROWS:
        raise ConfigError(where, f"holds {table.num_rows:,} records, at most {MAX_FIXTURE_ROWS:,}")
    return table


def rows_diff(
    *, actual: list[dict[str, Any]], expected: list[dict[str, Any]], columns: list[str], ordered: bool
) -> str:
    """ "" when the rows agree (by type and value; in order if ``ordered``), else the rows
    missing from the output and those it should not have, each as ``{column = value}``."""
    got = [_key(row, columns) for row in actual]
    want = [_key(row, columns) for row in expected]
    if got == want or (not ordered and Counter(got) == Counter(want)):
        return ""
    missing = list((Counter(want) - Counter(got)).elements())
    unexpected = list((Counter(got) - Counter(want)).elements())
    lines = [f"{len(actual)} rows, {len(expected)} expected"]
    if not missing and not unexpected:
        lines.append("the same rows in another order (ordered = true)")
        lines += ["  expected: " + _shown(k, columns) for k in want[:DIFF_ROWS_SHOWN]]
        lines += ["  output:   " + _shown(k, columns) for k in got[:DIFF_ROWS_SHOWN]]
    for title, rows in (
        ("missing (expected, not in the output)", missing),
        ("unexpected (in the output)", unexpected),
    ):
        if rows:
            lines.append(f"{title}: {len(rows)}")
            lines += [
                f"  {'-' if title.startswith('missing') else '+'} {_shown(k, columns)}"
                for k in rows[:DIFF_ROWS_SHOWN]
            ]
            if len(rows) > DIFF_ROWS_SHOWN:
                lines.append(f"  ... and {len(rows) - DIFF_ROWS_SHOWN} more")
    return "\n".join(lines)


def _key(row: dict[str, Any], columns: list[str]) -> tuple:
    return tuple(_typed(row.get(c)) for c in columns)


def _typed(value: Any) -> tuple:
    """A value with its kind, so that values of different kinds never compare equal."""
    if value is None:
        return ("null", None)
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, (int, float, Decimal)):
        return ("number", value if isinstance(value, Decimal) else Decimal(str(value)))
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:  # naive times are UTC, as the session's time zone
            value = value.astimezone(dt.UTC).replace(tzinfo=None)
        return ("timestamp", value)
    if isinstance(value, dt.date):
        return ("date", value)
    if isinstance(value, str):
        return ("string", value)
    if isinstance(value, list | tuple):
        return ("array", tuple(_typed(v) for v in value))
    if isinstance(value, dict):
        return ("struct", tuple(sorted((str(k), _typed(v)) for k, v in value.items())))
    return (type(value).__name__, repr(value))


def _shown(key: tuple, columns: list[str]) -> str:
    return "{" + ", ".join(f"{c} = {_value_shown(v)}" for c, v in zip(columns, key, strict=True)) + "}"


def _value_shown(typed: tuple) -> str:
    kind, value = typed
    if kind == "null":
        return "null"
    if kind == "string":
        return json.dumps(value)
    if kind == "bool":
        return "true" if value else "false"
    if kind in ("timestamp", "date"):
        return value.isoformat(sep=" ") if kind == "timestamp" else value.isoformat()
    if kind == "array":
        return "[" + ", ".join(_value_shown(v) for v in value) + "]"
    if kind == "struct":
        return "{" + ", ".join(f"{k} = {_value_shown(v)}" for k, v in value) + "}"
    return str(value)
