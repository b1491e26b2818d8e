"""The conformance kit over the nats_jetstream source, against a nats-server of the module's
own (JetStream, file storage), which the outage case stops and starts again."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import uuid
from collections.abc import Coroutine
from typing import Any, TypeVar

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
from tests.nats_server import PrivateNatsServer

FORMAT = FormatSpec("jsonl", {"schema": "id BIGINT, split BIGINT, text STRING"})
FLOW = "conformance"
T = TypeVar("T")


class NatsContext(ExternalContext):
    """Split i is the subject ``<stream>.s<i>`` of one stream, each record a JSON message.
    What is acknowledged is what each consumer's ack floor covers."""

    writes_while_running = True

    def __init__(self, stream: str, env: Environment, server: PrivateNatsServer) -> None:
        self.stream, self.env, self.server = stream, env, server
        #: Each record written, with its stream sequence.
        self.written: list[tuple[int, Record]] = []
        self.count = 0
        # A loop of its own, always running: the client sees the server go and reconnects
        # by itself (on a loop run only per call, a publish after a restart is lost).
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()
        self.nc = self.run(nats.connect(server.url, max_reconnect_attempts=-1, reconnect_time_wait=0.2))
        self.js = self.nc.jetstream()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(60)

    def subject(self, index: int) -> str:
        return f"{self.stream.lower()}.s{index}"

    def splits_wanted(self, count: int) -> None:
        self.count = max(self.count, count)
        subjects = [self.subject(i) for i in range(self.count)]
        self.run(self._stream(subjects))

    async def _stream(self, subjects: list[str]) -> None:
        try:
            await self.js.update_stream(StreamConfig(name=self.stream, subjects=subjects))
        except nats.js.errors.NotFoundError:
            await self.js.add_stream(StreamConfig(name=self.stream, subjects=subjects))

    def _publish(self, split_index: int, body: bytes) -> int:
        ack = self.run(self.js.publish(self.subject(split_index), body, timeout=30))
        return ack.seq

    def write(self, split_index: int, records: list[Record]) -> list[Record]:
        for record in records:
            self.written.append((self._publish(split_index, json.dumps(record).encode()), record))
        return records

    def write_bad_record(self, split_index: int) -> None:
        """A message whose id is a word, in a BIGINT column."""
        self._publish(split_index, json.dumps({"id": "not-a-number", "split": split_index}).encode())

    def append(self, split_index: int, records: list[Record]) -> list[Record]:
        return self.write(split_index, records)

    def stop_system(self) -> None:
        self.server.stop()

    def start_system(self) -> None:
        self.server.start()

    def source(self, options: SourceOptions) -> NatsJetStreamSource:
        table = {"servers": self.server.url, "stream": self.stream, "discovery_interval_ms": 1000}
        context = BuildContext(env=self.env, batch_size=options.batch_size, stop=options.stop, flow_name=FLOW)
        source = NatsJetStreamSource.from_config(NatsSourceConfig.parse(table, self.env), FORMAT, context)
        source.clock = options.clock  # the kit moves time: discovery follows it
        return source

    def expected(self) -> list[Record]:
        return [record for _, record in self.written]

    def acknowledged(self) -> list[Record]:
        return self.run(self._acknowledged())

    async def _acknowledged(self) -> list[Record]:
        records: list[Record] = []
        for i in range(self.count):
            try:
                info = await self.js.consumer_info(self.stream, consumer_name(FLOW, self.subject(i)))
            except nats.js.errors.NotFoundError:
                continue
            floor = info.ack_floor.stream_seq if info.ack_floor else 0
            records += [r for seq, r in self.written if r["split"] == i and seq <= floor]
        return records

    def close(self) -> None:
        async def delete() -> None:
            with contextlib.suppress(nats.js.errors.NotFoundError):
                await self.js.delete_stream(self.stream)
            await self.nc.close()

        self.run(delete())
        self.loop.call_soon_threadsafe(self.loop.stop)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    server = PrivateNatsServer(tmp_path_factory.mktemp("jetstream"))
    server.start()
    yield server
    server.kill()


class TestNatsConformance(SourceConformanceSuite):
    @pytest.fixture()
    def external_context(self, server, env):
        context = NatsContext(f"T{uuid.uuid4().hex[:10].upper()}", env, server)
        yield context
        context.close()

    @pytest.mark.slow  # about 45 s: the clients wait out their reconnects while the server is down
    def test_the_external_system_going_away_and_coming_back_loses_nothing(self, external_context):
        super().test_the_external_system_going_away_and_coming_back_loses_nothing(external_context)
