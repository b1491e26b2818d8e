"""Expectations on a flow's data (``[[expect]]``): a boolean Spark SQL expression over each
row of the transform's output, and what a failing row does (``on_fail``):

- ``warn``: the row is written and counted as failed;
- ``drop``: the row is not written; it goes to the run's dead letters under the
  expectation's name (``DeadLetter.expectation``), the row as JSON;
- ``fail``: the run (a stream: its epoch, then the run) fails before anything is published,
  naming the expectation and how many rows failed it.

A check whose value is NULL fails, as a row that cannot be shown to pass. Counts (passed,
failed) are kept per run (``FlowRun.expectation_counts``) and per stream epoch
(``TransformEpoch.expectation_counts``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import sqlglot
from pyspark.errors import AnalysisException
from pyspark.sql import functions as F
from pyspark.sql.types import BooleanType
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError

from dataflow.models import DeadLetter, FlowRun, TransformEpoch
from dataflow.transform_policy import transform_output_names, transform_policy_check
from source_support.errors import ConfigError

ON_FAIL = ("warn", "drop", "fail")
EXPECT_FIELDS = ("name", "check", "on_fail")
#: A flow's expectations at most: each is one more column computed over every output row.
MAX_EXPECTATIONS = 20
MAX_CHECK_CHARS = 4096
#: Rows one ``drop`` expectation may drop in a run (a stream: an epoch): each is kept as a
#: dead letter, so more fail the run rather than fill the database.
MAX_DROPPED_ROWS = 10_000
#: The column each expectation's verdict is computed in, next to the output's own.
FLAG_PREFIX = "__adf_expect_"
#: Top-level expressions that are never boolean: refused at save, before any Spark runs.
_NOT_BOOLEAN = (exp.Literal, exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Mod, exp.IntDiv, exp.DPipe, exp.Neg)


class ExpectationFailed(ConfigError):
    """An expectation with ``on_fail = "fail"`` (or a ``drop`` past its bound) stopped the
    run: nothing was published. Deterministic: a retry over the same input would fail alike."""


def expectations_validate(
    tables: Any, *, schema_columns: list[str] | None = None, query: exp.Expression | None = None
) -> list[dict[str, str]]:
    """The ``[[expect]]`` tables, validated: each a ``name`` (unique), a ``check`` (one
    boolean expression that passes the transform policy) and ``on_fail`` (default warn).

    With the source's columns (``schema_columns``) and the parsed transform (``query``), a
    check naming a column the transform does not output is refused too; otherwise Spark
    checks it when the run starts. A ConfigError names ``expect[i].field`` and the
    expectation."""
    if tables is None:
        return []
    if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
        raise ConfigError("expect", "must be an array of tables: [[expect]] name, check, on_fail")
    if len(tables) > MAX_EXPECTATIONS:
        raise ConfigError("expect", f"at most {MAX_EXPECTATIONS} expectations, not {len(tables)}")
    outputs = transform_output_names(query, schema_columns) if query is not None and schema_columns else None
    seen: set[str] = set()
    out = []
    for i, table in enumerate(tables):
        where = f"expect[{i}]"
        for key in table:
            if key not in EXPECT_FIELDS:
                raise ConfigError(f"{where}.{key}", f"is not a field of expect ({', '.join(EXPECT_FIELDS)})")
        name = table.get("name")
        if not isinstance(name, str) or not name.strip() or len(name) > 100:
            raise ConfigError(f"{where}.name", "is required: a name of at most 100 characters")
        name = name.strip()
        if name in seen:
            raise ConfigError(f"{where}.name", f"expectation {name!r} is named twice")
        seen.add(name)
        on_fail = table.get("on_fail", "warn")
        if on_fail not in ON_FAIL:
            raise ConfigError(
                f"{where}.on_fail",
                f"expectation {name!r}: must be one of {', '.join(ON_FAIL)}, not {on_fail!r}",
            )
        check = table.get("check")
        if not isinstance(check, str) or not check.strip():
            raise ConfigError(
                f"{where}.check", f"expectation {name!r}: is required, a boolean SQL expression"
            )
        try:
            _check_expression(check.strip(), outputs)
        except ConfigError as exc:
            raise ConfigError(f"{where}.check", f"expectation {name!r}: {exc.reason}") from None
        out.append({"name": name, "check": check.strip(), "on_fail": on_fail})
    return out


def _check_expression(check: str, outputs: list[str] | None) -> None:
    if len(check) > MAX_CHECK_CHARS:
        raise ConfigError("check", f"is too long: {len(check):,} characters, at most {MAX_CHECK_CHARS:,}")
    try:
        node = sqlglot.parse_one(check, read="spark")
    except (ParseError, TokenError) as exc:
        raise ConfigError("check", f"does not parse: {str(exc).splitlines()[0]}") from None
    # The same allow-list as a transform, over the check as a filter of the output.
    transform_policy_check(f"SELECT * FROM source WHERE {check}")
    if not isinstance(node, exp.Condition) or isinstance(node, exp.Query):
        raise ConfigError("check", "must be one expression over a row, not a query")
    for part in node.walk():
        if isinstance(part, (exp.Query, exp.Subquery)):
            raise ConfigError("check", "must not hold a subquery: it sees one output row")
        if isinstance(part, (exp.AggFunc, exp.Window)):
            raise ConfigError("check", f"must not use {part.sql(dialect='spark')!r}: it sees one output row")
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, _NOT_BOOLEAN) and not isinstance(node, exp.Boolean):
        raise ConfigError("check", f"is not a boolean expression ({node.sql(dialect='spark')!r})")
    if outputs is None:
        return
    known = {o.lower() for o in outputs}
    for column in node.find_all(exp.Column):
        if column.table or isinstance(column.this, exp.Star):
            continue
        if column.name.lower() not in known:
            raise ConfigError(
                "check",
                f"refers to column {column.name!r}, which the transform does not output "
                f"(outputs: {', '.join(outputs)})",
            )


@dataclass
class ExpectationResult:
    """One expectation's verdict over one run's (or epoch's) output."""

    name: str
    check: str
    on_fail: str
    passed: int = 0
    failed: int = 0
    #: The failing rows as JSON, for ``drop``.
    dropped: list[str] = field(default_factory=list)


@dataclass
class ExpectationVerdict:
    results: list[ExpectationResult]

    def counts(self) -> dict[str, dict[str, Any]]:
        return {r.name: {"passed": r.passed, "failed": r.failed, "on_fail": r.on_fail} for r in self.results}


def expectations_apply(frame: Any, expectations: list[dict[str, str]]) -> tuple[Any, ExpectationVerdict]:
    """Checks every row of ``frame`` (a Spark DataFrame: the transform's output) and returns
    the frame to write (without the rows a ``drop`` expectation failed) and the verdict.
    Raises ExpectationFailed when a ``fail`` expectation failed on any row, or a ``drop``
    one on more than MAX_DROPPED_ROWS. Computes the output once (a local checkpoint), so
    the rows counted are the rows written."""
    if not expectations:
        return frame, ExpectationVerdict([])
    columns = frame.columns
    flags = [f"{FLAG_PREFIX}{i}" for i in range(len(expectations))]
    flagged = frame.select(
        "*",
        *[
            F.coalesce(F.expr(e["check"]), F.lit(False)).alias(flag)
            for e, flag in zip(expectations, flags, strict=True)
        ],
    ).localCheckpoint(eager=True)
    row = flagged.agg(
        F.count(F.lit(1)).alias("total"), *[F.sum(F.when(F.col(f), 0).otherwise(1)).alias(f) for f in flags]
    ).first()
    total = row["total"] if row else 0
    results = []
    for e, flag in zip(expectations, flags, strict=True):
        failed = int((row[flag] if row else 0) or 0)
        results.append(
            ExpectationResult(e["name"], e["check"], e["on_fail"], passed=total - failed, failed=failed)
        )
    for r in results:
        if r.on_fail == "fail" and r.failed:
            raise ExpectationFailed(
                "expect",
                f"expectation {r.name!r} failed on {r.failed} of {total} rows; nothing was published",
            )
        if r.on_fail == "drop" and r.failed > MAX_DROPPED_ROWS:
            raise ExpectationFailed(
                "expect",
                f"expectation {r.name!r} would drop {r.failed} rows, more than the {MAX_DROPPED_ROWS:,} "
                "kept as dead letters; nothing was published",
            )
    as_json = F.to_json(F.struct(*[F.col(f"`{c}`") for c in columns]))
    dropping = [flag for r, flag in zip(results, flags, strict=True) if r.on_fail == "drop" and r.failed]
    for r, flag in zip(results, flags, strict=True):
        if r.on_fail == "drop" and r.failed:
            r.dropped = [x[0] for x in flagged.where(~F.col(flag)).select(as_json).collect()]
    kept = flagged
    for flag in dropping:
        kept = kept.where(F.col(flag))
    return kept.select(*[F.col(f"`{c}`") for c in columns]), ExpectationVerdict(results)


def expectations_record(
    *, run: FlowRun, verdict: ExpectationVerdict | None, epoch: TransformEpoch | None = None
) -> None:
    """Keeps ``verdict``: its counts added to the run's (and set on ``epoch``), the rows it
    dropped as the run's dead letters. Call it in the transaction that publishes."""
    if verdict is None or not verdict.results:
        return
    counts = verdict.counts()
    letters = []
    for r in verdict.results:
        where = f"expectation:{r.name}" + (f":epoch {epoch.number}" if epoch is not None else "")
        letters += [
            DeadLetter(
                flow_id=run.flow_id,
                run=run,
                split_id=where[:1024],
                position=i,
                raw=raw,
                error=f"expectation {r.name!r} failed: {r.check}",
                expectation=r.name,
            )
            for i, raw in enumerate(r.dropped)
        ]
    DeadLetter.objects.bulk_create(letters, ignore_conflicts=True)
    run = FlowRun.objects.select_for_update().get(pk=run.pk)
    total = dict(run.expectation_counts or {})
    for name, c in counts.items():
        before = total.get(name) or {"passed": 0, "failed": 0}
        total[name] = {
            **c,
            "passed": before["passed"] + c["passed"],
            "failed": before["failed"] + c["failed"],
        }
    FlowRun.objects.filter(pk=run.pk).update(expectation_counts=total)
    if epoch is not None:
        TransformEpoch.objects.filter(pk=epoch.pk).update(expectation_counts=counts)


def expectations_analyze(spark: Any, frame: Any, expectations: list[dict[str, str]]) -> str | None:
    """None if every check is a boolean over ``frame``'s columns (Spark's analysis, no job),
    else why not, naming the expectation."""
    for i, e in enumerate(expectations):
        try:
            kind = frame.select(F.expr(e["check"]).alias("ok")).schema["ok"].dataType
        except AnalysisException as exc:
            return f"expect[{i}].check: expectation {e['name']!r}: {str(exc).strip().splitlines()[0]}"
        if not isinstance(kind, BooleanType):
            return f"expect[{i}].check: expectation {e['name']!r}: is {kind.simpleString()}, not a boolean"
    return None
