"""Flow specs: the TOML shape (``[flow] [source] [format] [transform] [sink]``, and optional
``[stop] [schedule] [notify]``, ``[[expect]]`` and ``[[test]]``), validated.

Every entry point (TOML, admin, API) turns its input into this shape and calls
``flow_spec_validate``; a refused spec raises ``ConfigError`` naming the field.
"""

from __future__ import annotations

import fnmatch
import glob
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings

from dataflow.encryption import secrets_check
from dataflow.models import DataFlow, SinkPathClaim
from dataflow.services.connections import flow_connections_check
from dataflow.services.environment import environment
from dataflow.services.expectations import expectations_validate
from dataflow.services.notify import notify_masked, notify_validate
from dataflow.services.schedules import schedule_validate
from dataflow.services.streams.query import stream_query_check
from dataflow.transform_policy import transform_columns_check, transform_policy_check
from source_support.config import check_fields, expected_types
from source_support.durations import parse_duration_ms, parse_instant_ms
from source_support.errors import ConfigError
from source_support.formats import check_format_for_source, is_inline_schema, validate_format
from source_support.registry import (
    SINKS,
    SOURCES,
    glob_static_prefix,
    mask_section,
    source_is_unbounded,
    source_output_schema,
    validate_sink,
    validate_source,
)
from source_support.schema import parse_ddl

#: How many readers a flow may run (``flow_rescale`` checks a new count against it too).
PARALLELISM_BOUNDS = (1, 256)
#: ``freshness``: beat checks it each minute, so a shorter one could only be late.
MIN_FRESHNESS_S = 60
MAX_FRESHNESS_S = 366 * 86_400
#: ``disable_after_failures``: 0 never; the check reads that many runs back, so it is capped.
DISABLE_AFTER_FAILURES_BOUNDS = (0, 1000)
FLOW_FIELDS: dict[str, tuple[type, Any, tuple[int, int] | None]] = {
    "name": (str, None, None),
    "description": (str, "", None),
    "parallelism": (int, 4, PARALLELISM_BOUNDS),
    "batch_size": (int, 10_000, (1, 10_000_000)),
    "poll_interval_ms": (int, 500, (10, 600_000)),
    "skip_errors": (bool, False, None),
    "max_errors": (int, 1000, (0, 2**31 - 1)),
    "backpressure_records": (int, 1_000_000, (1000, 2**31 - 1)),
    "freshness": (str, "", None),
    "disable_after_failures": (int, 0, DISABLE_AFTER_FAILURES_BOUNDS),
}
#: ``[flow]`` keys of the flow's health (section 6 of issue 28), off by default.
HEALTH_FIELDS = ("freshness", "disable_after_failures")
SECTIONS = ("flow", "source", "format", "transform", "sink", "stop", "schedule", "notify", "expect", "test")
OPTIONAL_SECTIONS = ("format", "stop", "schedule", "notify")
#: Sections that are arrays of tables (``[[expect]]``, ``[[test]]``).
ARRAY_SECTIONS = ("expect", "test")
#: ``[[test]]`` fields: (types, what it is).
TEST_FIELDS: dict[str, tuple[tuple[type, ...], str]] = {
    "name": ((str,), "a name"),
    "input": ((str,), "a file of input records, relative to the flow file"),
    "records": ((list,), "an array of input records (inline tables)"),
    "expect": ((str,), "a file of the expected output rows, relative to the flow file"),
    "rows": ((list,), "an array of expected output rows (inline tables)"),
    "ordered": ((bool,), "whether the order of the rows counts (default false)"),
}
MAX_TESTS = 100
#: ``[transform]`` keys besides ``sql``: (type, default, bounds).
TRANSFORM_FIELDS: dict[str, tuple[type, Any, tuple[int, int] | None]] = {
    "trigger_ms": (int, 1000, (100, 3_600_000)),
    "watermark_delay": (str, "0 seconds", None),
    "timeout": (str, "1 hour", None),
    "max_output_rows": (int, 0, (0, 2**63 - 1)),
}
#: The shortest ``[transform] timeout``: a Spark job takes a moment to start and to cancel.
MIN_TRANSFORM_TIMEOUT_S = 1.0
STOP_FIELDS = {"at": str, "after_records": int}
ENTRY_ID_RE = re.compile(r"\d+(-\d+)?")
RESERVED_NAMES = frozenset({"validate", "preview"})
NAME_RE = re.compile(r"[a-z0-9][a-z0-9_-]{0,99}")  # with fullmatch: no trailing newline

