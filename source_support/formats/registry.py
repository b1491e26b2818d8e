"""The ``[format]`` table: its types and their options, its validation (every error names
its field), and ``FormatSpec.build``, which makes the format a source reads with."""

from __future__ import annotations

import codecs
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from source_support.errors import ConfigError
from source_support.formats.avro import AvroFormat, PathResolver, is_inline_schema, load_writer_schema
from source_support.formats.csv import CsvFormat
from source_support.formats.drift import DEFAULT_POLICY, POLICIES, RESCUED
from source_support.formats.fields import FieldsFormat
from source_support.formats.json import JsonLinesFormat
from source_support.formats.parquet import ParquetFormat
from source_support.formats.raw import RawFormat
from source_support.formats.record import DEFAULT_ENCODING, RecordFormat
from source_support.formats.typed_arrow import fields_of
from source_support.formats.values import DEFAULT_NULL_VALUES, RULE_OPTIONS, value_rules
from source_support.options import Option, option_types
from source_support.schema import parse_ddl


@dataclass(frozen=True)
class FormatSpec:
    """A validated ``[format]`` table."""

    type: str
    options: dict[str, Any]

    def build(
        self, schema: pa.Schema | None = None, *, entries: bool = False, env: PathResolver | None = None
    ) -> RecordFormat | FieldsFormat | AvroFormat | ParquetFormat:
        """The format, with ``schema`` (or the one given in the table). ``entries`` says the
        source delivers entries of field/value pairs (a stream), not lines: only then may
        the format be ``fields`` or name the ``field`` that holds a record. ``env`` resolves
        a ``writer_schema`` given as a path."""
        check_format_for_source(self, entries=entries)
        plugin = FORMATS[self.type].build
        if plugin is not None:
            return plugin(self, schema, entries)
        if self.type == "avro":
            return self._build_avro(schema, env)
        if self.type == "parquet":
            return self._build_parquet(schema)
        opts = dict(self.options)
        ddl = opts.pop("schema", None)
        record_field = opts.pop("field", None)
        encoding = opts.pop("encoding", DEFAULT_ENCODING)
        comment = opts.pop("comment", None)
        policy = opts.pop("on_schema_change", None) or (None if ddl else DEFAULT_POLICY)
        rules = value_rules(opts)
        for name in RULE_OPTIONS:
            opts.pop(name, None)
        schema = schema or (parse_ddl(ddl) if ddl else None)
        if self.type == "fields":
            return FieldsFormat(schema, rules=rules, on_schema_change=policy)
        if entries and self.type == "csv":
            opts["header"] = False  # an entry holds one record, never a header
        if self.type == "raw":
            fmt: RecordFormat = RawFormat()
        elif self.type == "csv":
            fmt = CsvFormat(schema=schema, rules=rules, **opts)
        else:
            fmt = JsonLinesFormat(schema, rules=rules)
        fmt.record_field = record_field
        fmt.on_schema_change = None if self.type == "raw" else policy
        fmt.encoding = canonical_encoding(encoding)
        fmt.comment = comment.encode() if comment else None
        return fmt

    def _build_parquet(self, schema: pa.Schema | None) -> ParquetFormat:
        opts = self.options
        declared = parse_ddl(opts["schema"]) if "schema" in opts else None
        fmt = ParquetFormat(
            declared,
            on_schema_change=opts.get("on_schema_change")
            or (None if declared is not None else DEFAULT_POLICY),
        )
        return fmt.with_schema(schema) if schema is not None else fmt

    def _build_avro(self, schema: pa.Schema | None, env: PathResolver | None) -> AvroFormat:
        opts = self.options
        declared = parse_ddl(opts["schema"]) if "schema" in opts else None
        writer = opts.get("writer_schema")
        fmt = AvroFormat(
            declared,
            writer_schema=load_writer_schema(writer, env) if writer else None,
            registry_url=opts.get("registry_url"),
            record_field=opts.get("field"),
            # Messages are read with writer_schema (resolved to it by a registry, unless the
            # option is given): only files default to fail.
            on_schema_change=opts.get("on_schema_change")
            or (None if declared is not None or writer else DEFAULT_POLICY),
        )
        return fmt.with_schema(schema) if schema is not None else fmt


