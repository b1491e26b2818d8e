"""Record formats: what a source's ``[format]`` table says, and the parsers it builds.

- ``registry``: the format types and their options, ``validate_format``, ``FormatSpec``;
- ``record``: ``RecordFormat``, the Arrow parse path that CSV and JSON share (a fast parse
  of a whole block, then the slow path that finds the bad records);
- ``avro``: Avro container files and messages (not lines), with ``avro_types`` (Avro
  schemas as Arrow types) and ``avro_container`` (a container file read block by block);
- ``parquet``: Parquet files, each file's footer its schema (row groups read by the files
  source's ``parquet_reader``);
- ``csv``, ``json``: the two record formats of lines; ``json_values`` checks a decoded JSON
  record against the schema;
- ``fields``: the field/value pairs of a stream entry as a record;
- ``values``: how a field's text becomes a value (``ValueRules``, null texts, conversions).
"""

from source_support.formats.avro import AvroFormat, BadMessage, is_inline_schema
from source_support.formats.csv import CsvFormat, MissingColumns
from source_support.formats.fields import FieldsFormat
from source_support.formats.json import JSON_LAYOUT_SAMPLE, JsonDocumentsFormat, JsonLinesFormat, json_layout
from source_support.formats.parquet import ParquetFormat
from source_support.formats.record import NEWLINE, ReadError, RecordFormat
from source_support.formats.registry import (
    FORMAT_ALIASES,
    FORMATS,
    FormatSpec,
    FormatType,
    canonical_encoding,
    check_format_for_source,
    format_type,
    register_format,
    validate_format,
)
from source_support.formats.values import ARROW_ERRORS, ValueRules, value_rules

__all__ = [
    "ARROW_ERRORS",
    "AvroFormat",
    "BadMessage",
    "FORMATS",
    "FORMAT_ALIASES",
    "JSON_LAYOUT_SAMPLE",
    "NEWLINE",
    "CsvFormat",
    "FieldsFormat",
    "FormatSpec",
    "FormatType",
    "JsonDocumentsFormat",
    "JsonLinesFormat",
    "MissingColumns",
    "ParquetFormat",
    "ReadError",
    "RecordFormat",
    "ValueRules",
    "canonical_encoding",
    "check_format_for_source",
    "format_type",
    "is_inline_schema",
    "json_layout",
    "register_format",
    "validate_format",
    "value_rules",
]