# Size limits: a spec is copied into every run, so a huge one costs on every run.
MAX_SPEC_CHARS = 256 * 1024
MAX_STRING_CHARS = 4096  # any config string (a path may be at most 4096 bytes on Linux)
MAX_FIELD_CHARS = {"flow.description": 16 * 1024, "transform.sql": 64 * 1024, "format.schema": 64 * 1024}
MAX_DEPTH = 8  # a flow spec is sections of fields; a value nested deeper is a mistake


#: Why a path another owner's flow reads or writes is refused, saying no more than that.
PATH_NOT_ALLOWED = "path not allowed for this flow; choose a path of your own"


def flow_spec_validate(doc: dict[str, Any], *, owner=None) -> dict[str, Any]:
    """Validates a whole spec and returns the DataFlow field values it describes.
    ``owner`` is the user the flow belongs to (None: the operator's flow): a flow of a
    user who is not staff reaches external systems only through connections granted to
    that user (``services.connections``)."""
    if not isinstance(doc, dict):
        raise ConfigError(
            "flow",
            "a flow spec is a table with [flow], [source], [format], [transform], [sink]",
        )
    for section in doc:
        if section not in SECTIONS:
            raise ConfigError(section, f"is not a section of a flow ({', '.join(SECTIONS)})")
    for section in SECTIONS:
        if section in ARRAY_SECTIONS:
            continue
        if section not in OPTIONAL_SECTIONS and not isinstance(doc.get(section), dict):
            raise ConfigError(section, "is required")
        if (
            section in OPTIONAL_SECTIONS
            and doc.get(section) is not None
            and not isinstance(doc[section], dict)
        ):
            raise ConfigError(section, "must be a table")
    _check_sizes(doc)
    flow_connections_check(doc, owner=owner)
    flow_format_file_check(doc, owner=owner)
    flow = _validate_flow_table(doc["flow"])
    env = environment()
    source_type, source_config = validate_source(doc["source"], env)
    fmt = validate_format(doc.get("format") or {"type": "csv"}, env)
    check_format_for_source(fmt, entries=SOURCES[source_type].reads_entries)
    sql, query, transform_options = _validate_transform(doc["transform"])
    sink_type, sink_config = validate_sink(doc["sink"], env)
    flow_tests_validate(doc.get("test"))
    unbounded = source_is_unbounded(source_type, source_config)
    stop_rule = _validate_stop(doc.get("stop") or {}, unbounded=unbounded)
    if stop_rule:  # a rule the source cannot keep is refused now, not when a run starts
        source = SOURCES[source_type]
        source.check_stop(source.config.from_dict(source_config), stop_rule)
    schedule = schedule_validate(doc.get("schedule") or {}, unbounded=unbounded)
    notify = notify_validate(doc.get("notify") or {})
    if flow["disable_after_failures"] and not schedule:
        raise ConfigError(
            "flow.disable_after_failures",
            "pauses a flow's [schedule]: this flow has none (add one, or leave it 0)",
        )
    _check_overlap(source_config, sink_config)
    if owner is not None:
        flow_paths_check(
            source_config=source_config, sink_config=sink_config, owner=owner, format_options=fmt.options
        )
    reads_back = SOURCES[source_type].sink_reads_back(source_config, sink_type, sink_config, env)
    if reads_back:
        raise ConfigError("sink.key", reads_back)
    columns = None
    if "schema" in fmt.options:
        columns = source_output_schema(source_type, source_config, parse_ddl(fmt.options["schema"])).names
        transform_columns_check(query, columns, sink_config.get("partition_by") or [])
    expectations = expectations_validate(doc.get("expect"), schema_columns=columns, query=query)
    if unbounded:
        stream_query_check(sql, has_stop_rule=bool(stop_rule), schema_ddl=fmt.options.get("schema"))
        if SINKS[sink_type].append is None:
            appending = ", ".join(sorted(t for t, sink in SINKS.items() if sink.append is not None))
            raise ConfigError(
                "sink.type", f"{sink_type} cannot take a stream's output (sinks that append: {appending})"
            )
    return {
        **flow,
        "source_type": source_type,
        "source_config": source_config,
        "format_type": fmt.type,
        "format_options": fmt.options,
        "transform_sql": sql,
        "transform_options": transform_options,
        "sink_type": sink_type,
        "sink_config": sink_config,
        "stop_rule": stop_rule,
        "schedule": schedule,
        "notify": notify,
        "expectations": expectations,
    }


