"""Schema drift: what a format does when the records stop fitting the run's schema
(``format.on_schema_change``), and the changes it saw.

A parse hands ``settle`` the records in the run's columns plus what did not fit: a column
the schema does not have (named as in the file), and, for a value that did not convert to
its column's type, its text in a column ``RETYPED + name``. ``settle`` applies the policy:

- ``fail``: the split fails, naming the new or missing column and where it was first
  seen; a value of another type is a bad record, as without the option (the split fails
  naming the column, file and line; dead-lettered with ``skip_errors``);
- ``evolve``: a new column lands as a nullable STRING (as Auto Loader lands new CSV and
  JSON columns without ``inferColumnTypes``: a later file cannot disagree on its type);
  a missing column lands as nulls; a value of another type is a bad record, as under
  ``fail`` (a column's type never changes in the sink);
- ``rescue``: the schema's columns only, and a ``_rescued`` STRING column holding a JSON
  object of what did not fit in each record (Auto Loader's rescued data column), a CSV
  value of another type included (its column is null then);
- ``ignore``: the schema's columns only; what did not fit is dropped (a CSV value of
  another type becomes null), and counted.

A retyped column is seen where a value does not convert (CSV, under rescue and ignore);
a JSON value of another type is a bad record under every policy.

Without the option, a declared schema selects its columns (others are ignored, uncounted,
as before); an inferred one fails on a change (``DEFAULT_POLICY``).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pyarrow as pa

from source_support.api import ADDED, CHANGED_TYPE, MISSING, SchemaChange
from source_support.formats.typed_arrow import Offsets, fields_of
from source_support.schema import spark_type

POLICIES = ("fail", "evolve", "rescue", "ignore")
DEFAULT_POLICY = "fail"
#: The column that holds, under ``rescue``, what did not fit each record, as JSON.
RESCUED = "_rescued"
#: The prefix of a parse's column holding the texts of values that did not convert.
RETYPED = "\x00retyped:"


class ReadError(ValueError):
    """A split's data cannot be read on (a record too long, a header without a schema
    column, a schema change under ``fail``): the split fails, whatever ``skip_errors``
    says; the message says where."""


class SchemaDrift(ReadError):
    """Records no longer fit the schema under ``fail`` (or a retype under ``evolve``): the
    split fails with this message, naming the column (the reader adds where)."""

    def __init__(self, change: SchemaChange) -> None:
        super().__init__(f"schema changed: {change.describe()} (format.on_schema_change = {change.policy!r})")
        self.change = change


def landed_schema(schema: pa.Schema, policy: str | None) -> pa.Schema:
    """The columns a run lands before any change: under ``rescue``, with ``_rescued``."""
    if policy == "rescue" and RESCUED not in schema.names:
        return pa.schema([*fields_of(schema), pa.field(RESCUED, pa.string())])
    return schema


def header_changes(schema: pa.Schema, header: list[str], policy: str | None) -> list[SchemaChange]:
    """The columns a file's header adds to the schema and those it lacks (names match
    without regard to case); raises ``SchemaDrift`` for the first under ``fail``."""
    if policy is None:
        return []
    known = {n.lower() for n in schema.names}
    found = {n.lower() for n in header}
    changes = [SchemaChange(n, ADDED, "", "STRING", policy) for n in header if n.lower() not in known]
    changes += [
        SchemaChange(f.name, MISSING, spark_type(f.type), "", policy)
        for f in fields_of(schema)
        if f.name.lower() not in found
    ]
    if changes and policy == "fail":
        raise SchemaDrift(changes[0])
    return changes


def settle(
    table: pa.Table,
    schema: pa.Schema,
    policy: str | None,
    *,
    missing: tuple[str, ...] = (),
    row_positions: Offsets | None = None,
    found_types: dict[str, str] | None = None,
) -> tuple[pa.Table, list[SchemaChange]]:
    """The records as the run lands them under ``policy`` and the changes seen in them
    (see the module's docstring); ``row_positions[i]`` is where record ``i`` starts;
    ``found_types``: the type a retyped column was found with (a typed format's, such as
    Avro's), where it is not text."""
    extras = [n for n in table.column_names if n not in schema.names]
    types = {f.name: spark_type(f.type) for f in fields_of(schema)}
    if policy is None:
        return _landed(table.select(schema.names), schema, policy), []
    changes: list[SchemaChange] = []
    for name in extras:
        column = table.column(name)
        present = np.flatnonzero(~np.asarray(column.is_null().to_numpy(zero_copy_only=False), dtype=bool))
        if not len(present):
            continue
        first = int(row_positions[int(present[0])]) if row_positions is not None else -1
        if name.startswith(RETYPED):
            column_name = name.removeprefix(RETYPED)
            changes.append(
                SchemaChange(
                    column_name,
                    CHANGED_TYPE,
                    types[column_name],
                    (found_types or {}).get(column_name, "STRING"),
                    policy,
                    first,
                    len(present),
                )
            )
        else:
            changes.append(SchemaChange(name, ADDED, "", "STRING", policy, first, len(present)))
    changes += [
        SchemaChange(n, MISSING, types[n], "", policy, -1, table.num_rows) for n in missing if table.num_rows
    ]
    refused = [c for c in changes if policy == "fail" or (policy == "evolve" and c.kind == CHANGED_TYPE)]
    if refused:
        raise SchemaDrift(refused[0])
    landed = table.select(schema.names)
    if policy == "evolve":
        for name in extras:
            if not name.startswith(RETYPED):
                landed = landed.append_column(pa.field(name, pa.string()), as_text(table.column(name)))
    if policy == "rescue":
        landed = landed.append_column(pa.field(RESCUED, pa.string()), _rescued(table, extras))
    return landed, changes


def _landed(table: pa.Table, schema: pa.Schema, policy: str | None) -> pa.Table:
    if policy == "rescue":
        return table.append_column(pa.field(RESCUED, pa.string()), pa.nulls(table.num_rows, pa.string()))
    return table


def as_text(column: pa.ChunkedArray[Any]) -> pa.Array[Any]:
    """A column as text: strings as they are, other values as JSON."""
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        return column.combine_chunks().cast(pa.string())
    if pa.types.is_binary(column.type):
        return column.combine_chunks().cast(pa.string(), safe=False)
    return pa.array(
        [
            None if v is None else v if isinstance(v, str) else json.dumps(v, default=str)
            for v in column.to_pylist()
        ],
        pa.string(),
    )


def _rescued(table: pa.Table, extras: list[str]) -> pa.Array[Any]:
    """Per record, a JSON object of its values that did not fit (null when all did)."""
    texts = {n.removeprefix(RETYPED): as_text(table.column(n)).to_pylist() for n in extras}
    rows: list[str | None] = []
    for i in range(table.num_rows):
        kept = {name: values[i] for name, values in texts.items() if values[i] is not None}
        rows.append(json.dumps(kept, sort_keys=True) if kept else None)
    return pa.array(rows, pa.string())
