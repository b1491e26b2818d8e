"""What the typed file formats share (Avro container files, Parquet): a file carries its
own column types, so the run's columns are matched to a file's by name (whatever the case)
and type, and what does not fit is settled by ``drift`` as CSV's and JSON's records are."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa

from source_support.api import SchemaChange
from source_support.formats.drift import RETYPED, as_text, settle
from source_support.formats.typed_arrow import Offsets, nulls
from source_support.schema import spark_type
from source_support.typed_arrow import fields_of


def conform(
    found: pa.Schema,
    declared: pa.Schema | None,
    *,
    where: str,
    kind: str,
    widen: Callable[[pa.DataType, pa.DataType], bool] | None = None,
) -> pa.Schema:
    """The columns landed: the declared ones (each must be in the file's ``kind`` schema
    with the same type, or one that ``widen(found, declared)`` says converts without loss),
    or all of the file's. ValueError naming the column that disagrees."""
    if declared is None:
        return found
    by_name = {name.lower(): i for i, name in enumerate(found.names)}
    for f in fields_of(declared):
        i = by_name.get(f.name.lower())
        if i is None:
            raise ValueError(f"column {f.name!r} is not a field of the {kind} schema of {where}")
        if found.types[i] != f.type and not (widen is not None and widen(found.types[i], f.type)):
            raise ValueError(
                f"column {f.name!r} is {spark_type(found.types[i])} in the {kind} schema of {where}, "
                f"not {spark_type(f.type)}"
            )
    return declared


def widens(found: pa.DataType, run: pa.DataType) -> bool:
    """Whether values of ``found`` convert to ``run`` without loss, as Avro promotes a
    writer's type (int to long, float or double; float to double): no schema change."""
    if pa.types.is_integer(found):
        if pa.types.is_floating(run):
            return True
        return pa.types.is_signed_integer(run) and run.bit_width >= found.bit_width
    return pa.types.is_floating(found) and pa.types.is_floating(run) and run.bit_width >= found.bit_width


def select_columns(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """The columns of ``schema`` out of ``table``, matched by name whatever the case."""
    if table.schema.names == schema.names:
        return table
    by_name = {name.lower(): name for name in table.schema.names}
    return table.select([by_name[name.lower()] for name in schema.names]).rename_columns(schema.names)


def widens_decimal(found: pa.DataType, run: pa.DataType) -> bool:
    """``widens``, and a decimal into one with as many digits or more on each side of the
    point (DECIMAL(4,2) into DECIMAL(12,2)), as Parquet writers that size a decimal to the
    values of each file leave them."""
    if pa.types.is_decimal(found) and pa.types.is_decimal(run):
        found_scale, run_scale = _scale(found), _scale(run)
        return run_scale >= found_scale and _precision(run) - run_scale >= _precision(found) - found_scale
    return widens(found, run)


def _precision(t: pa.DataType) -> int:
    precision: int = getattr(t, "precision")  # noqa: B009 - the stubs type no decimal's precision
    return precision


def _scale(t: pa.DataType) -> int:
    scale: int = getattr(t, "scale")  # noqa: B009 - the stubs type no decimal's scale
    return scale


def in_run_columns(
    table: pa.Table, schema: pa.Schema, *, widen: Callable[[pa.DataType, pa.DataType], bool] = widens
) -> tuple[pa.Table, tuple[str, ...], dict[str, str]]:
    """A file's records in the run's columns ``schema`` (matched by name whatever the case;
    nulls where the file lacks one) followed by what did not fit, as ``drift.settle`` takes
    them: a column the run lacks under its own name, one of another type as text under
    ``RETYPED + name``; the run's columns the file lacks; the type each retyped column was
    found with (``widen(found, run)``: whether a column of another type converts without loss)."""
    by_name = {name.lower(): name for name in table.column_names}
    wanted = {name.lower() for name in schema.names}
    columns: list[pa.ChunkedArray[Any] | pa.Array[Any]] = []
    fields = list(fields_of(schema))
    retyped: list[tuple[pa.Field[pa.DataType], pa.Array[Any]]] = []
    missing: list[str] = []
    found_types: dict[str, str] = {}
    for f in fields_of(schema):
        name = by_name.get(f.name.lower())
        if name is None:
            missing.append(f.name)
            columns.append(nulls(table.num_rows, f.type))
            continue
        column = table.column(name)
        if column.type == f.type or widen(column.type, f.type):
            columns.append(column.cast(f.type))
        else:
            columns.append(nulls(table.num_rows, f.type))
            retyped.append((pa.field(RETYPED + f.name, pa.string()), as_text(column)))
            found_types[f.name] = spark_type(column.type)
    extras = [name for name in table.column_names if name.lower() not in wanted]
    by_field = dict(zip(table.column_names, fields_of(table.schema), strict=True))
    fields += [by_field[name] for name in extras] + [f for f, _ in retyped]
    columns += [table.column(name) for name in extras] + [values for _, values in retyped]
    return pa.Table.from_arrays(columns, schema=pa.schema(fields)), tuple(missing), found_types


def settled(
    table: pa.Table,
    schema: pa.Schema,
    policy: str | None,
    *,
    row_positions: Offsets | None,
    widen: Callable[[pa.DataType, pa.DataType], bool] = widens,
) -> tuple[pa.Table, list[SchemaChange]]:
    """A typed file's records (Avro's, Parquet's) in the run's columns ``schema``
    (``in_run_columns``), then as the run lands them under ``policy`` (``drift.settle``)."""
    table, missing, found_types = in_run_columns(table, schema, widen=widen)
    return settle(
        table, schema, policy, missing=missing, row_positions=row_positions, found_types=found_types
    )
