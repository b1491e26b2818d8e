"""Avro schemas as Arrow types, and fastavro's decoded values as Arrow columns.

The types follow what Spark's own Avro reader (spark-avro) lands, so a flow's transform
sees what a Spark user expects:

- ``timestamp-millis``/``-micros`` -> TIMESTAMP (UTC); ``local-timestamp-*`` -> TIMESTAMP_NTZ;
- ``decimal`` -> DECIMAL(p, s); ``date`` -> DATE; ``uuid`` and ``enum`` -> STRING;
- ``time-millis`` -> INT (milliseconds after midnight), ``time-micros`` -> BIGINT
  (microseconds): Spark 4.0 has no TIME type and cannot read a Parquet TIME column;
- ``bytes`` and ``fixed`` -> BINARY; records -> STRUCT; arrays -> ARRAY; maps -> MAP<STRING, _>;
- a union of ``null`` and one type -> that type, nullable; ``[int, long]`` -> BIGINT and
  ``[float, double]`` -> DOUBLE; any other union -> STRUCT<member0, member1, ...> with one
  field per branch other than ``null``, of which the branch a value was written with is
  set and the others are null (Spark's rule);
- a field of type ``null`` (always null) -> STRING;
- a logical type this module does not know is read as its underlying type (the Avro spec
  says so); a recursive record cannot be a column and is refused.
"""

from __future__ import annotations

import datetime
import decimal
import uuid
from collections.abc import Callable, Sequence
from typing import Any, cast

import pyarrow as pa

from source_support.typed_arrow import fields_of

#: A parsed Avro schema as JSON gives it (a name, a list for a union, or an object).
AvroSchema = Any
#: Turns one decoded value into what Arrow builds its column from.
Fixup = Callable[[Any], Any]

_PRIMITIVE: dict[str, pa.DataType] = {
    "null": pa.string(),  # a field that is always null: Spark has no column type for it
    "boolean": pa.bool_(),
    "int": pa.int32(),
    "long": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "bytes": pa.binary(),
    "string": pa.string(),
}
_TIMESTAMPS = {
    "timestamp-millis": pa.timestamp("us", tz="UTC"),
    "timestamp-micros": pa.timestamp("us", tz="UTC"),
    "local-timestamp-millis": pa.timestamp("us"),
    "local-timestamp-micros": pa.timestamp("us"),
}
#: Spark's largest DECIMAL precision.
MAX_PRECISION = 38


class AvroTypeError(ValueError):
    """An Avro schema that has no Arrow column type (the message names the field)."""


