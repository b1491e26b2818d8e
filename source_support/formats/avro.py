"""The ``avro`` format: object container files (files sources) and single Avro messages
(stream sources), decoded by fastavro and landed as Arrow with the types of ``avro_types``.

It is not a line format (``RecordFormat``): a file is read block by block
(``avro_container``), and a message body is one record. A message body is, in this order:

- with ``registry_url``: Confluent's framing, a zero byte, the 4-byte id of the writer's
  schema in the schema registry and the Avro body; the declared ``writer_schema`` is then the
  reader's schema, to which each message is resolved (Avro schema resolution), so the
  landed columns stay fixed while producers evolve their schema;
- a body that starts with ``C3 01`` followed by the CRC-64-AVRO fingerprint of
  ``writer_schema``: Avro's single-object encoding;
- any other body: the plain binary encoding of a ``writer_schema`` record.

``AvroFormat.decode`` turns one body into a record (a dict as fastavro gives it), raising
``BadMessage`` with the reason; ``decode_batch`` turns many into an Arrow table and the
reasons of the bad ones by index: what a stream connector (Redis Streams, NATS, Kafka) calls.
"""

from __future__ import annotations

import copy
import io
import json
import struct
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

import fastavro
import fastavro.schema
import numpy as np
import pyarrow as pa

from source_support.api import SchemaChange
from source_support.errors import ConfigError
from source_support.formats import typed_columns
from source_support.formats.avro_types import AvroSchema, AvroTypeError, AvroTypes
from source_support.formats.drift import SchemaDrift
from source_support.formats.holder import SchemaHolder
from source_support.formats.record import ReadError
from source_support.formats.typed_arrow import Offsets
from source_support.formats.typed_columns import select_columns, settled

SINGLE_OBJECT_MAGIC = b"\xc3\x01"
CONFLUENT_MAGIC = b"\x00"
#: How long a schema registry may take to answer.
REGISTRY_TIMEOUT_S = 10.0
#: The largest writer schema read from a file.
MAX_SCHEMA_BYTES = 1 << 20


class PathResolver(Protocol):
    """What resolves a path a user gave under the allowed roots (``Environment``)."""

    def resolve_path(self, value: str, field_name: str) -> Path: ...


class BadMessage(ValueError):
    """A message body that is not an Avro record of the declared schema; says why."""


def is_inline_schema(text: str) -> bool:
    """Whether ``writer_schema`` holds the schema itself (JSON) rather than a path to it."""
    return text.lstrip()[:1] in ("{", "[", '"')


def load_writer_schema(text: str, env: PathResolver | None) -> AvroSchema:
    """The Avro schema ``format.writer_schema`` gives, inline or in a file under the allowed
    roots; ConfigError naming ``format.writer_schema`` if it cannot be read or parsed."""
    field = "format.writer_schema"
    source = ""  # the schema was written inline
    if not is_inline_schema(text):
        if env is None:
            raise ConfigError(field, "a path needs the allowed roots to be resolved against")
        path = env.resolve_path(text, field)
        try:
            with open(path, "rb") as f:
                raw = f.read(MAX_SCHEMA_BYTES + 1)
        except OSError as exc:
            raise ConfigError(field, f"cannot read {path}: {exc.strerror or exc}") from None
        if len(raw) > MAX_SCHEMA_BYTES:
            raise ConfigError(field, f"{path} is larger than {MAX_SCHEMA_BYTES >> 20} MB")
        text = raw.decode("utf-8", errors="replace")
        source = f"{path} "
    try:
        schema = json.loads(text)
    except ValueError as exc:
        # As below: where a file's parse failed may tell what it holds.
        detail = f": {exc}" if not source else " (write it inline to see the parser's reason)"
        raise ConfigError(field, f"{source}is not JSON{detail}") from None
    try:
        fastavro.parse_schema(schema)
        AvroTypes(schema)
    except (AvroTypeError, fastavro.schema.SchemaParseException, ValueError, TypeError, KeyError) as exc:
        # A file's parser message may quote what the file holds: said only of a schema
        # the user wrote inline, never of a file that may be someone else's data.
        detail = f": {exc}" if not source else " (write it inline to see the parser's reason)"
        raise ConfigError(field, f"{source}is not an Avro record schema{detail}") from None
    return schema


def conform(avro: pa.Schema, declared: pa.Schema | None, *, where: str) -> pa.Schema:
    """The columns landed: the declared ones (each must be in the Avro schema with the same
    type), or all of the Avro schema's. ValueError naming the column that disagrees."""
    return typed_columns.conform(avro, declared, where=where, kind="Avro")


def single_object_fingerprint(schema: AvroSchema) -> bytes:
    """The CRC-64-AVRO fingerprint of a schema's parsing canonical form, little-endian, as
    the single-object encoding writes it after ``C3 01``."""
    canonical = fastavro.schema.to_parsing_canonical_form(fastavro.parse_schema(schema))
    return bytes.fromhex(
        fastavro.schema.fingerprint(canonical, "CRC-64-AVRO")
    )  # fastavro's hex is little-endian


