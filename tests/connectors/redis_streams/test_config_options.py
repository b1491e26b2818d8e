"""The redis_streams source and redis_stream sink check what they declare, keep the declared
defaults, and never show the password of their url."""

from __future__ import annotations

import pytest

from connectors.redis_streams.config import RedisStreamSinkConfig, RedisStreamsSourceConfig
from source_support.errors import ConfigError
from source_support.options import option_named
from source_support.registry import mask_section, unmask_section, validate_sink, validate_source
from source_support.testing.options_contract import OptionsContract


class ConnectionOrUrl:
    """``connection`` and ``url`` exclude each other: the full table gives ``url``, and
    ``connection`` is checked in a table of its own."""

    def test_the_full_table_sets_every_declared_option(self, env):
        assert set(self.full_table(env)) | {"connection"} == {option.name for option in self.options}

    def test_a_table_with_a_connection_instead_of_the_url_is_accepted(self, env):
        table = {k: v for k, v in self.full_table(env).items() if k != "url"}

        stored = self.validate({**table, "connection": "orders-redis"}, env)

        assert stored["connection"] == "orders-redis" and "url" not in stored

    def test_a_connection_and_a_url_together_are_refused(self, env):
        with pytest.raises(ConfigError) as refused:
            self.validate({**self.full_table(env), "connection": "orders-redis"}, env)

        assert refused.value.field == f"{self.section}.connection"


class TestRedisStreamsSourceOptions(ConnectionOrUrl, OptionsContract):
    section, type_name = "source", "redis_streams"

    def full_table(self, env):
        return {
            "url": "redis://:secret@127.0.0.1:6379/0",
            "streams": "orders:*",
            "start": "2024-05-01T12:00:00Z",
            "discovery_interval_ms": 100,
            "metadata": True,
        }


class TestRedisStreamSinkOptions(ConnectionOrUrl, OptionsContract):
    section, type_name = "sink", "redis_stream"

    def full_table(self, env):
        return {"url": "redis://app:secret@127.0.0.1:6379/1", "key": "orders:large", "maxlen": 1_000}


def test_a_minimal_source_stores_the_declared_defaults(env):
    stored = RedisStreamsSourceConfig.parse({"streams": "orders:*"}, env).to_dict()

    declared = {o.name: o.default for o in RedisStreamsSourceConfig.OPTIONS if o.has_default}
    assert stored == {"streams": "orders:*", **declared}


def test_the_url_of_both_tables_is_declared_a_url_secret():
    assert option_named(RedisStreamsSourceConfig.OPTIONS, "url").secret == "url"
    assert option_named(RedisStreamSinkConfig.OPTIONS, "url").secret == "url"


@pytest.mark.parametrize("interval", [99, 86_400_001])
def test_a_discovery_interval_past_its_declared_range_is_refused(env, interval):
    option = option_named(RedisStreamsSourceConfig.OPTIONS, "discovery_interval_ms")

    with pytest.raises(ConfigError) as caught:
        RedisStreamsSourceConfig.parse({"streams": "s", "discovery_interval_ms": interval}, env)

    assert caught.value.field == "source.discovery_interval_ms"
    assert caught.value.reason == f"must be between {option.minimum} and {option.maximum}"


def test_a_stored_source_is_shown_without_its_password_and_saved_back_with_it(env):
    type_name, stored = validate_source(
        {"type": "redis_streams", "streams": "orders:*", "url": "redis://app:s3cret@redis.example:6380/2"},
        env,
    )
    table = {"type": type_name, **stored}

    shown = mask_section("source", table)

    assert shown["url"] == "redis://app:****@redis.example:6380/2"
    assert "s3cret" not in repr(shown)
    assert unmask_section("source", shown, table) == table


def test_a_stored_sink_sent_back_with_a_new_password_takes_it(env):
    _, stored = validate_sink({"type": "redis_stream", "key": "out", "url": "redis://:old@h:6379/0"}, env)
    table = {"type": "redis_stream", **stored}
    sent = {**mask_section("sink", table), "url": "redis://:new@h:6379/0"}

    assert unmask_section("sink", sent, table)["url"] == "redis://:new@h:6379/0"


def test_a_source_on_the_deployments_redis_has_no_url_to_mask(env):
    _, stored = validate_source({"type": "redis_streams", "streams": "s"}, env)

    assert "url" not in stored
    assert mask_section("source", {"type": "redis_streams", **stored}) == {"type": "redis_streams", **stored}