def canonical_encoding(name: str) -> str:
    """The codec's own name for an encoding (``latin1`` -> ``iso8859-1``); ConfigError naming
    ``format.encoding`` for one Python does not know as a text encoding."""
    try:
        info = codecs.lookup(name)
    except LookupError:
        info = None
    if info is None or not getattr(info, "_is_text_encoding", True):
        raise ConfigError(
            "format.encoding", f"unknown text encoding {name!r} (such as utf-8, latin-1, utf-16)"
        )
    return info.name


def check_format_for_source(fmt: FormatSpec, *, entries: bool) -> None:
    """Refuses a format that does not fit what the source delivers: ``fields`` and the
    ``field`` option are for sources of entries (redis_streams), not of lines (files); an
    Avro message needs its ``writer_schema``, which a container file carries itself."""
    if fmt.type == "avro":
        _check_avro_for_source(fmt, entries=entries)
    if fmt.type == "parquet" and entries:
        raise ConfigError(
            "format.type",
            "parquet reads Parquet files (a files source); a stream's messages are read as "
            "csv, jsonl, avro, fields or raw",
        )
    if entries:
        if fmt.options.get("header"):
            raise ConfigError("format.header", "a stream entry holds one record, without a header: remove it")
        for name in ("encoding", "comment"):
            if name in fmt.options:
                raise ConfigError(
                    f"format.{name}", "applies to files; a stream entry's record is text already: remove it"
                )
        return
    if fmt.type == "fields":
        raise ConfigError(
            "format.type",
            "fields reads the field/value pairs of stream entries (a redis_streams source); "
            "this source reads lines: use csv or jsonl",
        )
    if "field" in fmt.options:
        raise ConfigError(
            "format.field",
            "names the field of a stream entry that holds the record (a redis_streams source); "
            "this source reads lines: remove it",
        )


def _check_avro_for_source(fmt: FormatSpec, *, entries: bool) -> None:
    if entries and "on_schema_change" in fmt.options and not fmt.options.get("registry_url"):
        raise ConfigError(
            "format.on_schema_change",
            "applies to Avro container files and to messages framed for a schema registry (each "
            "names its writer's schema); without registry_url every message of a stream is read "
            "with writer_schema, so its columns cannot drift: remove it, or give registry_url",
        )
    if entries and not fmt.options.get("writer_schema"):
        raise ConfigError(
            "format.writer_schema",
            "is required to read Avro messages: the schema they were written with (inline JSON or a path)",
        )
    if not entries:
        for name in ("writer_schema", "registry_url"):
            if name in fmt.options:
                raise ConfigError(
                    f"format.{name}",
                    "applies to Avro messages of a stream; an Avro container file holds its own schema: remove it",
                )


@dataclass(frozen=True)
class FormatType:
    """A ``[format]`` type: its name, what it reads, and the options of its table."""

    type: str
    description: str
    options: tuple[Option, ...]
    #: Other names a table may give as its ``type`` (stored as ``type``).
    aliases: tuple[str, ...] = ()
    #: ``check(table)``: what its options cannot declare, a ConfigError naming the field
    #: (None: nothing more).
    check: Callable[[dict[str, Any]], None] | None = None
    #: ``build(spec, schema, entries)``: the format a source reads with, for a format of a
    #: plugin (None: one of the built-in line formats, built by ``FormatSpec.build``).
    build: Callable[[FormatSpec, pa.Schema | None, bool], RecordFormat | FieldsFormat] | None = None


