"""Builds an s3 source over the test server and reads its objects as a run does."""

from __future__ import annotations

import dataclasses
from typing import Any

import pyarrow as pa

from connectors.s3.config import S3SourceConfig
from connectors.s3.enumerator import object_splits
from connectors.s3.reader import S3SplitReader
from connectors.s3.source import S3Source
from source_support.api import BadRecord
from source_support.formats import RecordFormat, validate_format
from source_support.registry import BuildContext, Environment


def build_source(
    table: dict[str, Any],
    fmt: dict[str, Any],
    env: Environment,
    *,
    batch_size: int = 1000,
    infer: bool = True,
) -> S3Source:
    """The source of ``table`` (a ``[source]`` table without its type), its schema inferred
    from the objects when ``fmt`` declares none, as a run starts."""
    config = S3SourceConfig.parse({k: v for k, v in table.items() if k != "type"}, env)
    spec = validate_format(fmt)
    context = BuildContext(env=env, batch_size=batch_size, flow_name="s3-test")
    source = S3Source.from_s3_config(config, spec, context)
    if infer and "schema" not in fmt:
        schema = source.infer_schema()
        source = S3Source.from_s3_config(config, spec, dataclasses.replace(context, schema=schema))
    return source


def read_all(source: S3Source, *, batch_size: int = 1000) -> tuple[pa.Table, list[BadRecord]]:
    """Every split of the source read to its end, one after the other, block by block."""
    assert isinstance(source.fmt, RecordFormat)
    reader = S3SplitReader(source.fmt, lambda: source.client)
    tables: list[pa.Table] = []
    bad: list[BadRecord] = []
    for info in source.listing.objects(source.client):
        for split in object_splits(
            source.listing.bucket, info, split_size=source.split_size, layout=source.layout
        ):
            finished = False
            while not finished:
                batch = reader.read_batch(split, batch_size)
                tables.append(batch.records)
                bad += batch.bad_records
                finished = batch.finished
                split = split.at(batch.end.position)
    reader.close()
    return (pa.concat_tables(tables) if tables else source.fmt.empty()), bad
