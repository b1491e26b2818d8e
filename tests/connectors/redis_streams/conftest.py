"""A real Redis (``REDIS_URL``), keys under a prefix of each test's own, removed after it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from connectors.redis_streams.config import RedisStreamsSourceConfig
from connectors.redis_streams.source import RedisStreamsSource
from source_support.formats import validate_format
from source_support.registry import BuildContext, Environment

FIELDS_SCHEMA = "id BIGINT, customer STRING, amount DOUBLE"


def redis_url() -> str:
    return os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/12"


@pytest.fixture()
def env(tmp_path) -> Environment:
    return Environment(allowed_roots=(tmp_path,), base_dir=Path(tmp_path), redis_url=redis_url())


def build_source(
    env: Environment,
    source: dict,
    fmt: dict | None = None,
    *,
    stop: dict | None = None,
    schema=None,
    flow_name: str = "",
    batch_size: int = 1000,
) -> RedisStreamsSource:
    config = RedisStreamsSourceConfig.parse(dict(source), env)
    spec = validate_format(fmt or {"type": "fields", "schema": FIELDS_SCHEMA})
    context = BuildContext(
        env=env, batch_size=batch_size, schema=schema, flow_name=flow_name, stop=stop or {}
    )
    return RedisStreamsSource.from_config(config, spec, context)
