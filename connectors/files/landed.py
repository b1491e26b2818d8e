"""Landed Parquet files published as a ``parquet`` sink's output, no Spark: a bounded run's
whole output (``write_landed_parquet``), or one epoch of a stream's (``append_landed_parquet``).

When a bounded run's transform is the identity (``SELECT * FROM source``) its result is the
landed files' rows, which are Parquet files already: a Spark job that reads and rewrites
them (and the JVM it needs) costs far more than the reading itself. A landed file whose
schema is the run's and whose codec is the sink's is linked (or copied, across file
systems) into the attempt's staging directory as it is; any other is rewritten by pyarrow
one row group at a time. The staging directory is then published through the same
``commit_directory`` as Spark's output: the same fence, row check and atomic swap. A
stream's epoch of the identity goes the same way through ``append_epoch``: the same file
names per epoch, the same fence and row check as the epoch Spark would have written, so
a retry of the epoch replaces the same names. A small epoch of any other query Spark
computes can come as an Arrow table collected from Spark (``append_table_parquet``),
written by pyarrow as one file, as Spark's ``coalesce(1)`` writer would have.

Not taken for a sink with ``partition_by`` (Spark lays out its directories) or a path that
is not on a local file system.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from connectors.files.sink import append_epoch, commit_directory, count_rows
from source_support.environment import Environment
from source_support.formats.typed_arrow import nulls
from source_support.registry import Publish
from source_support.typed_arrow import ParquetCompression, fields_of, write_parquet

#: The codec names Parquet's metadata gives for each ``compression`` of the sink.
_CODECS = {"none": "UNCOMPRESSED", "snappy": "SNAPPY", "gzip": "GZIP", "zstd": "ZSTD", "lz4": "LZ4_RAW"}


def takes_landed(config: dict[str, Any]) -> bool:
    """Whether landed files can make up this sink's output as they are (or recompressed)."""
    return not config.get("partition_by") and "://" not in str(config.get("path", ""))


def write_landed_parquet(
    paths: Sequence[str],
    schema: pa.Schema,
    config: dict[str, Any],
    *,
    attempt_key: str,
    publish: Publish,
    env: Environment,
) -> bool:
    """Stages ``paths`` as the sink's files and publishes them (see the module's docstring)."""
    target = Path(config["path"])
    compression: str = config.get("compression", "snappy")
    return commit_directory(
        target,
        lambda staging: _stage(paths, schema, compression, Path(staging)),
        lambda staging: count_rows(staging, "parquet"),
        attempt_key=attempt_key,
        publish=publish,
        check=lambda: env.check_destructive_target(target),
    )


def append_landed_parquet(
    paths: Sequence[str],
    schema: pa.Schema,
    config: dict[str, Any],
    *,
    epoch_key: str,
    publish: Publish,
    env: Environment,
) -> bool:
    """Adds one epoch's landed ``paths`` to the sink as its files (see the module's docstring)."""
    target = Path(config["path"])
    compression: str = config.get("compression", "snappy")
    return append_epoch(
        target,
        lambda staging: _stage(paths, schema, compression, Path(staging), empty_file=False),
        lambda staging: count_rows(staging, "parquet"),
        epoch_key=epoch_key,
        publish=publish,
        check=lambda: env.check_destructive_target(target),
    )


def append_table_parquet(
    table: pa.Table, config: dict[str, Any], *, epoch_key: str, publish: Publish, env: Environment
) -> bool:
    """Adds one epoch's rows (``table``) to the sink as one file (see the module's docstring)."""
    target = Path(config["path"])
    compression: str = config.get("compression", "snappy")
    suffix = "" if compression == "none" else f".{compression}"

    def stage(staging: str) -> None:
        Path(staging).mkdir(parents=True)
        if table.num_rows:  # as Spark's writer: an epoch without rows adds no file
            write_parquet(
                table, Path(staging) / f"part-00000{suffix}.parquet", compression=_parquet_codec(compression)
            )

    return append_epoch(
        target,
        stage,
        lambda staging: count_rows(staging, "parquet"),
        epoch_key=epoch_key,
        publish=publish,
        check=lambda: env.check_destructive_target(target),
    )


def _stage(
    paths: Sequence[str], schema: pa.Schema, compression: str, staging: Path, *, empty_file: bool = True
) -> None:
    staging.mkdir(parents=True)
    codec = _parquet_codec(compression)
    suffix = "" if compression == "none" else f".{compression}"
    if not paths and empty_file:  # as Spark writes an empty result: one file holding the schema
        write_parquet(schema.empty_table(), staging / f"part-00000{suffix}.parquet", compression=codec)
    for index, path in enumerate(paths):
        destination = staging / f"part-{index:05d}{suffix}.parquet"
        if _fits_as_is(path, schema, compression):
            _link_or_copy(path, destination)
        else:
            _rewrite(path, destination, schema, codec)


def _parquet_codec(compression: str) -> ParquetCompression:
    codecs: dict[str, ParquetCompression] = {
        "none": "none",
        "snappy": "snappy",
        "gzip": "gzip",
        "zstd": "zstd",
        "lz4": "lz4",
    }
    return codecs[compression]


def _fits_as_is(path: str, schema: pa.Schema, compression: str) -> bool:
    """Whether the file holds the run's columns in its types and order, in the sink's codec."""
    metadata = pq.ParquetFile(path).metadata
    if not metadata.schema.to_arrow_schema().remove_metadata().equals(schema.remove_metadata()):
        return False
    codec = _CODECS[compression]
    return all(
        metadata.row_group(group).column(column).compression == codec
        for group in range(metadata.num_row_groups)
        for column in range(metadata.num_columns)
    )


def _link_or_copy(source: str, destination: Path) -> None:
    """A hard link (the landed file is never written again under its name: a replay
    replaces it by a rename), or a copy where the two directories' file systems differ."""
    try:
        os.link(source, destination)
    except OSError:
        shutil.copyfile(source, destination)


def _rewrite(source: str, destination: Path, schema: pa.Schema, codec: ParquetCompression) -> None:
    """The file's rows in the run's schema and the sink's codec, one row group in memory."""
    landed = pq.ParquetFile(source)
    # A column the run's schema gained after this file landed (format.on_schema_change =
    # "evolve") is null in its rows, as Spark's mergeSchema reads it.
    held = [n for n in schema.names if n in landed.schema_arrow.names]
    with pq.ParquetWriter(destination, schema, compression=codec) as writer:
        for group in range(landed.num_row_groups):
            # The stubs leave the element type of ``columns`` open.
            table = landed.read_row_group(group, columns=held)  # pyright: ignore[reportUnknownMemberType]
            for f in fields_of(schema):
                if f.name not in held:
                    table = table.append_column(f, nulls(table.num_rows, f.type))
            table = table.select(schema.names)
            writer.write_table(table.cast(schema))
