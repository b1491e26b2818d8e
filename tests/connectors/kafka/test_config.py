"""The ``[source]`` of kafka: bad tables refused naming the field, secrets masked in errors,
the SASL and TLS client settings a URL makes, and the type listed where users pick one."""

from __future__ import annotations

import pytest

from connectors.kafka.config import KafkaSourceConfig
from connectors.kafka.connection import client_config
from connectors.kafka.source import KafkaSource
from source_support.errors import ConfigError
from source_support.formats import FormatSpec
from source_support.registry import BuildContext

SERVERS = "kafka://127.0.0.1:9092"
GOOD = {"bootstrap_servers": SERVERS, "topics": ["orders"]}


@pytest.mark.parametrize(
    ("table", "field"),
    [
        ({"topics": ["orders"]}, "source.bootstrap_servers"),
        ({"bootstrap_servers": "http://h:9092", "topics": ["orders"]}, "source.bootstrap_servers"),
        ({"bootstrap_servers": "h:9092/x y", "topics": ["orders"]}, "source.bootstrap_servers"),
        ({"bootstrap_servers": SERVERS}, "source.topics"),
        ({**GOOD, "topic_pattern": "orders.*"}, "source.topics"),
        ({"bootstrap_servers": SERVERS, "topics": []}, "source.topics"),
        ({"bootstrap_servers": SERVERS, "topics": ["a b"]}, "source.topics"),
        ({"bootstrap_servers": SERVERS, "topic_pattern": "orders(["}, "source.topic_pattern"),
        ({**GOOD, "start": "yesterday"}, "source.start"),
        ({**GOOD, "start_offsets": {"orders": 3}}, "source.start_offsets"),
        ({**GOOD, "start_offsets": {"other:0": 3}}, "source.start_offsets"),
        ({**GOOD, "start_offsets": {"orders:0": -1}}, "source.start_offsets.orders:0"),
        ({**GOOD, "stop_offsets": {"orders:0": "x"}}, "source.stop_offsets.orders:0"),
        ({**GOOD, "stop_offsets": {}}, "source.stop_offsets"),
        ({**GOOD, "discovery_interval_ms": 5}, "source.discovery_interval_ms"),
        ({**GOOD, "metadata": "yes"}, "source.metadata"),
        ({**GOOD, "on_reset": "skip"}, "source.on_reset"),
        ({**GOOD, "on_reset": True}, "source.on_reset"),
        ({**GOOD, "connection": "c"}, "source.connection"),
        ({**GOOD, "color": "red"}, "source.color"),
    ],
)
def test_a_bad_source_table_is_refused_naming_the_field(env, table, field):
    with pytest.raises(ConfigError) as caught:
        KafkaSourceConfig.parse(table, env)
    assert caught.value.field == field


def test_on_reset_says_what_it_may_be_when_refused(env):
    with pytest.raises(ConfigError) as caught:
        KafkaSourceConfig.parse({**GOOD, "on_reset": "latest"}, env)
    assert str(caught.value) == "source.on_reset: must be one of fail, restart"
    assert KafkaSourceConfig.parse({**GOOD, "on_reset": "restart"}, env).on_reset == "restart"


def test_a_good_table_keeps_its_offsets_and_start(env):
    config = KafkaSourceConfig.parse(
        {**GOOD, "start": " 2024-05-01T12:00:00Z ", "start_offsets": {"orders:0": 42}}, env
    )
    assert (config.start, config.start_offsets) == ("2024-05-01T12:00:00Z", {"orders:0": 42})
    assert config.to_dict()["bootstrap_servers"] == SERVERS


def test_a_password_in_the_servers_is_never_echoed(env):
    with pytest.raises(ConfigError) as caught:
        KafkaSourceConfig.parse({"bootstrap_servers": "http://me:s3cret@h:9092", "topics": ["o"]}, env)
    assert "s3cret" not in str(caught.value) and "****" in str(caught.value)


def test_credentials_make_sasl_and_kafka_ssl_makes_tls():
    plain = client_config("kafka://h1:9092,h2")
    assert plain["bootstrap.servers"] == "h1:9092,h2:9092" and "security.protocol" not in plain
    sasl = client_config("kafka+ssl://me:p%40ss@h1:9093")
    assert (sasl["security.protocol"], sasl["sasl.mechanisms"]) == ("SASL_SSL", "PLAIN")
    assert (sasl["sasl.username"], sasl["sasl.password"]) == ("me", "p@ss")
    assert client_config("kafka+ssl://h:9093")["security.protocol"] == "SSL"


def build(env, stop=None, **table):
    config = KafkaSourceConfig.parse({**GOOD, **table}, env)
    context = BuildContext(env=env, batch_size=10, stop=stop or {}, flow_name="f")
    return KafkaSource.from_config(config, FormatSpec("jsonl", {"schema": "id BIGINT"}), context)


def test_a_stop_at_an_entry_id_is_refused_for_per_partition_offsets(env):
    with pytest.raises(ConfigError, match="stop.at") as caught:
        build(env, stop={"at": "1700000000000-0", "kind": "position"})
    assert "source.stop_offsets" in str(caught.value)


def test_stop_offsets_and_a_stop_rule_are_not_both_given(env):
    with pytest.raises(ConfigError, match="source.stop_offsets"):
        build(env, stop={"at": "latest", "kind": "latest"}, stop_offsets={"orders:0": 5})


def test_stop_offsets_make_the_source_bounded(env):
    assert build(env, stop_offsets={"orders:0": 5}).boundedness.value == "bounded"
    assert build(env).boundedness.value == "continuous_unbounded"


def test_unreachable_brokers_are_a_config_error_naming_the_field(env):
    source = build(env, bootstrap_servers="kafka://u:secret@127.0.0.1:1")
    source.check_timeout_s = 0.5  # nothing listens there: no answer will come
    with pytest.raises(ConfigError) as caught:
        source.check_input()
    assert caught.value.field == "source.bootstrap_servers"
    assert "cannot reach Kafka at kafka://u:****@127.0.0.1:1" in str(caught.value)
    assert "secret" not in str(caught.value)
