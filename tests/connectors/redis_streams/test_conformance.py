"""The conformance kit over the redis_streams source, against a redis-server of the module's
own (Redis 7, every write kept), which the outage case stops and starts again."""

from __future__ import annotations

import uuid

import pytest
import redis

from connectors.redis_streams.config import RedisStreamsSourceConfig
from connectors.redis_streams.source import RedisStreamsSource
from source_support.formats import FormatSpec
from source_support.registry import BuildContext, Environment
from source_support.testing import ExternalContext, Record, SourceOptions
from source_support.testing.suite import SourceConformanceSuite
from tests.redis_server import PrivateRedis, server_binary

FORMAT = FormatSpec("fields", {"schema": "id BIGINT, split BIGINT, text STRING"})
GROUP = "conformance"


class RedisStreamsContext(ExternalContext):
    """Split i is the stream ``<prefix>s<i>``; a write appends entries (XADD). What is
    acknowledged is what the flow's consumer group was moved past."""

    writes_while_running = True

    def __init__(self, client: redis.Redis, prefix: str, env: Environment, server: PrivateRedis) -> None:
        self.client, self.prefix, self.env, self.server = client, prefix, env, server
        self.written: list[Record] = []

    def key(self, index: int) -> str:
        return f"{self.prefix}s{index}"

    def splits_wanted(self, count: int) -> None:
        """Streams are made by their first entry."""

    def write(self, split_index: int, records: list[Record]) -> list[Record]:
        pipe = self.client.pipeline(transaction=False)
        for record in records:
            pipe.xadd(self.key(split_index), record)
        pipe.execute()
        self.written += records
        return records

    def write_bad_record(self, split_index: int) -> None:
        """An entry whose id is a word, in a BIGINT column."""
        self.client.xadd(self.key(split_index), {"id": "not-a-number", "split": split_index, "text": "bad"})

    def append(self, split_index: int, records: list[Record]) -> list[Record]:
        return self.write(split_index, records)

    def stop_system(self) -> None:
        self.server.stop()

    def start_system(self) -> None:
        self.server.start()

    def close(self) -> None:
        keys = list(self.client.scan_iter(match=f"{self.prefix}*", count=1000))
        if keys:
            self.client.delete(*keys)
        self.client.close()

    def source(self, options: SourceOptions) -> RedisStreamsSource:
        table = {"streams": f"{self.prefix}s*", "discovery_interval_ms": 1000}
        context = BuildContext(
            env=self.env, batch_size=options.batch_size, stop=options.stop, flow_name=GROUP
        )
        source = RedisStreamsSource.from_config(
            RedisStreamsSourceConfig.parse(table, self.env), FORMAT, context
        )
        source.clock = options.clock  # the kit moves time: discovery follows it
        return source

    def expected(self) -> list[Record]:
        return list(self.written)

    def acknowledged(self) -> list[Record]:
        records = []
        for key in sorted(
            k.decode() for k in self.client.scan_iter(match=f"{self.prefix}s*", _type="stream")
        ):
            groups = [g for g in self.client.xinfo_groups(key) if g["name"] == GROUP.encode()]
            if not groups or groups[0]["last-delivered-id"] == b"0-0":
                continue
            for _, fields in self.client.xrange(key, max=groups[0]["last-delivered-id"]):
                records.append(
                    {
                        "id": int(fields[b"id"]),
                        "split": int(fields[b"split"]),
                        "text": fields[b"text"].decode(),
                    }
                )
        return records


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    server = PrivateRedis(tmp_path_factory.mktemp("redis"), binary=server_binary("7"))
    server.start()
    yield server
    server.kill()


class TestRedisStreamsConformance(SourceConformanceSuite):
    @pytest.fixture()
    def external_context(self, server, tmp_path):
        env = Environment(allowed_roots=(tmp_path,), base_dir=tmp_path, redis_url=server.url)
        context = RedisStreamsContext(server.client(), f"t{uuid.uuid4().hex[:10]}:", env, server)
        yield context
        context.close()
