"""Metadata columns a stream source adds after the format's own (``_stream``/``_id``,
``_subject``/``_seq``/``_ts``): the run's schema with them, and the format without them."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pyarrow as pa

from source_support.errors import ConfigError
from source_support.formats.avro import AvroFormat, PathResolver
from source_support.formats.fields import FieldsFormat
from source_support.formats.parquet import ParquetFormat
from source_support.formats.record import RecordFormat
from source_support.formats.registry import FormatSpec
from source_support.formats.typed_arrow import fields_of


def with_metadata(schema: pa.Schema, metadata: Sequence[pa.Field[pa.DataType]]) -> pa.Schema:
    """``schema`` with the ``metadata`` columns after its own."""
    names = {f.name for f in metadata}
    return pa.schema([*[f for f in fields_of(schema) if f.name not in names], *metadata])


def message_schema(
    fmt: RecordFormat | AvroFormat,
    sample: Callable[[], list[bytes]],
    metadata: Sequence[pa.Field[pa.DataType]] | None,
) -> pa.Schema | None:
    """The schema of a source whose messages each hold one record (a NATS message, a
    Kinesis record): an Avro format's columns (``writer_schema``) without sampling, else
    what the format infers from the bodies ``sample`` returns (None: there are none); the
    ``metadata`` columns after them, if given."""
    if isinstance(fmt, AvroFormat):
        schema = fmt.known_schema
    else:
        bodies = sample()
        if not bodies:
            return None
        schema = fmt.infer_schema(b"\n".join(b.replace(b"\n", b" ") for b in bodies if b.strip()) + b"\n")
    return with_metadata(schema, metadata) if metadata else schema


def format_for_run(
    fmt: FormatSpec,
    schema: pa.Schema | None,
    metadata: Sequence[pa.Field[pa.DataType]] | None,
    *,
    env: PathResolver | None = None,
) -> tuple[RecordFormat | FieldsFormat | AvroFormat, pa.Schema | None]:
    """The format a stream source reads with (entries), and the run's schema: given, the
    format's columns are its others; inferred later, None; from the format's own schema,
    that with the ``metadata`` columns (None: the source adds none). A format column named
    as a metadata one is refused naming ``format.schema``. ``env`` resolves a format's
    file (an Avro ``writer_schema`` path)."""
    names = {f.name for f in metadata or ()}
    if schema is not None and metadata:
        record_format = _for_entries(
            fmt.build(pa.schema([f for f in fields_of(schema) if f.name not in names]), entries=True, env=env)
        )
        return record_format, schema
    record_format = _for_entries(fmt.build(schema, entries=True, env=env))
    if schema is None and record_format.schema is not None and metadata:
        clash = [n for n in record_format.schema.names if n in names]
        if clash:
            raise ConfigError("format.schema", f"column {clash[0]} is a metadata column (source.metadata)")
        return record_format, with_metadata(record_format.schema, metadata)
    return record_format, schema if schema is not None else record_format.schema


def _for_entries(
    built: RecordFormat | FieldsFormat | AvroFormat | ParquetFormat,
) -> RecordFormat | FieldsFormat | AvroFormat:
    """A format built for entries, which is never Parquet (``build(entries=True)`` refuses it)."""
    assert not isinstance(built, ParquetFormat)
    return built