class SchemaRegistry:
    """A Confluent schema registry read over HTTP (``GET /schemas/ids/<id>``); schemas are
    kept by id, which never changes its schema."""

    def __init__(self, url: str, *, timeout_s: float = REGISTRY_TIMEOUT_S) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self.schemas: dict[int, Any] = {}
        #: The schemas as the registry gave them (JSON), by id.
        self.declared: dict[int, AvroSchema] = {}

    def schema(self, schema_id: int) -> Any:
        """The parsed writer schema of ``schema_id``; BadMessage if the registry has none."""
        parsed = self.schemas.get(schema_id)
        if parsed is None:
            url = f"{self.url}/schemas/ids/{schema_id}"
            try:
                with urllib.request.urlopen(url, timeout=self.timeout_s) as response:  # noqa: S310 - http(s) checked at validation
                    body = json.loads(response.read())
            except urllib.error.HTTPError as exc:
                if exc.code == 404:
                    raise BadMessage(f"schema id {schema_id} is not in the schema registry") from None
                raise
            self.declared[schema_id] = json.loads(body["schema"])
            parsed = fastavro.parse_schema(self.declared[schema_id])
            self.schemas[schema_id] = parsed
        return parsed


class AvroFormat(SchemaHolder):
    """Avro records into Arrow tables of one schema: the declared one (``format.schema``),
    the writer schema's, or the first file's."""

    type_name = "avro"

    def __init__(
        self,
        schema: pa.Schema | None = None,
        *,
        writer_schema: AvroSchema | None = None,
        registry_url: str | None = None,
        record_field: str | None = None,
        on_schema_change: str | None = None,
    ) -> None:
        #: The declared columns (``format.schema``); None: those of the Avro schema.
        self.declared = schema
        #: What a container file whose Avro schema adds, lacks or retypes a column of the
        #: run's lands (``drift``); None: the run's columns must all be in it, as they are.
        self.on_schema_change = on_schema_change
        #: The schema changes the last ``decode_batch`` saw, each at its message's index.
        self.drift_seen: list[SchemaChange] = []
        self.writer_schema = writer_schema
        #: The field of a stream entry that holds the message (``format.field``).
        self.record_field = record_field
        self.registry = SchemaRegistry(registry_url) if registry_url else None
        self._types: dict[str, AvroTypes] = {}
        self.schema = schema
        if writer_schema is not None:
            self.writer = fastavro.parse_schema(writer_schema)
            self.fingerprint = single_object_fingerprint(writer_schema)
            avro = self.types_of(writer_schema).arrow_schema
            try:
                self.schema = conform(avro, schema, where="format.writer_schema")
            except ValueError as exc:
                raise ConfigError("format.schema", str(exc)) from None

    def types_of(self, avro_schema: AvroSchema) -> AvroTypes:
        """The Arrow types of an Avro schema (kept: a file's blocks share it)."""
        key = json.dumps(avro_schema, sort_keys=True)
        types = self._types.get(key)
        if types is None:
            types = self._types[key] = AvroTypes(avro_schema)
        return types

    def with_schema(self, schema: pa.Schema) -> AvroFormat:
        """This format landing ``schema`` (the run's, fixed when it started)."""
        clone = copy.copy(self)
        clone.schema = schema
        return clone

    # -- container files -------------------------------------------------------------------

    def columns_of(self, avro_schema: AvroSchema, *, where: str) -> pa.Schema:
        """The columns landed from records of ``avro_schema`` (the declared ones, or all);
        ValueError naming the column that disagrees, or the field no column can hold."""
        try:
            return conform(self.types_of(avro_schema).arrow_schema, self.declared, where=where)
        except AvroTypeError as exc:
            raise ValueError(f"{where}: {exc}") from None

    def file_table(
        self,
        records: Sequence[dict[str, Any]],
        avro_schema: AvroSchema,
        *,
        path: str,
        row_positions: Offsets | None = None,
    ) -> tuple[pa.Table, list[SchemaChange]]:
        """Records of a file written with ``avro_schema`` as the run lands them, and the
        schema changes seen in them (``row_positions[i]``: where record ``i``'s block
        starts). Without ``on_schema_change``, ReadError naming the file if its schema does
        not give the run's columns; with it, its columns that the run's schema lacks, the
        run's columns it lacks and those of another type are settled as CSV's are
        (``drift.settle``; ``SchemaDrift`` under fail)."""
        try:
            types = self.types_of(avro_schema)
            landed = (
                conform(types.arrow_schema, self.known_schema, where=path)
                if self.on_schema_change is None
                else None
            )
        except ValueError as exc:
            raise ReadError(f"{path}: its Avro schema does not fit the run's columns: {exc}") from None
        if landed is not None:
            return select_columns(types.table(records), landed).cast(landed), []
        return settled(
            types.table(records), self.known_schema, self.on_schema_change, row_positions=row_positions
        )

    def check_file_schema(self, avro_schema: AvroSchema, *, path: str) -> None:
        """ConfigError naming ``format.schema`` if a file's Avro schema disagrees with it."""
        try:
            self.columns_of(avro_schema, where=path)
        except ValueError as exc:
            raise ConfigError("format.schema", str(exc)) from None

    # -- messages --------------------------------------------------------------------------

    def decode(self, body: bytes) -> dict[str, Any]:
        """One message body as a record of ``writer_schema`` (see the module's docstring for
        the framings read); BadMessage with the reason if it is not one."""
        return self._decode(body)[0]

    def _decode(self, body: bytes) -> tuple[dict[str, Any], int | None]:
        """A message body's record and the registry id of its writer's schema (None without
        a registry). Under ``on_schema_change`` a registry's message is read with its own
        writer's schema, not resolved to ``writer_schema``: its columns are settled after."""
        if self.writer_schema is None:
            raise ConfigError("format.writer_schema", "is needed to read Avro messages")
        writer, reader, offset, schema_id = self.writer, None, 0, None
        if self.registry is not None:
            if len(body) < 5 or body[:1] != CONFLUENT_MAGIC:
                raise BadMessage(
                    "not in the schema registry's framing (a zero byte, then a 4-byte schema id)"
                )
            schema_id = struct.unpack(">I", body[1:5])[0]
            writer, offset = self.registry.schema(schema_id), 5
            reader = None if self.on_schema_change is not None else self.writer
        elif body[:2] == SINGLE_OBJECT_MAGIC and body[2:10] == self.fingerprint:
            offset = 10
        stream = io.BytesIO(body)
        stream.seek(offset)
        try:
            record = fastavro.schemaless_reader(  # pyright: ignore[reportUnknownMemberType]
                stream, writer, reader, return_record_name=True, return_record_name_override=True
            )
        except Exception as exc:  # noqa: BLE001 - a bad body fails in many ways inside fastavro
            raise BadMessage(
                f"not an Avro record of the declared schema ({type(exc).__name__}: {exc})"
            ) from None
        if stream.tell() != len(body):
            raise BadMessage(
                f"not an Avro record of the declared schema: {len(body) - stream.tell()} bytes left after the record"
            )
        if not isinstance(record, dict):
            raise BadMessage("not an Avro record")
        return record, schema_id  # pyright: ignore[reportUnknownVariableType]

    def decode_batch(
        self, bodies: Sequence[bytes | None], *, first_only: bool = False
    ) -> tuple[pa.Table, dict[int, str]]:
        """The records of ``bodies`` (None: a message without a body) as a table of the
        run's schema, and why each bad body (by index) is bad; with ``first_only``, only the
        first bad one and no records."""
        records: list[dict[str, Any]] = []
        #: Per record, its message's index and its writer's registry id.
        origins: list[tuple[int, int | None]] = []
        bad: dict[int, str] = {}
        self.drift_seen = []
        for i, body in enumerate(bodies):
            if not body:
                bad[i] = "the message has no body" if body is None else "the message body is empty"
            else:
                try:
                    record, schema_id = self._decode(body)
                except BadMessage as exc:
                    bad[i] = str(exc)
                else:
                    records.append(record)
                    origins.append((i, schema_id))
            if first_only and bad:
                return self.empty(), bad
        if not records:
            return self.empty(), bad
        if self.on_schema_change is not None and self.registry is not None:
            return self._settled_by_writer(records, origins), bad
        table = select_columns(self.types_of(self.writer_schema).table(records), self.known_schema)
        return table.cast(self.known_schema), bad

    def _settled_by_writer(
        self, records: list[dict[str, Any]], origins: list[tuple[int, int | None]]
    ) -> pa.Table:
        """Records read each with its writer's schema as the run lands them, in their
        messages' order: the records of each writer's schema settled as a file's are
        (``drift.settle``, a change at its message's index; ``SchemaDrift`` under fail)."""
        assert self.registry is not None and self.on_schema_change is not None
        by_writer: dict[int | None, list[int]] = {}
        for n, (_, schema_id) in enumerate(origins):
            by_writer.setdefault(schema_id, []).append(n)
        tables: list[pa.Table] = []
        order: list[int] = []
        for schema_id, members in by_writer.items():
            assert schema_id is not None  # a registry's message always names its writer
            indices = np.asarray([origins[n][0] for n in members], np.int64)
            try:
                types = self.types_of(self.registry.declared[schema_id])
            except AvroTypeError as exc:
                raise ReadError(f"the writer's schema {schema_id} in the schema registry: {exc}") from None
            table = types.table([records[n] for n in members])
            try:
                landed, changes = settled(
                    table, self.known_schema, self.on_schema_change, row_positions=indices
                )
            except SchemaDrift as exc:
                at = exc.change.position if exc.change.position >= 0 else int(indices[0])
                raise SchemaDrift(replace(exc.change, position=at)) from None
            self.drift_seen += [
                replace(c, position=c.position if c.position >= 0 else int(indices[0])) for c in changes
            ]
            tables.append(landed)
            order += members
        merged = pa.concat_tables(tables, promote_options="default")
        return merged.take(np.argsort(np.asarray(order, np.int64), kind="stable"))