def flow_tests_validate(tables: Any) -> list[dict[str, Any]]:
    """The ``[[test]]`` tables, each checked: a ``name``, its input (``input`` file or
    inline ``records``, one of them), its expected output (``expect`` file or inline
    ``rows``, one of them) and ``ordered``. A ConfigError names ``test[i].field``."""
    if tables is None:
        return []
    if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
        raise ConfigError(
            "test", "must be an array of tables: [[test]] name, input or records, expect or rows"
        )
    if len(tables) > MAX_TESTS:
        raise ConfigError("test", f"at most {MAX_TESTS} tests in a flow, not {len(tables)}")
    for i, table in enumerate(tables):
        where = f"test[{i}]"
        for key, value in table.items():
            if key not in TEST_FIELDS:
                raise ConfigError(f"{where}.{key}", f"is not a field of test ({', '.join(TEST_FIELDS)})")
            kinds, what = TEST_FIELDS[key]
            if not isinstance(value, kinds):
                raise ConfigError(f"{where}.{key}", f"must be {what}")
        if not isinstance(table.get("name"), str) or not table["name"].strip():
            raise ConfigError(f"{where}.name", "is required")
        for file_key, inline_key in (("input", "records"), ("expect", "rows")):
            if (file_key in table) == (inline_key in table):
                raise ConfigError(
                    f"{where}.{file_key}", f"give {file_key} (a file) or {inline_key} (inline), one of them"
                )
            if inline_key in table and not all(isinstance(r, dict) for r in table[inline_key]):
                raise ConfigError(
                    f"{where}.{inline_key}", "must be an array of inline tables {column = value, ...}"
                )
    return tables


def flow_spec_of(flow) -> dict[str, Any]:
    """The spec of a stored flow, in the TOML shape (what ``applyflows`` would take)."""
    spec = {
        "flow": {
            name: getattr(flow, name)
            for name in FLOW_FIELDS
            # off by default: left out, so a flow that does not use them reads as before
            if name not in HEALTH_FIELDS or getattr(flow, name) != FLOW_FIELDS[name][1]
        },
        "source": {"type": flow.source_type, **flow.source_config},
        "format": {"type": flow.format_type, **flow.format_options},
        "transform": {"sql": flow.transform_sql, **(flow.transform_options or {})},
        "sink": {"type": flow.sink_type, **flow.sink_config},
    }
    if flow.stop_rule:
        spec["stop"] = {k: v for k, v in flow.stop_rule.items() if k in STOP_FIELDS}
    if flow.schedule:
        spec["schedule"] = dict(flow.schedule)
    if flow.notify:
        spec["notify"] = dict(flow.notify)
    if flow.expectations:
        spec["expect"] = [dict(e) for e in flow.expectations]
    return spec


def flow_secrets_check(flow) -> None:
    """Refuses (``SecretUndecryptable``, naming the flow, its secrets and the setting) a
    stored flow with a secret that no key of ``DATAFLOW_SECRET_KEYS`` decrypts."""
    secrets_check(
        {
            "source_config": flow.source_config,
            "format_options": flow.format_options,
            "sink_config": flow.sink_config,
            "notify": flow.notify,
        },
        what=f"flow {flow.name!r}",
    )


def flow_values_of(flow) -> dict[str, Any]:
    """A stored flow's settings in the shape of ``flow_spec_validate``'s answer, as stored
    (not validated again): the spec of a run refused before it could be validated."""
    return {
        **{name: getattr(flow, name) for name in FLOW_FIELDS},
        "source_type": flow.source_type,
        "source_config": flow.source_config,
        "format_type": flow.format_type,
        "format_options": flow.format_options,
        "transform_sql": flow.transform_sql,
        "transform_options": flow.transform_options,
        "sink_type": flow.sink_type,
        "sink_config": flow.sink_config,
        "stop_rule": flow.stop_rule,
        "schedule": flow.schedule,
        "notify": flow.notify,
        "expectations": flow.expectations,
    }


