"""Which runs need no Spark: the transform is the identity (``SELECT * FROM source``) and
the sink can publish the landed Parquet files as its output (``SinkConnector.write_landed``
for a bounded run, ``append_landed`` for a stream's epochs; e.g. a local ``parquet`` sink
without ``partition_by``). Such a run's transform publishes the landed files through the
sink's fenced commit, and neither its transform check nor ``runflow`` starts a Spark
session for it."""

from __future__ import annotations

from typing import Any

import sqlglot
from sqlglot.errors import ParseError, TokenError

from source_support.registry import SINKS, source_is_unbounded

#: The identity transform, as sqlglot writes it back (any case, spacing or comments).
IDENTITY_SQL = "select * from source"


def transform_is_identity(sql: str) -> bool:
    """Whether ``sql`` is ``SELECT * FROM source`` and nothing more."""
    try:
        query = sqlglot.parse_one(sql, read="spark")
    except (ParseError, TokenError):
        return False
    return query.sql(dialect="spark", comments=False).lower() == IDENTITY_SQL


def landed_copy_applies(spec: dict[str, Any]) -> bool:
    """Whether a bounded run of ``spec`` publishes its landed files without Spark (not
    with expectations: Spark checks them)."""
    if spec.get("replay") or spec.get("expectations") or not transform_is_identity(spec["transform_sql"]):
        return False
    sink = SINKS.get(spec["sink_type"])
    return sink is not None and sink.write_landed is not None and sink.takes_landed(spec["sink_config"])


def stream_copy_applies(spec: dict[str, Any]) -> bool:
    """Whether the epochs of an unbounded run of ``spec`` publish their landed files
    without Spark (not with expectations: Spark checks them)."""
    if spec.get("replay") or spec.get("expectations") or not transform_is_identity(spec["transform_sql"]):
        return False
    sink = SINKS.get(spec["sink_type"])
    return sink is not None and sink.append_landed is not None and sink.takes_landed(spec["sink_config"])


def flow_needs_spark(
    *,
    source_type: str,
    source_config: dict[str, Any],
    transform_sql: str,
    sink_type: str,
    sink_config: dict[str, Any],
) -> bool:
    """Whether a run of a flow of these parts will run a Spark job."""
    spec = {"transform_sql": transform_sql, "sink_type": sink_type, "sink_config": sink_config}
    if source_is_unbounded(source_type, source_config):
        return not stream_copy_applies(spec)
    return not landed_copy_applies(spec)
