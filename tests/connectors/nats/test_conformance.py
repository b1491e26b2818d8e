"""The conformance kit over the nats_jetstream source, against a real NATS server."""

from __future__ import annotations

import asyncio
import json

import nats
import pytest
from nats.js.api import StreamConfig

from connectors.nats.config import NatsSourceConfig
from connectors.nats.jetstream import consumer_name
from connectors.nats.source import NatsJetStreamSource
from source_support.formats import FormatSpec
from source_support.registry import BuildContext, Environment
from source_support.testing import ExternalContext, Record, SourceOptions
from source_support.testing.suite import SourceConformanceSuite
from tests.connectors.nats.conftest import nats_url

FORMAT = FormatSpec("jsonl", {"schema": "id BIGINT, split BIGINT, text STRING"})
FLOW = "conformance"


class NatsContext(ExternalContext):
    """Split i is the subject ``<stream>.s<i>`` of one stream whose subjects are
    ``<stream>.*``... written as JSON messages. What is acknowledged is what each
    consumer's ack floor covers."""

    writes_while_running = True

    def __init__(self, stream: str, env: Environment) -> None:
        self.stream, self.env = stream, env
        self.written: list[Record] = []
        self.count = 0
        self.loop = asyncio.new_event_loop()
        self.nc = self.loop.run_until_complete(nats.connect(nats_url()))
        self.js = self.nc.jetstream()

    def subject(self, index: int) -> str:
        return f"{self.stream.lower()}.s{index}"

    def splits_wanted(self, count: int) -> None:
        self.count = max(self.count, count)
        subjects = [self.subject(i) for i in range(self.count)]
        self.loop.run_until_complete(self._stream(subjects))

    async def _stream(self, subjects: list[str]) -> None:
        try:
            await self.js.update_stream(StreamConfig(name=self.stream, subjects=subjects))
        except nats.js.errors.NotFoundError:
            await self.js.add_stream(StreamConfig(name=self.stream, subjects=subjects))

    def write(self, split_index: int, records: list[Record]) -> list[Record]:
        async def publish() -> None:
            for record in records:
                await self.js.publish(self.subject(split_index), json.dumps(record).encode())

        self.loop.run_until_complete(publish())
        self.written += records
        return records

    def source(self, options: SourceOptions) -> NatsJetStreamSource:
        table = {"servers": nats_url(), "stream": self.stream, "discovery_interval_ms": 1000}
        context = BuildContext(env=self.env, batch_size=options.batch_size, stop=options.stop, flow_name=FLOW)
        source = NatsJetStreamSource.from_config(NatsSourceConfig.parse(table, self.env), FORMAT, context)
        source.clock = options.clock
        return source

    def expected(self) -> list[Record]:
        return list(self.written)

    def acknowledged(self) -> list[Record]:
        return self.loop.run_until_complete(self._acknowledged())

    async def _acknowledged(self) -> list[Record]:
        records: list[Record] = []
        for i in range(self.count):
            try:
                info = await self.js.consumer_info(self.stream, consumer_name(FLOW, self.subject(i)))
            except nats.js.errors.NotFoundError:
                continue
            floor = info.ack_floor.stream_seq if info.ack_floor else 0
            for record in [r for r in self.written if r["split"] == i]:
                records.append(record)
            records = [r for r in records if r["split"] != i or self._seq_of(r) <= floor]
        return records

    def _seq_of(self, record: Record) -> int:
        return self.written.index(record) + 1

    def close(self) -> None:
        self.loop.run_until_complete(self.nc.close())
        self.loop.close()


class TestNatsConformance(SourceConformanceSuite):
    @pytest.fixture()
    def external_context(self, stream_name, env):
        context = NatsContext(stream_name, env)
        yield context
        context.close()