def spec_values_masked(values: dict[str, Any]) -> dict[str, Any]:
    """The values ``flow_spec_validate`` returned (a run's ``spec``) as pages may show them:
    the secrets of its source and sink configs and its webhook masked."""
    shown = dict(values)
    for section, key in (("source", "source_config"), ("format", "format_options"), ("sink", "sink_config")):
        kind, config = values.get(f"{section}_type"), values.get(key)
        if isinstance(config, dict):
            masked = mask_section(section, {"type": kind, **config})
            masked.pop("type", None)
            shown[key] = masked
    if isinstance(values.get("notify"), dict):
        shown["notify"] = notify_masked(values["notify"])
    return shown


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
            raise ConfigError(f"flow.{name}", f"must be {expected_types(kind)}")
        if bounds and not bounds[0] <= value <= bounds[1]:
            raise ConfigError(f"flow.{name}", f"must be between {bounds[0]} and {bounds[1]}")
        out[name] = value
    out["freshness"] = out["freshness"].strip()
    out["freshness_seconds"] = freshness_seconds(out["freshness"])
    if not NAME_RE.fullmatch(out["name"]):
        raise ConfigError("flow.name", "must be lowercase letters, digits, '-' or '_' (at most 100)")
    if out["name"] in RESERVED_NAMES:
        raise ConfigError(
            "flow.name", f"{out['name']!r} is reserved: /api/flows/{out['name']}/ is an endpoint"
        )
    return out


def freshness_seconds(freshness: str) -> int:
    """The seconds of ``[flow] freshness`` ("" is 0: no freshness check); ConfigError naming
    ``flow.freshness`` unless it is a whole number of seconds from MIN to MAX_FRESHNESS_S."""
    if not freshness:
        return 0
    try:
        ms = parse_duration_ms(freshness)
    except ValueError as exc:
        raise ConfigError("flow.freshness", str(exc)) from None
    if ms % 1000 or not MIN_FRESHNESS_S <= ms // 1000 <= MAX_FRESHNESS_S:
        raise ConfigError(
            "flow.freshness",
            f"{freshness!r} must be a whole number of seconds, at least {MIN_FRESHNESS_S} seconds "
            "and at most 366 days",
        )
    return ms // 1000


def _validate_transform(table: dict[str, Any]):
    known = ("sql", *TRANSFORM_FIELDS)
    for name in table:
        if name not in known:
            raise ConfigError(f"transform.{name}", f"is not a field of transform ({', '.join(known)})")
    sql = table.get("sql")
    if not isinstance(sql, str) or not sql.strip():
        raise ConfigError("transform.sql", "is required: a Spark SQL query over the view 'source'")
    query = transform_policy_check(sql)
    options: dict[str, Any] = {}
    for name, (kind, default, bounds) in TRANSFORM_FIELDS.items():
        value = table.get(name, default)
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise ConfigError(f"transform.{name}", f"must be {expected_types(kind)}")
        if bounds and not bounds[0] <= value <= bounds[1]:
            raise ConfigError(f"transform.{name}", f"must be between {bounds[0]} and {bounds[1]}")
        options[name] = value
    try:
        parse_duration_ms(options["watermark_delay"])
    except ValueError as exc:
        raise ConfigError("transform.watermark_delay", str(exc)) from None
    _check_transform_limits(options)
    return sql.strip().rstrip(";").rstrip(), query, options


def _check_transform_limits(options: dict[str, Any]) -> None:
    """``timeout`` and ``max_output_rows`` within the site's bounds."""
    try:
        timeout_s = parse_duration_ms(options["timeout"]) / 1000
    except ValueError as exc:
        raise ConfigError("transform.timeout", str(exc)) from None
    most = settings.DATAFLOW_TRANSFORM_TIMEOUT_MAX_SECONDS
    if not MIN_TRANSFORM_TIMEOUT_S <= timeout_s <= most:
        raise ConfigError(
            "transform.timeout",
            f"must be between {MIN_TRANSFORM_TIMEOUT_S:g} s and {most:g} s "
            f"(DATAFLOW_TRANSFORM_TIMEOUT_MAX_SECONDS), not {timeout_s:g} s",
        )
    ceiling = settings.DATAFLOW_TRANSFORM_MAX_OUTPUT_ROWS
    if ceiling and options["max_output_rows"] > ceiling:
        raise ConfigError(
            "transform.max_output_rows",
            f"must be at most {ceiling:,} (DATAFLOW_TRANSFORM_MAX_OUTPUT_ROWS), not {options['max_output_rows']:,}",
        )


