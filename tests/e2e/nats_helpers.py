"""NATS JetStream flows end to end: a producer of orders into a stream's subjects, a
private nats-server for restarts, and a flow spec over the stream."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from pathlib import Path

import nats
from nats.js.api import StreamConfig

from tests.e2e.streams_helpers import SCHEMA, SteadyWriter
from tests.nats_server import PrivateNatsServer

__all__ = ["NatsProducer", "PrivateNatsServer", "nats_spec"]


class NatsProducer(SteadyWriter):
    """Publishes orders ``{id, customer, amount}`` with ids 0, 1, 2... round robin on the
    subjects ``<prefix>.<n>`` of stream ``stream``, from an event loop of its own."""

    def __init__(self, url: str, stream: str, *, subjects: int = 4) -> None:
        super().__init__()
        self.url, self.stream, self.subjects = url, stream, subjects
        self.prefix = stream.lower()
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()
        self.nc = self.run(nats.connect(url, max_reconnect_attempts=-1, reconnect_time_wait=0.2))
        self.js = self.nc.jetstream()

    def run(self, coro, timeout: float = 30):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def subject(self, n: int | str) -> str:
        return f"{self.prefix}.{n}"

    def create(self, subjects: list[str] | None = None) -> None:
        subjects = subjects or [self.subject(i) for i in range(self.subjects)]
        self.run(self.js.add_stream(StreamConfig(name=self.stream, subjects=subjects)))

    def add_subject(self, subject: str) -> None:
        info = self.run(self.js.stream_info(self.stream))
        info.config.subjects = [*info.config.subjects, subject]
        self.run(self.js.update_stream(info.config))

    def publish_body(self, subject: str, body: bytes) -> int:
        return self.run(self.js.publish(subject, body)).seq

    def write(self, count: int, *, subject: str | None = None) -> list[int]:
        """Publishes ``count`` orders (on ``subject`` only, if given); returns their ids."""
        with self._lock:
            first = len(self.sent)
            ids = list(range(first, first + count))
            self.run(self._publish(ids, subject))
            self.sent.extend(ids)
        return ids

    async def _publish(self, ids: list[int], subject: str | None) -> None:
        for i in ids:
            body = json.dumps({"id": i, "customer": f"c{i % 5}", "amount": i / 2}).encode()
            await self.js.publish(subject or self.subject(i % self.subjects), body, timeout=30)

    def close(self) -> None:
        with contextlib.suppress(Exception):  # a private server may be gone already
            self.run(self.js.delete_stream(self.stream), timeout=10)
        self.run(self.nc.close(), timeout=10)
        self.loop.call_soon_threadsafe(self.loop.stop)


def nats_spec(
    name: str,
    url: str,
    stream: str,
    sink: Path,
    *,
    parallelism: int = 2,
    batch_size: int = 50,
    source: dict | None = None,
    **flow_fields,
) -> dict:
    """An unbounded flow over stream ``stream`` into a Parquet sink."""
    flow = {"name": name, "parallelism": parallelism, "batch_size": batch_size, "poll_interval_ms": 50}
    return {
        "flow": {**flow, **flow_fields},
        "source": {"type": "nats_jetstream", "servers": url, "stream": stream, **(source or {})},
        "format": {"type": "json", "schema": SCHEMA},
        "transform": {"sql": "SELECT id, customer, amount FROM source", "trigger_ms": 500},
        "sink": {"type": "parquet", "path": str(sink)},
    }
