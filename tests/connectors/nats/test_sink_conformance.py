"""The sink kit over the nats sink, against the tests' NATS server, on a local Spark session."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import nats
import pyarrow as pa
import pytest

from source_support.registry import SINKS, Environment, SinkConnector
from source_support.testing.sink_suite import SinkConformanceSuite, SinkContext
from tests.connectors.nats.conftest import nats_url


class NatsSinkContext(SinkContext):
    """The subject ``<stream>.out`` of stream ``<stream>``, which the sink creates; a plain
    reader reads its messages by sequence, one JSON object each. A bounded run adds its rows
    once, as every run of a stream does."""

    bounded_writes = "append"

    def __init__(self, stream: str, env: Environment) -> None:
        self.stream, self._env = stream, env

    @property
    def connector(self) -> SinkConnector:
        return SINKS["nats"]

    @property
    def env(self) -> Environment:
        return self._env

    def config(self) -> dict[str, Any]:
        table = {"servers": nats_url(), "subject": f"{self.stream.lower()}.out", "stream": self.stream}
        return self.connector.validate(table, self._env)

    def read(self) -> pa.Table:
        records = asyncio.run(self._records())
        return pa.Table.from_pylist(records) if records else pa.table({})

    async def _records(self) -> list[dict[str, Any]]:
        nc = await nats.connect(nats_url())
        try:
            js = nc.jetstream()
            try:
                state = (await js.stream_info(self.stream)).state
            except nats.js.errors.NotFoundError:
                return []
            if not state.messages:
                return []
            seqs = range(state.first_seq, state.last_seq + 1)
            return [json.loads((await js.get_msg(self.stream, seq)).data) for seq in seqs]
        finally:
            await nc.close()


class TestNatsSinkConformance(SinkConformanceSuite):
    # Spark jobs in each case: the whole suite runs the kit, the fast lane test_sink.py.
    pytestmark = pytest.mark.slow

    @pytest.fixture()
    def sink_context(self, stream_name, env):
        return NatsSinkContext(stream_name, env)