@dataclass(frozen=True)
class TransformLimits:
    """What bounds one transform attempt (a stream's epoch) of a run."""

    #: Seconds its Spark job may run before it is cancelled.
    timeout_s: float
    #: Rows it may write at most; 0: no bound.
    max_output_rows: int
    #: What sets ``max_output_rows``: the flow's option or the site's ceiling.
    max_output_rows_by: str = "transform.max_output_rows"
    #: Bytes its sink's staging directory may hold at most; 0: no bound.
    max_staging_bytes: int = 0


def transform_limits(spec: dict[str, Any]) -> TransformLimits:
    """The limits of a run's transform: its ``[transform]`` options (defaults for a flow
    stored before they existed) held to the site's bounds as they are now."""
    options = spec.get("transform_options") or {}
    timeout_s = parse_duration_ms(options.get("timeout", TRANSFORM_FIELDS["timeout"][1])) / 1000
    timeout_s = min(timeout_s, settings.DATAFLOW_TRANSFORM_TIMEOUT_MAX_SECONDS)
    rows, ceiling = options.get("max_output_rows", 0), settings.DATAFLOW_TRANSFORM_MAX_OUTPUT_ROWS
    by = "transform.max_output_rows"
    if ceiling and (not rows or ceiling < rows):
        rows, by = ceiling, "DATAFLOW_TRANSFORM_MAX_OUTPUT_ROWS"
    return TransformLimits(
        timeout_s=timeout_s,
        max_output_rows=rows,
        max_output_rows_by=by,
        max_staging_bytes=settings.DATAFLOW_TRANSFORM_MAX_STAGING_BYTES,
    )


def _validate_stop(table: dict[str, Any], *, unbounded: bool) -> dict[str, Any]:
    """The ``[stop]`` rule: ``at`` ("latest", an ISO-8601 time or an entry id) or
    ``after_records``; returned with what it means (``kind``, ``time_ms``) for the source."""
    if not table:
        return {}
    check_fields("stop", table, STOP_FIELDS)
    if not unbounded:
        raise ConfigError(
            "stop",
            "the source is bounded: it ends by itself; a stop rule is for streams "
            "and for files with watch = true",
        )
    if len(table) != 1:
        raise ConfigError("stop", "give one rule: at (latest, a time or an entry id) or after_records")
    if "after_records" in table:
        if table["after_records"] < 1:
            raise ConfigError("stop.after_records", "must be at least 1")
        return {"after_records": table["after_records"], "kind": "records"}
    at = table["at"].strip()
    if at == "latest":
        return {"at": at, "kind": "latest"}
    if ENTRY_ID_RE.fullmatch(at):
        return {"at": at, "kind": "position"}
    try:
        return {"at": at, "kind": "time", "time_ms": parse_instant_ms(at)}
    except ValueError:
        raise ConfigError(
            "stop.at",
            f"{at!r} is not 'latest', an ISO-8601 time (2024-05-01T12:00:00Z) or an entry id (1700000000000-0)",
        ) from None


def _check_sizes(doc: dict[str, Any]) -> None:
    """Refuses a spec too large or too deeply nested, naming the field and the limit.

    Iterative, so a value nested thousands deep is refused rather than ending in a
    RecursionError.
    """
    total = 0
    pending: list[tuple[str, Any, int]] = [("", doc, 0)]
    while pending:
        name, value, depth = pending.pop()
        if depth > MAX_DEPTH:
            raise ConfigError(name, f"is nested too deeply (at most {MAX_DEPTH} levels)")
        if isinstance(value, dict):
            items = [(f"{name}.{k}" if name else str(k), v) for k, v in value.items()]
            total += sum(len(str(k)) for k in value)
        elif isinstance(value, list):
            items = [(f"{name}[{i}]", v) for i, v in enumerate(value)]
        else:
            items = []
            size = len(value) if isinstance(value, str) else 8
            limit = MAX_FIELD_CHARS.get(name, MAX_STRING_CHARS)
            if isinstance(value, str) and size > limit:
                raise ConfigError(name, f"is too long: {size:,} characters, at most {limit:,}")
            total += size
        if total > MAX_SPEC_CHARS:
            raise ConfigError("flow", f"the whole spec is too large: more than {MAX_SPEC_CHARS:,} characters")
        pending.extend((n, v, depth + 1) for n, v in items)


