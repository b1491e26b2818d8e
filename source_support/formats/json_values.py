"""Whether a decoded JSON record fits a schema as Arrow's JSON reader reads it, checked in
Python record by record (the slow path finds each bad record this way, in one pass)."""

from __future__ import annotations

import json
from typing import TypeAlias

import pyarrow as pa

from source_support.formats.typed_arrow import fields_of
from source_support.schema import spark_type

#: A value as ``json.loads`` decodes it.
JsonValue: TypeAlias = "None | bool | int | float | str | list[JsonValue] | dict[str, JsonValue]"


def null_texts(value: JsonValue, schema: pa.Schema, null_values: frozenset[str]) -> JsonValue:
    """A JSON record whose top-level strings in columns other than STRING that are one of
    ``null_values`` are null; ``value`` itself when there is none (or it is not an object)."""
    if not isinstance(value, dict):
        return value
    nulled: dict[str, JsonValue] | None = None
    for f in fields_of(schema):
        text = value.get(f.name)
        if isinstance(text, str) and text in null_values and not pa.types.is_string(f.type):
            nulled = nulled or dict(value)
            nulled[f.name] = None
    return value if nulled is None else nulled


_INT_RANGES = {8: (-(2**7), 2**7 - 1), 16: (-(2**15), 2**15 - 1), 32: (-(2**31), 2**31 - 1)}
_INT_RANGES[64] = (-(2**63), 2**63 - 1)


def check_record(value: JsonValue, schema: pa.Schema) -> str | None:
    """Why a decoded JSON line does not fit ``schema`` as Arrow's JSON reader reads it, or
    None if it fits (fields it does not know are ignored, missing ones are null)."""
    if not isinstance(value, dict):
        return f"a line must hold a JSON object, not {_json_kind(value)}"
    for f in fields_of(schema):
        reason = _check_value(value.get(f.name), f.type, f.name)
        if reason is not None:
            return reason
    return None


def _check_value(value: JsonValue, t: pa.DataType, path: str) -> str | None:
    if value is None:
        return None
    fits = True
    if pa.types.is_integer(t):
        low, high = _INT_RANGES[t.bit_width]
        fits = isinstance(value, int) and not isinstance(value, bool) and low <= value <= high
    elif pa.types.is_floating(t):
        fits = isinstance(value, int | float) and not isinstance(value, bool)
    elif pa.types.is_decimal(t):
        fits = isinstance(value, int | float | str) and not isinstance(value, bool)
    elif pa.types.is_boolean(t):
        fits = isinstance(value, bool)
    elif pa.types.is_string(t) or pa.types.is_timestamp(t) or pa.types.is_date(t):
        fits = isinstance(value, str)
    elif pa.types.is_map(t):
        if not isinstance(value, dict):
            fits = False
        else:
            for key, item in value.items():
                reason = _check_value(item, t.item_type, f"{path}[{key!r}]")
                if reason is not None:
                    return reason
    elif pa.types.is_list(t) or pa.types.is_large_list(t):
        if not isinstance(value, list):
            fits = False
        else:
            for i, item in enumerate(value):
                reason = _check_value(item, t.value_type, f"{path}[{i}]")
                if reason is not None:
                    return reason
    elif pa.types.is_struct(t):
        if not isinstance(value, dict):
            fits = False
        else:
            for child in fields_of(t):
                reason = _check_value(value.get(child.name), child.type, f"{path}.{child.name}")
                if reason is not None:
                    return reason
    if fits:
        return None
    return f"field {path!r}: expected {spark_type(t)}, found {_json_kind(value)} {_short(value)}"


def _json_kind(value: JsonValue) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return "null"


def _short(value: JsonValue) -> str:
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."
