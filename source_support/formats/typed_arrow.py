"""Typed forms of the few pyarrow calls whose stubs leave a type open or refuse a call that
pyarrow takes, so that the formats are checked strictly and each workaround is here once."""

from __future__ import annotations

from collections.abc import Sequence
from typing import IO, Any, cast

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

#: A numpy mask over the values of a column (or the records of a block).
Mask = npt.NDArray[np.bool_]
#: Byte offsets into a block, or positions of records.
Offsets = npt.NDArray[np.int64]


def fields_of(schema: pa.Schema | pa.StructType) -> list[pa.Field[pa.DataType]]:
    """The fields of a schema or a struct type, with their types (the stubs type both
    kinds of field lists without a type argument)."""
    fields: list[pa.Field[pa.DataType]] = list(schema)
    return fields


def arrow_input(data: bytes) -> IO[bytes]:
    """``data`` as a file Arrow's readers read in place: no copy, and no Python call per
    read (a file object, such as ``io.BytesIO``, is read through Python, holding the GIL)."""
    # The stubs of read_csv / read_json take paths and Python files only; a NativeFile is fine.
    return cast(IO[bytes], pa.BufferReader(data))


def is_in(values: pa.Array[Any], texts: Sequence[str]) -> pa.BooleanArray:
    """Whether each value is one of ``texts`` (null where the value is)."""
    # The stubs leave the scalar overload of is_in partly untyped.
    return pc.is_in(values, pa.array(texts, pa.string()))  # pyright: ignore[reportUnknownMemberType]


def nulls(count: int, arrow_type: pa.DataType) -> pa.Array[Any]:
    """``count`` nulls of ``arrow_type``."""
    # The stubs have an overload per type class, none for a DataType not known until run time.
    return pa.nulls(count, arrow_type)  # pyright: ignore[reportCallIssue, reportArgumentType, reportUnknownVariableType]


def as_mask(values: pa.Array[Any]) -> Mask:
    """A boolean Arrow array as a numpy mask, null as False."""
    return np.asarray(values.fill_null(False).to_numpy(zero_copy_only=False), dtype=bool)
