"""The sink kit over the redis_stream sink, against the tests' Redis, on a local Spark session."""

from __future__ import annotations

import hashlib
from typing import Any

import pyarrow as pa
import pytest
import redis

from connectors.redis_streams.sink import NAMESPACE
from source_support.registry import SINKS, Environment, SinkConnector
from source_support.testing.sink_suite import SinkConformanceSuite, SinkContext


class RedisStreamSinkContext(SinkContext):
    """The stream ``<prefix>out``; a plain reader reads its entries (XRANGE), a field per
    column that is not null. A bounded run adds its rows once, as every run of a stream does."""

    bounded_writes = "append"

    def __init__(self, client: redis.Redis, prefix: str, env: Environment) -> None:
        self.client, self._env = client, env
        self.key = f"{prefix}out"

    @property
    def connector(self) -> SinkConnector:
        return SINKS["redis_stream"]

    @property
    def env(self) -> Environment:
        return self._env

    def config(self) -> dict[str, Any]:
        return self.connector.validate({"key": self.key}, self._env)

    def read(self) -> pa.Table:
        entries = self.client.xrange(self.key)
        records = [{k.decode(): v.decode() for k, v in fields.items()} for _, fields in entries]
        return pa.Table.from_pylist(records) if records else pa.table({})

    def close(self) -> None:
        """Removes the publication markers of the target (staging streams go when published)."""
        digest = hashlib.sha256(self.key.encode()).hexdigest()[:16]
        markers = list(self.client.scan_iter(match=f"{NAMESPACE}:marker:{digest}:*", count=1000))
        if markers:
            self.client.delete(*markers)


class TestRedisStreamSinkConformance(SinkConformanceSuite):
    # Spark jobs in each case: the whole suite runs the kit, the fast lane test_sink.py's
    # quick tests.
    pytestmark = pytest.mark.slow

    @pytest.fixture()
    def sink_context(self, rds, prefix, env):
        context = RedisStreamSinkContext(rds, prefix, env)
        yield context
        context.close()