def flow_paths_check(
    *,
    source_config: dict[str, Any],
    sink_config: dict[str, Any],
    owner: Any,
    format_options: dict[str, Any] | None = None,
) -> None:
    """Refuses paths that belong to another owner's flow: a sink that is, contains or lies
    inside another owner's flow's sink or source directory (``sink.path``: it would replace
    their results or input), and a source that overlaps another owner's flow's sink
    (``source.path``: it would read their results). ``owner``: the user the flow belongs
    to; the operator's flows (no owner) count as another owner's. ``flow_spec_validate``
    checks this for a flow with an owner; the operator's own flows are exempt, as they
    are from the connection rules. The error says only that the path is not allowed: not
    whose it is, nor that a flow uses it. A file the
    format reads (an Avro ``writer_schema`` path) follows the rule of ``source.path``.
    """
    source_pattern = _file_path(source_config.get("path"))
    sink_dir = _file_dir(sink_config.get("path"))
    format_file = _format_file(format_options or {})
    if source_pattern is None and sink_dir is None and format_file is None:
        return
    others = DataFlow.objects.exclude(owner_id=owner.pk)  # with the operator's (owner NULL)
    # A deleted flow's output kept in place stays its owner's, as a flow's sink.
    claimed = SinkPathClaim.objects.exclude(owner_id=owner.pk).values_list("path", flat=True)

    def check(other_source: dict[str, Any], other_sink: dict[str, Any]) -> None:
        other_pattern = _file_path((other_source or {}).get("path"))
        other_sink_dir = _file_dir((other_sink or {}).get("path"))
        if sink_dir is not None:
            if other_sink_dir is not None and _overlaps(sink_dir, other_sink_dir):
                raise ConfigError("sink.path", f"{sink_dir}: {PATH_NOT_ALLOWED}")
            if other_pattern is not None and _glob_reaches(other_pattern, sink_dir):
                raise ConfigError("sink.path", f"{sink_dir}: {PATH_NOT_ALLOWED}")
        if format_file is not None and other_sink_dir is not None and _overlaps(format_file, other_sink_dir):
            raise ConfigError("format.writer_schema", f"{format_file}: {PATH_NOT_ALLOWED}")
        if (
            source_pattern is not None
            and other_sink_dir is not None
            and _glob_reaches(source_pattern, other_sink_dir)
        ):
            raise ConfigError("source.path", f"{source_config['path']}: {PATH_NOT_ALLOWED}")

    for path in claimed:
        check({}, {"path": path})
    for other_source, other_sink in others.values_list("source_config", "sink_config").iterator():
        check(other_source, other_sink)


def sink_path_claim(*, owner: Any, path: Path, flow_name: str) -> SinkPathClaim:
    """Keeps ``path``, the sink directory of ``owner``'s flow ``flow_name`` that is being
    deleted with its output left in place, as ``owner``'s: ``flow_paths_check`` refuses it
    to every other owner's flow as it did the flow's sink. One claim per owner and path."""
    claim, _ = SinkPathClaim.objects.update_or_create(
        owner=owner, path=str(path), defaults={"flow_name": flow_name}
    )
    return claim


def flow_format_file_check(doc: Any, *, owner: Any) -> None:
    """Refuses, before the format reads it, a file the spec's format names (an Avro
    ``writer_schema`` path) that ``flow_paths_check`` would refuse: what its parser said
    of it would tell what another owner's file holds."""
    table = doc.get("format") if isinstance(doc, dict) else None
    if owner is not None and isinstance(table, dict):
        flow_paths_check(source_config={}, sink_config={}, owner=owner, format_options=table)