class AvroTypes:
    """The Arrow schema of an Avro record schema, and how its decoded records become an
    Arrow table. Named types are looked up by full name as the schema defines them."""

    def __init__(self, schema: AvroSchema) -> None:
        self.named: dict[str, AvroSchema] = {}
        if not (isinstance(schema, dict) and cast(dict[str, Any], schema).get("type") == "record"):
            raise AvroTypeError("the top-level Avro schema must be a record (its fields are the columns)")
        top = cast(dict[str, Any], schema)
        namespace = top.get("namespace")
        full = self._full_name(top["name"], namespace)
        self.named[full] = top
        self.arrow_schema = pa.schema(
            [
                pa.field(f["name"], self._arrow(f["type"], f["name"], (full,), namespace))
                for f in top["fields"]
            ]
        )
        self.fields: list[tuple[str, AvroSchema]] = [(f["name"], f["type"]) for f in top["fields"]]
        self.fixups: dict[str, Fixup | None] = {name: self.fixup(t) for name, t in self.fields}

    def table(self, records: Sequence[dict[str, Any]]) -> pa.Table:
        """The records as a table of ``arrow_schema``. Arrow converts the records as one
        array of structs (measured: about twice as fast as column by column); the fields
        that need a fixup are fixed in place first (the records are fastavro's, fresh)."""
        fixes = [(name, fix) for name, fix in self.fixups.items() if fix is not None]
        if fixes:
            for record in records:
                for name, fix in fixes:
                    value = record.get(name)
                    if value is not None:
                        record[name] = fix(value)
        rows = pa.array(records, type=pa.struct(fields_of(self.arrow_schema)))
        return pa.Table.from_struct_array(cast(pa.StructArray, rows))

    # -- schema -> Arrow -------------------------------------------------------------------

    def _arrow(self, t: AvroSchema, path: str, seen: tuple[str, ...], namespace: str | None) -> pa.DataType:
        if isinstance(t, str):
            if t in _PRIMITIVE:
                return _PRIMITIVE[t]
            full = self._full_name(t, namespace)
            if full in seen:
                raise AvroTypeError(
                    f"field {path!r} is a recursive record ({full}), which no column can hold"
                )
            if full not in self.named:
                raise AvroTypeError(f"field {path!r}: unknown type {t!r}")
            return self._arrow(self.named[full], path, seen, namespace)
        if isinstance(t, list):
            return self._union(cast(list[AvroSchema], t), path, seen, namespace)
        spec = cast(dict[str, Any], t)
        kind = spec["type"]
        logical = spec.get("logicalType")
        if kind in ("record", "enum", "fixed"):
            namespace = spec.get("namespace", namespace)
            full = self._full_name(spec["name"], namespace)
            self.named[full] = spec
            if kind == "record":
                seen = (*seen, full)
                return pa.struct(
                    [
                        pa.field(f["name"], self._arrow(f["type"], f"{path}.{f['name']}", seen, namespace))
                        for f in spec["fields"]
                    ]
                )
            if kind == "enum":
                return pa.string()
            if logical == "decimal":
                return _decimal(spec, path)
            return pa.binary()
        if kind == "array":
            return pa.list_(self._arrow(spec["items"], f"{path}[]", seen, namespace))
        if kind == "map":
            return pa.map_(pa.string(), self._arrow(spec["values"], f"{path}{{}}", seen, namespace))
        if logical in _TIMESTAMPS and kind == "long":
            return _TIMESTAMPS[logical]
        if logical == "decimal" and kind == "bytes":
            return _decimal(spec, path)
        if logical == "date" and kind == "int":
            return pa.date32()
        if logical == "uuid" and kind == "string":
            return pa.string()
        return self._arrow(kind, path, seen, namespace)  # time-* as their integers, others as theirs

    def _union(
        self, branches: list[AvroSchema], path: str, seen: tuple[str, ...], namespace: str | None
    ) -> pa.DataType:
        others = [b for b in branches if b != "null"]
        if not others:
            return pa.string()
        if len(others) == 1:
            return self._arrow(others[0], path, seen, namespace)
        widened = _widened(others)
        if widened is not None:
            return widened
        return pa.struct(
            [
                pa.field(f"member{i}", self._arrow(b, f"{path}.member{i}", seen, namespace))
                for i, b in enumerate(others)
            ]
        )

    @staticmethod
    def _full_name(name: str, namespace: str | None) -> str:
        return name if "." in name or not namespace else f"{namespace}.{name}"

    # -- decoded values -> what Arrow builds from ----------------------------------------

    def resolve(self, t: AvroSchema) -> AvroSchema:
        """A named type's definition; any other type as it is."""
        if isinstance(t, str) and t not in _PRIMITIVE:
            for full, spec in self.named.items():
                if full == t or full.rsplit(".", 1)[-1] == t:
                    return spec
        return t

    def fixup(self, t: AvroSchema) -> Fixup | None:
        """How a value of ``t`` as fastavro decodes it becomes one Arrow takes; None if it
        takes it as it is (most types: no Python pass over the column)."""
        t = self.resolve(t)
        if isinstance(t, list):
            return self._union_fixup(cast(list[AvroSchema], t))
        if isinstance(t, str):
            return None
        spec = cast(dict[str, Any], t)
        kind, logical = spec["type"], spec.get("logicalType")
        if kind == "record":
            inner = {f["name"]: self.fixup(f["type"]) for f in spec["fields"]}
            fixes = {name: fix for name, fix in inner.items() if fix is not None}
            if not fixes:
                return None
            return lambda value: {
                **value,
                **{n: None if value.get(n) is None else f(value[n]) for n, f in fixes.items()},
            }
        if kind == "array":
            item = self.fixup(spec["items"])
            return None if item is None else lambda value: [None if v is None else item(v) for v in value]
        if kind == "map":
            item = self.fixup(spec["values"])
            if item is None:
                return None
            return lambda value: {k: None if v is None else item(v) for k, v in value.items()}
        if logical == "uuid" and kind == "string":
            return str
        if logical == "time-millis" and kind == "int":
            return _time_millis
        if logical == "time-micros" and kind == "long":
            return _time_micros
        return None

    def _union_fixup(self, branches: list[AvroSchema]) -> Fixup | None:
        others = [self.resolve(b) for b in branches if b != "null"]
        if len(others) == 1:
            return self.fixup(others[0])
        if _widened(others) is not None:
            return None
        fixes = [self.fixup(b) for b in others]

        def member(value: Any) -> dict[str, Any]:
            index = _branch_of(value, others)
            if isinstance(value, tuple):  # a record named by fastavro (several records in the union)
                value = cast(tuple[str, Any], value)[1]
            fix = fixes[index]
            return {f"member{index}": value if fix is None else fix(value)}

        return member