SCHEMA_OPTION = Option(
    "schema",
    str,
    'The columns and their types in Spark DDL, such as "id BIGINT, ts TIMESTAMP, sensor STRING"; '
    "inferred from the first records when left out (a stream source whose streams are empty needs it).",
    default=None,
    example="id BIGINT, ts TIMESTAMP, sensor STRING, temperature DOUBLE",
)
FIELD_OPTION = Option(
    "field",
    str,
    "Stream sources only (redis_streams): the entry field that holds the record as text; "
    "left out, the field data.",
    default=None,
    example="data",
)
NULL_VALUES_OPTION = Option(
    "null_values",
    list,
    'The texts that are a missing value (NULL) in a column of any type, STRING included, such as ["", "NA"]; '
    "any other text that is not a value of its column's type is a bad record. In JSON, a string is null "
    "when it is one of these and its column is not STRING (JSON null is always null).",
    default=list(DEFAULT_NULL_VALUES),
    items=str,
    example=["", "NA"],
)
DATE_FORMAT_OPTION = Option(
    "date_format",
    str,
    "How DATE values are written, as a Spark datetime pattern such as yyyy/MM/dd or MMM d yyyy; "
    "left out, ISO-8601 (2024-05-01).",
    default=None,
    example="yyyy/MM/dd",
)
TIMESTAMP_FORMAT_OPTION = Option(
    "timestamp_format",
    str,
    "How TIMESTAMP values are written, as a Spark datetime pattern such as dd/MM/yyyy HH:mm:ss.SSS "
    "(a zone with XXX or Z; without one, UTC); left out, ISO-8601 with an optional zone.",
    default=None,
    example="dd/MM/yyyy HH:mm:ss",
)
ENCODING_OPTION = Option(
    "encoding",
    str,
    "The text encoding of the files, such as utf-8, latin-1 or utf-16 (a BOM is read); a file in an "
    "encoding other than utf-8 is read whole by one reader, and the byte offsets in its errors count "
    "its text as UTF-8.",
    default=DEFAULT_ENCODING,
)
COMMENT_OPTION = Option(
    "comment",
    str,
    'A line that starts with this text is skipped, such as "#" (line numbers in errors still count it).',
    default=None,
    example="#",
)
ON_SCHEMA_CHANGE_OPTION = Option(
    "on_schema_change",
    str,
    "What a run does when records stop fitting the schema (a new column, a missing one, a value of "
    "another type): fail (the split fails naming the column and where), evolve (a new column lands "
    "as a nullable STRING, a missing one as nulls), rescue (the schema's columns, and what did not "
    f"fit as JSON in a {RESCUED} STRING column) or ignore (dropped, and counted). Left out: fail "
    "when the schema is inferred; a declared schema then selects its columns.",
    default=None,
    choices=POLICIES,
    example="rescue",
)
FORMATS: dict[str, FormatType] = {
    "csv": FormatType(
        "csv",
        "Delimited text (comma-separated by default), one record per line, optionally after a header line.",
        (
            SCHEMA_OPTION,
            Option(
                "header",
                bool,
                "Whether the first line of each file names the columns (a stream entry has no header).",
                default=True,
            ),
            Option("delimiter", str, 'The single character between values, such as "," or ";".', default=","),
            Option(
                "quote", str, "The single character that quotes a value holding the delimiter.", default='"'
            ),
            Option(
                "multiline",
                bool,
                "Whether a quoted value may hold newlines; files are then read whole, not cut into byte ranges.",
                default=False,
            ),
            NULL_VALUES_OPTION,
            DATE_FORMAT_OPTION,
            TIMESTAMP_FORMAT_OPTION,
            ENCODING_OPTION,
            COMMENT_OPTION,
            FIELD_OPTION,
            ON_SCHEMA_CHANGE_OPTION,
        ),
    ),
    "jsonl": FormatType(
        "jsonl",
        "JSON: one JSON object per line (JSON lines), or a file holding an array of objects or JSON "
        "documents that span lines, chosen by the file's first character that is not white space.",
        (
            SCHEMA_OPTION,
            NULL_VALUES_OPTION,
            DATE_FORMAT_OPTION,
            TIMESTAMP_FORMAT_OPTION,
            ENCODING_OPTION,
            COMMENT_OPTION,
            FIELD_OPTION,
            ON_SCHEMA_CHANGE_OPTION,
        ),
        aliases=("json", "ndjson"),
    ),
    "fields": FormatType(
        "fields",
        "The field/value pairs of a stream entry as the record, each value converted to its column's "
        "type (redis_streams only).",
        (
            SCHEMA_OPTION,
            NULL_VALUES_OPTION,
            DATE_FORMAT_OPTION,
            TIMESTAMP_FORMAT_OPTION,
            ON_SCHEMA_CHANGE_OPTION,
        ),
    ),
    "avro": FormatType(
        "avro",
        "Avro: object container files (each file's header holds its schema; its blocks are split "
        "points), or single messages of a stream written with a declared writer_schema (Avro's "
        "single-object encoding, plain binary, or a schema registry's framing).",
        (
            Option(
                "schema",
                str,
                "The columns to land in Spark DDL; each must be a field of the Avro schema with the "
                "type it converts to (a column that disagrees is refused, named). Left out, every "
                "field of the Avro schema.",
                default=None,
                example="id BIGINT, ts TIMESTAMP",
            ),
            Option(
                "writer_schema",
                str,
                "Stream sources only: the Avro schema the messages were written with, as JSON or "
                "as a path to a .avsc file under DATAFLOW_ALLOWED_ROOTS; with registry_url, the "
                "schema each message is resolved to.",
                default=None,
                example='{"type": "record", "name": "Reading", "fields": [{"name": "id", "type": "long"}]}',
                filesystem_path=True,
            ),
            Option(
                "registry_url",
                str,
                "Stream sources only: the URL of a Confluent schema registry; messages then carry a "
                "zero byte and the 4-byte id of their writer's schema, which is fetched from it.",
                default=None,
                example="http://127.0.0.1:8081",
                secret="url",
            ),
            FIELD_OPTION,
            Option(
                "on_schema_change",
                str,
                "Container files, and messages with registry_url: what a run does when a file's (a "
                "message's writer's) Avro schema stops fitting the run's columns (the declared ones, "
                "writer_schema's, or the first file's): a field added, one missing, "
                "or one of another type (a promotion such as int to long is no change). fail (the "
                "split fails naming the column and the file's block), evolve (a new field lands as a "
                "nullable STRING column, a missing one as nulls; another type fails), rescue (the "
                f"run's columns, and what did not fit as JSON in a {RESCUED} STRING column) or "
                "ignore (dropped, and counted). Left out: fail when the columns are the first file's; "
                "a declared schema then needs its columns in every file, as they are, and a "
                "registry's messages are resolved to writer_schema by Avro's rules.",
                default=None,
                choices=POLICIES,
                example="rescue",
            ),
        ),
    ),
    "parquet": FormatType(
        "parquet",
        "Parquet files, read row group by row group (a file's row groups are its split points; "
        "memory holds one row group per reader); each file's footer holds its schema.",
        (
            Option(
                "schema",
                str,
                "The columns to land in Spark DDL; each must be a column of every file with the type "
                "it reads as, or one that widens to it without loss (INT for BIGINT, DECIMAL(4,2) for "
                "DECIMAL(12,2)); a column that disagrees is refused, named. Only these are read. "
                "Left out, every column of the first file.",
                default=None,
                example="id BIGINT, customer STRING, amount DECIMAL(12,2), ts TIMESTAMP",
            ),
            Option(
                "on_schema_change",
                str,
                "What a run does when a file's columns stop fitting the run's (the declared ones, "
                "or the first file's): a column added, one missing, or one of another type (a "
                "widening such as int to long is no change). fail (the split fails naming the "
                "column and the file's row group), evolve (a new column lands as a nullable STRING, "
                "a missing one as nulls; another type fails), rescue (the run's columns, and what "
                f"did not fit as JSON in a {RESCUED} STRING column) or ignore (dropped, and counted). "
                "Left out: fail when the columns are the first file's; a declared schema then needs "
                "its columns in every file, as they are.",
                default=None,
                choices=POLICIES,
                example="rescue",
            ),
        ),
    ),
    "raw": FormatType(
        "raw",
        "Each record as the bytes it came as, in one BINARY column data: a message body (nats_jetstream), "
        "an entry's field, or a line of a file without its line break.",
        (FIELD_OPTION,),
    ),
}
FORMAT_ALIASES = {name: kind.type for kind in FORMATS.values() for name in (kind.type, *kind.aliases)}