def _format_file(options: dict[str, Any]) -> Path | None:
    """The file a format reads (an Avro ``writer_schema`` given as a path), after symlinks;
    None when it reads none."""
    writer = options.get("writer_schema")
    if not isinstance(writer, str) or is_inline_schema(writer):
        return None
    return Path(os.path.realpath(environment().base_dir / writer))


def _file_path(path: Any) -> str | None:
    """A validated ``path`` field that names the file system (absolute), else None."""
    return path if isinstance(path, str) and os.path.isabs(path) else None


def _file_dir(path: Any) -> Path | None:
    """The directory a validated sink ``path`` names after symlinks; None when it is no
    file-system path."""
    return Path(os.path.realpath(path)) if _file_path(path) is not None else None


def _overlaps(a: Path, b: Path) -> bool:
    return a == b or a in b.parents or b in a.parents


def _glob_reaches(pattern: str, directory: Path) -> bool:
    """Whether the source ``pattern`` (a directory: its files; a file; a glob, ``**``
    recursing) may read a file under ``directory``, or the directory holds the source (a
    sink there would replace it). Non-recursive globs reach only their own depth: a
    source ``out/*.csv`` does not read a sink at ``out/results``."""
    if glob.has_magic(pattern):
        static = glob_static_prefix(pattern)
        rest = Path(pattern).relative_to(static).parts if static != pattern else ()
    elif os.path.isdir(pattern):
        static, rest = pattern, ("*",)
    else:
        static, rest = os.path.dirname(pattern), (os.path.basename(pattern),)
    base = Path(os.path.realpath(static))
    if directory == base or directory in base.parents:
        return True
    if base not in directory.parents:
        return False
    inside = directory.relative_to(base).parts
    if "**" in rest:
        before = rest[: rest.index("**")]
        return all(
            fnmatch.fnmatchcase(part, glob_part) for part, glob_part in zip(inside, before, strict=False)
        )
    # A file under ``directory`` lies at least one level below it.
    return len(inside) < len(rest) and all(
        fnmatch.fnmatchcase(part, glob_part) for part, glob_part in zip(inside, rest, strict=False)
    )


def _check_object_overlap(source_config: dict[str, Any], sink: object) -> None:
    """Refuses an ``s3://bucket/prefix`` sink whose objects an object-store source (its
    ``bucket`` and ``prefix`` fields) would read, or whose source objects it would replace."""
    bucket = source_config.get("bucket")
    if not (isinstance(sink, str) and sink.startswith("s3://") and isinstance(bucket, str)):
        return
    sink_bucket, _, sink_prefix = sink.removeprefix("s3://").partition("/")
    folder = sink_prefix.rstrip("/") + "/"
    prefix = source_config.get("prefix") or ""
    if (
        sink_bucket == bucket
        and isinstance(prefix, str)
        and (folder.startswith(prefix) or prefix.startswith(folder))
    ):
        raise ConfigError(
            "sink.path",
            f"{sink} overlaps the source's objects (source.bucket {bucket!r}, source.prefix {prefix!r}); "
            "a sink must not overlap its source: it would replace or re-read the source's objects",
        )


def _check_overlap(source_config: dict[str, Any], sink_config: dict[str, Any]) -> None:
    """Refuses a sink that is, contains or lies inside the source's directory, after symlinks.

    A sink that overlaps its source replaces the source's files with its output, or is read
    back by the next run. Paths are the validated (absolute) ``path`` fields; for a glob,
    its part before the first wildcard.
    """
    source, sink = source_config.get("path"), sink_config.get("path")
    _check_object_overlap(source_config, sink)
    if not (isinstance(source, str) and isinstance(sink, str)):
        return
    if not (os.path.isabs(source) and os.path.isabs(sink)):
        return  # not file-system paths (a URL, a stream name)
    source_dir = Path(os.path.realpath(glob_static_prefix(source)))
    sink_dir = Path(os.path.realpath(sink))
    if sink_dir == source_dir:
        relation = "is the source directory"
    elif source_dir in sink_dir.parents:
        relation = "lies inside the source directory"
    elif sink_dir in source_dir.parents:
        relation = "contains the source directory"
    else:
        return
    raise ConfigError(
        "sink.path",
        f"{sink_dir} {relation} {source_dir} (source.path {source}); "
        "a sink must not overlap its source: it would replace or re-read the source's files",
    )
