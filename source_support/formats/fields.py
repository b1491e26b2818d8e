"""Fields: the field/value pairs of a stream entry as a record, each value converted to its
column's type, vectorized; and the inference of a schema from sampled values."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from source_support.api import SchemaChange
from source_support.datetime_patterns import parse_with_pattern
from source_support.formats.drift import RETYPED, as_text, settle
from source_support.formats.holder import SchemaHolder
from source_support.formats.typed_arrow import Mask, as_mask, fields_of, nulls
from source_support.formats.values import (
    ISO_TIMESTAMP_START,
    ValueRules,
    cast_each_failing,
    convert_text,
    shown_value,
    to_instants,
)
from source_support.schema import spark_type


class FieldsFormat(SchemaHolder):
    """Records that are maps of field name to text (the field/value pairs of a stream
    entry), each value converted to its schema column's type, vectorized; a field that is
    absent is null, and so is a value in ``null_values`` (an empty one by default), whatever
    its type. A TIMESTAMP value is ISO-8601 text (or ``timestamp_format``) or milliseconds
    since the epoch."""

    type_name = "fields"
    record_field: str | None = None

    def __init__(
        self,
        schema: pa.Schema | None,
        *,
        rules: ValueRules | None = None,
        on_schema_change: str | None = None,
    ) -> None:
        self.schema = schema
        self.rules = rules or ValueRules()
        #: What an entry with a field the schema lacks, or a value of another type, lands
        #: as (``drift``); None: the schema's fields are read and the others ignored.
        self.on_schema_change = on_schema_change
        #: The schema changes the last ``convert`` saw, each at the index of its entry.
        self.drift_seen: list[SchemaChange] = []

    def with_schema(self, schema: pa.Schema) -> FieldsFormat:
        return FieldsFormat(schema, rules=self.rules, on_schema_change=self.on_schema_change)

    def convert(self, texts: dict[str, pa.Array[Any]], count: int) -> tuple[pa.Table, dict[int, str]]:
        """The ``count`` records whose values are ``texts`` (column -> binary or string
        values, null where absent; a column not given is all null), and why each bad
        record (by index) is bad. Bad records stay in the table, with nulls where their
        values failed: the caller drops them.

        Under ``on_schema_change`` a field of ``texts`` the schema lacks is a new column, and
        a value that does not convert to its column's type is retyped under rescue and
        ignore (a bad record under fail and evolve), as in CSV (``drift.settle``; an absent
        field is null, as a JSON key is); the changes are left in ``drift_seen``."""
        schema = self.known_schema
        tolerant = self.on_schema_change in ("rescue", "ignore")
        columns: list[pa.Array[Any]] = []
        fields = list(fields_of(schema))
        reasons: dict[int, str] = {}
        retyped: dict[str, pa.Array[Any]] = {}
        for f in fields_of(schema):
            values = texts.get(f.name)
            if values is None:
                columns.append(nulls(count, f.type))
                continue
            converted, failed = _convert_field(values, f.type, self.rules)
            columns.append(converted)
            if tolerant and failed.any():
                retyped[RETYPED + f.name] = pc.if_else(pa.array(failed), _as_text(values), None)
                continue
            for row in np.flatnonzero(failed):
                reasons.setdefault(int(row), _field_reason(f, values[int(row)].as_py()))
        self.drift_seen = []
        if self.on_schema_change is None:
            return pa.Table.from_arrays(columns, schema=schema), reasons
        for name, values in [*((n, v) for n, v in texts.items() if n not in schema.names), *retyped.items()]:
            fields.append(pa.field(name, pa.string()))
            columns.append(values if name in retyped else _as_text(values))
        table, self.drift_seen = settle(
            pa.Table.from_arrays(columns, schema=pa.schema(fields)),
            schema,
            self.on_schema_change,
            row_positions=np.arange(count, dtype=np.int64),
        )
        return table, reasons

    def infer_schema(self, texts: dict[str, pa.Array[Any]]) -> pa.Schema:
        """A schema for sampled values (column -> texts, in the order fields were first
        seen): each column the narrowest of BIGINT, DOUBLE, BOOLEAN, TIMESTAMP that all its
        values convert to, else STRING."""
        return pa.schema(
            [pa.field(name, _infer_field_type(values, self.rules)) for name, values in texts.items()]
        )


_INFERRED_ORDER = (pa.int64(), pa.float64(), pa.bool_(), pa.timestamp("us", tz="UTC"))


def _infer_field_type(values: pa.Array[Any], rules: ValueRules) -> pa.DataType:
    present = pc.drop_null(values)
    if pa.types.is_binary(present.type):
        present, decoded = cast_each_failing(present, pa.string())
        if not decoded.all():
            return pa.string()
    present = rules.present(present)
    if not len(present):
        return pa.string()
    for candidate in _INFERRED_ORDER:
        if (
            pa.types.is_timestamp(candidate)
            and not pc.all(pc.match_substring_regex(present, ISO_TIMESTAMP_START)).as_py()
        ):
            continue  # epoch numbers are BIGINT, not timestamps, when nothing says so
        _, failed = _convert_field(present, candidate, ValueRules(rules.null_values))
        if not failed.any():
            return candidate
    return pa.string()


def _convert_field(
    values: pa.Array[Any], arrow_type: pa.DataType, rules: ValueRules
) -> tuple[pa.Array[Any], Mask]:
    """Field texts as ``arrow_type`` (a text in ``rules.null_values`` is null, whatever the
    type), and the mask of the values that did not convert."""
    if pa.types.is_timestamp(arrow_type):
        return _convert_timestamp(values, arrow_type, rules)
    return convert_text(values, arrow_type, rules=rules)


def _convert_timestamp(
    values: pa.Array[Any], arrow_type: pa.TimestampType[Any, Any], rules: ValueRules
) -> tuple[pa.Array[Any], Mask]:
    """ISO-8601 texts (or texts of ``rules.timestamp_format``) or epoch milliseconds as instants."""
    texts, failed = convert_text(values, pa.string(), rules=rules)
    texts = pc.utf8_trim_whitespace(texts)
    epoch = as_mask(pc.match_substring_regex(texts, r"^[+-]?\d{1,15}$"))
    not_epoch = pc.if_else(epoch, pa.scalar(None, pa.string()), texts)
    if rules.timestamp_format is not None:
        instants, bad = parse_with_pattern(not_epoch, rules.timestamp_format, arrow_type)
    else:
        instants, bad = to_instants(not_epoch, arrow_type)
    if epoch.any():
        millis = pc.if_else(epoch, texts, pa.scalar(None, pa.string())).cast(pa.int64())
        per_ms = {"s": None, "ms": 1, "us": 1000, "ns": 1_000_000}[arrow_type.unit]
        scaled = pc.divide(millis, 1000) if per_ms is None else pc.multiply(millis, per_ms)
        from_epoch = scaled.cast(pa.int64()).cast(pa.timestamp(arrow_type.unit, tz=arrow_type.tz))
        instants = pc.if_else(epoch, from_epoch, instants)
    return instants, failed | bad


def _as_text(values: pa.Array[Any]) -> pa.Array[Any]:
    return as_text(pa.chunked_array([values]))


def _field_reason(f: pa.Field[pa.DataType], value: bytes | str | None) -> str:
    return f"field {f.name!r}: invalid value {shown_value(value)} for {spark_type(f.type)}"
