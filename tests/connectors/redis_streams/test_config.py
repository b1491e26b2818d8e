"""The [source] and [sink] tables of Redis streams: every field and every mistake."""

from __future__ import annotations

import pytest

from connectors.redis_streams.config import RedisStreamSinkConfig, RedisStreamsSourceConfig
from source_support.errors import ConfigError
from source_support.registry import SINKS, SOURCES, Environment, source_is_unbounded


@pytest.fixture()
def env(tmp_path) -> Environment:
    return Environment(allowed_roots=(tmp_path,), base_dir=tmp_path, redis_url="redis://127.0.0.1:6379/12")


def refused(config: dict, env: Environment) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        RedisStreamsSourceConfig.parse(config, env)
    return caught.value


def test_a_minimal_source_gets_its_defaults(env):
    config = RedisStreamsSourceConfig.parse({"streams": "orders:*"}, env)

    assert config.to_dict() == {
        "streams": "orders:*",
        "start": "earliest",
        "discovery_interval_ms": 10_000,
        "metadata": False,
    }


def test_every_field_is_kept(env):
    table = {
        "url": "redis://127.0.0.1:6379/0",
        "streams": "orders:1",
        "start": "1700000000000-5",
        "discovery_interval_ms": 500,
        "metadata": True,
    }

    assert RedisStreamsSourceConfig.parse(table, env).to_dict() == table


def test_the_connector_is_registered_as_unbounded():
    assert "redis_streams" in SOURCES and "redis_stream" in SINKS
    assert source_is_unbounded("redis_streams", {"streams": "x"})


@pytest.mark.parametrize(
    "start", ["earliest", "latest", "1700000000000-0", "1700000000000", "2024-05-01T12:00:00Z", "2024-05-01"]
)
def test_starts_that_are_accepted(env, start):
    assert RedisStreamsSourceConfig.parse({"streams": "s", "start": start}, env).start == start


@pytest.mark.parametrize("start", ["newest", "1700-0-0", "17000-", "tomorrow", "", "1-1048576"])
def test_a_bad_start_is_refused_naming_the_field(env, start):
    error = refused({"streams": "s", "start": start}, env)

    assert error.field == "source.start"


def test_a_typo_in_a_field_name_is_refused(env):
    error = refused({"streams": "s", "strat": "latest"}, env)

    assert error.field == "source.strat"
    assert "start" in error.reason  # the fields that exist are listed


@pytest.mark.parametrize(
    ("table", "field"),
    [
        ({}, "source.streams"),
        ({"streams": "  "}, "source.streams"),
        ({"streams": 3}, "source.streams"),
        ({"streams": "s", "metadata": "yes"}, "source.metadata"),
        ({"streams": "s", "discovery_interval_ms": 99}, "source.discovery_interval_ms"),
        ({"streams": "s", "discovery_interval_ms": 86_400_001}, "source.discovery_interval_ms"),
        ({"streams": "s", "discovery_interval_ms": True}, "source.discovery_interval_ms"),
        ({"streams": "s", "discovery_interval_ms": 1.5}, "source.discovery_interval_ms"),
        ({"streams": "s", "url": "http://localhost:6379"}, "source.url"),
        ({"streams": "s", "url": "redis://host:notaport"}, "source.url"),
        ({"streams": "s", "url": 6379}, "source.url"),
    ],
)
def test_each_mistake_names_its_field(env, table, field):
    assert refused(table, env).field == field


def test_unix_socket_and_tls_urls_are_accepted(env):
    for url in ("unix:///var/run/redis.sock", "rediss://user:pw@host:6380/1"):
        assert RedisStreamsSourceConfig.parse({"streams": "s", "url": url}, env).url == url


def test_a_password_never_appears_in_an_error(env):
    for url in ("http://user:s3cret@host:6379", "redis://user:s3cret@host:port", "mongodb://:s3cret@h"):
        error = refused({"streams": "s", "url": url}, env)

        assert "s3cret" not in str(error)
        assert "***" in str(error)


def test_validation_does_not_connect(env):
    # Nothing listens there: a flow may be defined before its Redis is up.
    config = RedisStreamsSourceConfig.parse({"streams": "s", "url": "redis://127.0.0.1:1/0"}, env)

    assert config.url == "redis://127.0.0.1:1/0"


def test_the_default_url_is_not_written_into_the_config(env):
    assert "url" not in RedisStreamsSourceConfig.parse({"streams": "s"}, env).to_dict()


# The sink


def test_a_sink_needs_a_key(env):
    with pytest.raises(ConfigError) as caught:
        RedisStreamSinkConfig.parse({}, env)

    assert caught.value.field == "sink.key"


@pytest.mark.parametrize(
    ("table", "field"),
    [
        ({"key": "out", "maxlen": 0}, "sink.maxlen"),
        ({"key": "out", "maxlen": "10"}, "sink.maxlen"),
        ({"key": "out", "url": "tcp://h"}, "sink.url"),
        ({"key": "out", "path": "/tmp/x"}, "sink.path"),
    ],
)
def test_sink_mistakes_name_their_field(env, table, field):
    with pytest.raises(ConfigError) as caught:
        RedisStreamSinkConfig.parse(table, env)

    assert caught.value.field == field


def test_a_sink_with_every_field_is_kept(env):
    table = {"key": "out", "maxlen": 1000, "url": "redis://h:6379/2"}

    assert RedisStreamSinkConfig.parse(table, env).to_dict() == table
