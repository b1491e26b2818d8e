"""What a flow's source and sink are built in: the deployment's roots and Redis, and the
flow's named connections resolved for its owner."""

from __future__ import annotations

from typing import Any

from django.conf import settings

from dataflow.redis_client import redis_url
from dataflow.services.connections import flow_connections_resolve, is_deployment_redis
from dataflow.services.models_tables import database_url, model_table
from dataflow.services.reserved import reserved_redis_keys, reserved_tables
from source_support.registry import Environment


def environment(*, connections=None) -> Environment:
    """What validation and connectors know of the deployment; ``connections``: the
    resolved connections of the flow being built (``flow_environment``)."""
    return Environment(
        allowed_roots=tuple(settings.DATAFLOW_ALLOWED_ROOTS),
        base_dir=settings.DATAFLOW_BASE_DIR,
        redis_url=redis_url(),
        connections=connections or {},
        reserved_keys=reserved_redis_keys(),
        is_deployment_redis=is_deployment_redis,
        database_url=database_url(),
        reserved_tables=reserved_tables(),
        model_table=model_table,
    )


def flow_environment(values: dict[str, Any], *, owner) -> Environment:
    """The environment a flow's source and sink are built in: its named connections
    resolved for its owner now (a revoked grant or a deleted connection is a ConfigError
    naming ``source.connection`` or ``sink.connection``). ``values``: what
    ``flow_spec_validate`` returned (a run's ``spec``)."""
    return environment(
        connections=flow_connections_resolve(
            source_type=values["source_type"],
            source_config=values["source_config"],
            sink_type=values["sink_type"],
            sink_config=values["sink_config"],
            owner=owner,
        )
    )