def _widened(branches: list[AvroSchema]) -> pa.DataType | None:
    """The one type of a union of ``int`` and ``long`` (BIGINT) or of ``float`` and
    ``double`` (DOUBLE), as Spark reads them; None for any other union."""
    names = {b for b in branches if isinstance(b, str)}
    if len(names) != len(branches):
        return None
    if names <= {"int", "long"}:
        return pa.int64()
    if names <= {"float", "double"}:
        return pa.float64()
    return None


def _decimal(spec: dict[str, Any], path: str) -> pa.DataType:
    precision, scale = int(spec["precision"]), int(spec.get("scale", 0))
    if not 1 <= precision <= MAX_PRECISION:
        raise AvroTypeError(
            f"field {path!r} is a decimal of precision {precision}; Spark holds at most {MAX_PRECISION}"
        )
    return pa.decimal128(precision, scale)


def _time_millis(value: datetime.time) -> int:
    return ((value.hour * 60 + value.minute) * 60 + value.second) * 1000 + value.microsecond // 1000


def _time_micros(value: datetime.time) -> int:
    return ((value.hour * 60 + value.minute) * 60 + value.second) * 1_000_000 + value.microsecond


#: The Python type fastavro decodes each kind of branch to, by its type or logical type.
_PYTHON_TYPES: dict[str, tuple[type, ...]] = {
    "boolean": (bool,),
    "int": (int,),
    "long": (int,),
    "float": (float,),
    "double": (float,),
    "string": (str,),
    "enum": (str,),
    "bytes": (bytes,),
    "fixed": (bytes,),
    "array": (list,),
    "map": (dict,),
    "record": (dict, tuple),
    "decimal": (decimal.Decimal,),
    "uuid": (uuid.UUID, str),
    "date": (datetime.date,),
    "time-millis": (datetime.time,),
    "time-micros": (datetime.time,),
    "timestamp-millis": (datetime.datetime,),
    "timestamp-micros": (datetime.datetime,),
    "local-timestamp-millis": (datetime.datetime,),
    "local-timestamp-micros": (datetime.datetime,),
}


def _branch_of(value: Any, branches: list[AvroSchema]) -> int:
    """The index of the union branch a decoded value was written with (the first that fits:
    a record fastavro names by a tuple is found by its name)."""
    for i, branch in enumerate(branches):
        if isinstance(value, tuple) and isinstance(branch, dict):
            spec = cast(dict[str, Any], branch)
            name = cast(tuple[str, Any], value)[0]
            if spec.get("type") == "record" and name.rsplit(".", 1)[-1] == spec["name"].rsplit(".", 1)[-1]:
                return i
            continue
        if isinstance(branch, dict):
            spec = cast(dict[str, Any], branch)
            kind = spec.get("logicalType") if spec.get("logicalType") in _PYTHON_TYPES else spec["type"]
        else:
            kind = branch
        types = _PYTHON_TYPES.get(str(kind), ())
        if isinstance(value, bool) and bool not in types:
            continue
        if kind == "date" and isinstance(value, datetime.datetime):
            continue
        if isinstance(value, types):
            return i
    raise ValueError(f"a value of type {type(cast(object, value)).__name__} fits no branch of the union")
