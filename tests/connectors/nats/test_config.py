"""The ``[source]`` of nats_jetstream and the ``[sink]`` of nats: bad tables refused naming
the field, good ones stored as given, secrets masked."""

from __future__ import annotations

import pytest

from connectors.nats.config import NatsSinkConfig, NatsSourceConfig, filters_overlap
from connectors.nats.source import NatsJetStreamSource
from source_support.errors import ConfigError
from source_support.formats import validate_format
from source_support.registry import BuildContext, mask_section, validate_sink, validate_source

SERVERS = "nats://127.0.0.1:4222"


@pytest.mark.parametrize(
    ("table", "field"),
    [
        ({"servers": SERVERS}, "source.stream"),
        ({"servers": SERVERS, "stream": "A.B"}, "source.stream"),
        ({"stream": "ORDERS"}, "source.servers"),
        ({"servers": "http://127.0.0.1:4222", "stream": "ORDERS"}, "source.servers"),
        ({"servers": SERVERS, "stream": "ORDERS", "consumer": "mine"}, "source.consumer"),
        (
            {"servers": SERVERS, "stream": "ORDERS", "subjects": ["orders.>", "orders.eu.*"]},
            "source.subjects",
        ),
        (
            {"servers": SERVERS, "stream": "ORDERS", "subjects": ["orders.*.x", "orders.eu.*"]},
            "source.subjects",
        ),
        ({"servers": SERVERS, "stream": "ORDERS", "subjects": []}, "source.subjects"),
        ({"servers": SERVERS, "stream": "ORDERS", "subjects": ["orders..x"]}, "source.subjects"),
        ({"servers": SERVERS, "stream": "ORDERS", "start": "yesterday"}, "source.start"),
        ({"servers": SERVERS, "stream": "ORDERS", "start": "0"}, "source.start"),
        (
            {"servers": SERVERS, "stream": "ORDERS", "discovery_interval_ms": 5},
            "source.discovery_interval_ms",
        ),
        ({"servers": SERVERS, "stream": "ORDERS", "metadata": "yes"}, "source.metadata"),
        ({"servers": SERVERS, "stream": "ORDERS", "connection": "c"}, "source.connection"),
        ({"servers": SERVERS, "stream": "ORDERS", "color": "red"}, "source.color"),
    ],
)
def test_a_bad_source_table_is_refused_naming_the_field(env, table, field):
    with pytest.raises(ConfigError) as caught:
        NatsSourceConfig.parse(table, env)
    assert caught.value.field == field


def test_overlapping_filters_are_refused_naming_source_subjects(env):
    table = {"servers": SERVERS, "stream": "ORDERS", "subjects": ["orders.eu.>", "orders.*.paid"]}
    with pytest.raises(ConfigError, match="source.subjects: 'orders.eu.>' and 'orders.\\*.paid' overlap"):
        validate_source({"type": "nats_jetstream", **table}, env)


@pytest.mark.parametrize(
    ("a", "b", "overlap"),
    [
        ("orders.eu.>", "orders.us.>", False),
        ("orders.>", "orders.eu", True),
        ("orders.*", "orders.eu.x", False),
        ("orders.*", "orders.eu", True),
        ("orders", "orders.>", False),
        (">", "anything.at.all", True),
        ("a.*.c", "a.b.*", True),
    ],
)
def test_filters_overlap_where_a_subject_matches_both(a, b, overlap):
    assert filters_overlap(a, b) is overlap
    assert filters_overlap(b, a) is overlap


def test_a_good_source_table_is_stored_with_its_defaults(env):
    table = {"servers": SERVERS, "stream": "ORDERS", "subjects": ["orders.eu.>", "orders.us.>"]}
    _, stored = validate_source({"type": "nats_jetstream", **table}, env)
    assert stored == {
        **table,
        "consumer": "default",
        "start": "earliest",
        "discovery_interval_ms": 10_000,
        "on_reset": "fail",
        "metadata": False,
    }


def test_passwords_and_tokens_in_servers_are_masked(env):
    servers = "nats://alice:s3cret@10.0.0.1:4222,nats://tok3n@10.0.0.2:4222"
    masked = mask_section("source", {"type": "nats_jetstream", "servers": servers, "stream": "ORDERS"})
    assert "s3cret" not in masked["servers"] and "tok3n" not in masked["servers"]
    assert masked["servers"] == "nats://alice:****@10.0.0.1:4222,nats://****@10.0.0.2:4222"


@pytest.mark.parametrize(
    ("table", "field"),
    [
        ({"servers": SERVERS}, "sink.subject"),
        ({"servers": SERVERS, "subject": "a", "subject_column": "s"}, "sink.subject"),
        ({"servers": SERVERS, "subject": "orders.*"}, "sink.subject"),
        ({"subject": "orders.out"}, "sink.servers"),
        ({"servers": SERVERS, "subject": "orders.out", "stream": "A B"}, "sink.stream"),
        ({"servers": SERVERS, "subject": "orders.out", "duplicate_window": "soon"}, "sink.duplicate_window"),
        ({"servers": SERVERS, "subject": "orders.out", "duplicate_window": "10 ms"}, "sink.duplicate_window"),
    ],
)
def test_a_bad_sink_table_is_refused_naming_the_field(env, table, field):
    with pytest.raises(ConfigError) as caught:
        validate_sink({"type": "nats", **table}, env)
    assert caught.value.field == field


def test_a_stop_at_an_entry_id_is_refused_naming_stop_at(env):
    config = NatsSourceConfig.parse({"servers": SERVERS, "stream": "ORDERS"}, env)
    context = BuildContext(env=env, batch_size=10, stop={"at": "1-0", "kind": "position"})
    with pytest.raises(ConfigError) as caught:
        NatsJetStreamSource.from_config(
            config, validate_format({"type": "json", "schema": "id BIGINT"}), context
        )
    assert caught.value.field == "stop.at"


def test_the_fields_format_is_refused_naming_format_type(env):
    config = NatsSourceConfig.parse({"servers": SERVERS, "stream": "ORDERS"}, env)
    context = BuildContext(env=env, batch_size=10)
    with pytest.raises(ConfigError) as caught:
        NatsJetStreamSource.from_config(
            config, validate_format({"type": "fields", "schema": "id BIGINT"}), context
        )
    assert caught.value.field == "format.type"


def test_a_sink_with_a_subject_column_is_stored_with_its_defaults(env):
    table = {"servers": SERVERS, "subject_column": "route", "stream": "OUT"}
    assert NatsSinkConfig.parse(table, env).to_dict() == {**table, "duplicate_window": "2 minutes"}