def register_format(kind: FormatType) -> None:
    """Adds a format type (a connector plugin's); a name or alias taken already is refused."""
    for name in (kind.type, *kind.aliases):
        if name.lower() in FORMAT_ALIASES:
            raise ValueError(f"format type {name!r} is registered already")
    FORMATS[kind.type] = kind
    FORMAT_ALIASES.update({name.lower(): kind.type for name in (kind.type, *kind.aliases)})


def format_type(name: str) -> FormatType | None:
    """The format type a table's ``type`` names (an alias too, any case); None if none."""
    kind = FORMAT_ALIASES.get(str(name).lower())
    return FORMATS[kind] if kind else None


def validate_format(table: dict[str, Any], env: PathResolver | None = None) -> FormatSpec:
    """Checks a ``[format]`` table; every error names its field. ``env`` resolves a path
    the table gives (an Avro ``writer_schema``) under the allowed roots; without it, the
    path is checked when a source is built."""
    table = dict(table)
    type_name = table.pop("type", None)
    if not type_name:
        raise ConfigError("format.type", f"is required (one of: {', '.join(FORMATS)})")
    kind = format_type(type_name)
    if kind is None:
        raise ConfigError("format.type", f"unknown format {type_name!r} (one of: {', '.join(FORMATS)})")
    _check_option_types(kind, table)
    if kind.check is not None:
        kind.check(table)
    for name in ("delimiter", "quote"):
        if name in table and len(table[name]) != 1:
            raise ConfigError(f"format.{name}", "must be a single character")
    if "field" in table and not table["field"].strip():
        raise ConfigError("format.field", "must name the entry field that holds the record, such as data")
    _check_value_options(table)
    policy = table.get("on_schema_change")
    if policy is not None and policy not in POLICIES:
        raise ConfigError(
            "format.on_schema_change", f"unknown policy {policy!r} (one of: {', '.join(POLICIES)})"
        )
    comment = table.get("comment")
    if (
        kind.type == "csv"
        and comment
        and comment[0] in (table.get("delimiter", ","), table.get("quote", '"'))
    ):
        raise ConfigError(
            "format.comment",
            f"{comment!r} starts with the delimiter or the quote: it would skip records whose first "
            "value is empty or quoted",
        )
    if "schema" in table:
        _check_schema(kind.type, parse_ddl(table["schema"]))
    if kind.type == "avro":
        _check_avro_options(table, env)
    return FormatSpec(kind.type, table)


