"""The ``[source]`` of kinesis: bad tables refused naming the field, secrets masked, and
``check_input`` saying why a stream cannot be read (missing, endpoint away, credentials
refused) on the field to fix, without echoing a secret. Against the module's moto server
(the stand-in for Kinesis)."""

from __future__ import annotations

import botocore.exceptions
import pytest

from connectors.kinesis.config import KinesisSourceConfig
from connectors.kinesis.source import KinesisSource
from source_support.errors import ConfigError
from source_support.formats import validate_format
from source_support.registry import BuildContext, mask_section
from tests.connectors.kinesis.conftest import source_table
from tests.moto_server import SECRET_ACCESS_KEY

GOOD = {"endpoint_url": "http://127.0.0.1:4566", "stream_name": "orders"}


@pytest.mark.parametrize(
    ("table", "field"),
    [
        ({"endpoint_url": "http://127.0.0.1:4566"}, "source.stream_name"),
        ({**GOOD, "stream_name": "no spaces"}, "source.stream_name"),
        ({**GOOD, "stream_name": "x" * 129}, "source.stream_name"),
        ({**GOOD, "start": "EARLIEST"}, "source.start"),
        ({**GOOD, "start": "AT_TIMESTAMP"}, "source.start_timestamp"),
        ({**GOOD, "start": "AT_TIMESTAMP", "start_timestamp": "yesterday"}, "source.start_timestamp"),
        ({**GOOD, "start_timestamp": "2026-01-01T00:00:00Z"}, "source.start_timestamp"),
        ({**GOOD, "discovery_interval_ms": 5}, "source.discovery_interval_ms"),
        ({**GOOD, "metadata": "yes"}, "source.metadata"),
        ({**GOOD, "endpoint_url": "ftp://host"}, "source.endpoint_url"),
        ({**GOOD, "access_key_id": "k"}, "source.secret_access_key"),
        ({**GOOD, "connection": "aws-orders"}, "source.endpoint_url"),
        ({**GOOD, "shards": 2}, "source.shards"),
    ],
)
def test_a_bad_source_table_is_refused_naming_the_field(env, table, field):
    with pytest.raises(ConfigError) as refused:
        KinesisSourceConfig.parse(table, env)

    assert refused.value.field == field


def test_a_good_source_table_is_stored_with_its_defaults(env):
    config = KinesisSourceConfig.parse(
        {**GOOD, "start": "AT_TIMESTAMP", "start_timestamp": "2026-11-01T00:00:00Z"}, env
    )

    assert config.to_dict() == {
        "endpoint_url": "http://127.0.0.1:4566",
        "region": "us-east-1",
        "stream_name": "orders",
        "start": "AT_TIMESTAMP",
        "start_timestamp": "2026-11-01T00:00:00Z",
        "discovery_interval_ms": 10_000,
        "metadata": False,
    }


def test_the_secret_key_is_masked():
    table = {"type": "kinesis", **GOOD, "access_key_id": "AKIA1", "secret_access_key": "s3cret"}

    masked = mask_section("source", table)

    assert masked["secret_access_key"] == masked["access_key_id"] == "********"


def build(env, table, *, stop=None, fmt=None) -> KinesisSource:
    return KinesisSource.from_config(
        KinesisSourceConfig.parse(table, env),
        validate_format(fmt or {"type": "json", "schema": "id BIGINT"}),
        BuildContext(env=env, batch_size=10, stop=stop or {}),
    )


def test_a_stop_at_an_entry_id_is_refused_naming_stop_at(env):
    with pytest.raises(ConfigError) as refused:
        build(env, GOOD, stop={"at": "1700000000000-0", "kind": "position"})

    assert refused.value.field == "stop.at"
    assert "latest or an ISO-8601 time" in refused.value.reason


def test_a_stop_makes_the_source_bounded_and_after_records_keeps_it_unbounded(env):
    assert build(env, GOOD, stop={"at": "latest", "kind": "latest"}).boundedness.value == "bounded"
    assert build(env, GOOD, stop={"after_records": 5, "kind": "records"}).boundedness.value != "bounded"


@pytest.mark.slow
def test_a_missing_stream_is_refused_naming_source_stream_name(env, moto):
    source = build(env, source_table(moto, "nowhere"))

    with pytest.raises(ConfigError) as refused:
        source.check_input()

    assert refused.value.field == "source.stream_name"
    assert "ResourceNotFoundException" in refused.value.reason


@pytest.mark.slow
def test_an_endpoint_that_does_not_answer_is_refused_naming_source_endpoint_url(env):
    table = {
        **GOOD,
        "endpoint_url": "http://127.0.0.1:9",
        "access_key_id": "k",
        "secret_access_key": "s3cret",
    }

    with pytest.raises(ConfigError) as refused:
        build(env, table).check_input()

    assert refused.value.field == "source.endpoint_url"
    assert "the endpoint does not answer" in refused.value.reason


def test_refused_credentials_name_source_access_key_id_and_echo_no_secret(
    env, moto, stream_name, kinesis, monkeypatch
):
    kinesis.create_stream(StreamName=stream_name, ShardCount=1)
    source = build(env, source_table(moto, stream_name))
    # moto takes any key pair: the refusal is the answer AWS gives a wrong one.
    error = {"Error": {"Code": "UnrecognizedClientException", "Message": "The security token is invalid"}}

    def refuse(**kwargs):
        raise botocore.exceptions.ClientError(error, "DescribeStreamSummary")

    monkeypatch.setattr(source.client(), "describe_stream_summary", refuse)
    with pytest.raises(ConfigError) as refused:
        source.check_input()

    assert refused.value.field == "source.access_key_id"
    assert "credentials were refused" in refused.value.reason
    assert SECRET_ACCESS_KEY not in str(refused.value)