def _check_avro_options(table: dict[str, Any], env: PathResolver | None) -> None:
    url = table.get("registry_url")
    if url is not None and not url.startswith(("http://", "https://")):
        raise ConfigError("format.registry_url", "must be an http:// or https:// URL")
    writer = table.get("writer_schema")
    if writer is not None and (env is not None or is_inline_schema(writer)):
        AvroFormat(
            parse_ddl(table["schema"]) if "schema" in table else None,
            writer_schema=load_writer_schema(writer, env),
        )


#: At most this many ``null_values``, each at most ``MAX_NULL_VALUE_CHARS`` long.
MAX_NULL_VALUES = 100
MAX_NULL_VALUE_CHARS = 100


def _check_value_options(table: dict[str, Any]) -> None:
    """Refuses null values, datetime patterns, an encoding or a comment that cannot be used,
    naming the field (the patterns are translated here, so a run never meets a bad one)."""
    nulls = table.get("null_values")
    if nulls is not None:
        if len(nulls) > MAX_NULL_VALUES:
            raise ConfigError("format.null_values", f"has {len(nulls)} values, at most {MAX_NULL_VALUES}")
        for i, text in enumerate(nulls):
            if not isinstance(text, str) or len(text) > MAX_NULL_VALUE_CHARS or "\n" in text:
                raise ConfigError(
                    f"format.null_values[{i}]",
                    f"must be a text of at most {MAX_NULL_VALUE_CHARS} characters on one line",
                )
    value_rules(table)
    if "encoding" in table:
        canonical_encoding(table["encoding"])
    comment = table.get("comment")
    if comment is not None and (not comment or "\n" in comment or "\r" in comment):
        raise ConfigError("format.comment", 'must be the text a comment line starts with, such as "#"')


def _check_option_types(kind: FormatType, table: dict[str, Any]) -> None:
    allowed = option_types(kind.options)
    for name, value in table.items():
        if name not in allowed:
            raise ConfigError(f"format.{name}", f"is not an option of {kind.type} ({', '.join(allowed)})")
        expected = allowed[name]
        types = expected if isinstance(expected, tuple) else (expected,)
        if (isinstance(value, bool) and bool not in types) or not isinstance(value, types):
            raise ConfigError(f"format.{name}", f"must be a {' or a '.join(t.__name__ for t in types)}")


def _check_schema(kind: str, schema: pa.Schema) -> None:
    nested = [f.name for f in fields_of(schema) if pa.types.is_nested(f.type)]
    if kind == "csv" and nested:
        reason = f"a CSV value cannot hold a nested type (column {nested[0]!r}); read JSON lines for that"
        raise ConfigError("format.schema", reason)
    if kind == "fields" and nested:
        reason = (
            f"a field value is text and cannot hold a nested type (column {nested[0]!r}); "
            "put the record as JSON in one field and read it with type = json, field = <name>"
        )
        raise ConfigError("format.schema", reason)
