"""The endpoint, region and credentials of AWS-protocol sources and sinks (``AwsAddress``),
and the ``aws`` connection kind; nothing here connects."""

from __future__ import annotations

from pathlib import Path

import botocore.exceptions
import pytest

from connectors.aws import AwsAddress
from connectors.aws.config import aws_target, validate_endpoint
from connectors.aws.session import aws_error_reason
from source_support.connections import CONNECTION_KINDS, ConnectionTarget
from source_support.errors import ConfigError
from source_support.options import mask_config
from source_support.registry import Environment

ENV = Environment(allowed_roots=(Path("/tmp"),), base_dir=Path("/tmp"))


def refused(table: dict[str, object], env: Environment = ENV) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        AwsAddress.parse(table, env)
    return caught.value


def test_typed_endpoint_and_key_pair_are_kept() -> None:
    config = AwsAddress.parse(
        {"endpoint_url": "http://127.0.0.1:9000", "access_key_id": "k", "secret_access_key": "s"}, ENV
    )
    target = aws_target(config, ENV)
    assert (target.endpoint_url, target.region, target.access_key_id, target.secret_access_key) == (
        "http://127.0.0.1:9000",
        "us-east-1",
        "k",
        "s",
    )


def test_half_a_key_pair_is_refused_naming_the_missing_half() -> None:
    error = refused({"access_key_id": "k"})
    assert error.field == "source.secret_access_key"


@pytest.mark.parametrize("url", ["ftp://host", "http://", "127.0.0.1:9000", "http://h:port", "http://h?x=1"])
def test_a_bad_endpoint_is_refused_naming_the_field(url: str) -> None:
    assert refused({"endpoint_url": url}).field == "source.endpoint_url"


def test_an_endpoint_with_a_user_part_is_not_echoed() -> None:
    with pytest.raises(ConfigError) as caught:
        validate_endpoint("ftp://KEY:SECRET@host", "sink.endpoint_url")
    assert "SECRET" not in str(caught.value) and caught.value.field == "sink.endpoint_url"


def test_a_connection_and_typed_credentials_are_refused_together() -> None:
    error = refused({"connection": "lake", "secret_access_key": "s"})
    assert error.field == "source.secret_access_key" and "lake" in error.reason


def test_a_connection_gives_endpoint_and_key_pair() -> None:
    env = Environment(
        allowed_roots=ENV.allowed_roots,
        base_dir=ENV.base_dir,
        connections={
            "lake": ConnectionTarget(
                name="lake",
                type="aws",
                url="http://AK%2F1:S%40cret@10.0.0.5:9000",
                key_patterns=("events/*",),
            )
        },
    )
    target = aws_target(AwsAddress.parse({"connection": "lake", "region": "eu-west-1"}, env), env)
    assert target.endpoint_url == "http://10.0.0.5:9000"
    assert (target.access_key_id, target.secret_access_key) == ("AK/1", "S@cret")
    assert target.key_patterns == ("events/*",) and target.field == "source.connection"


def test_a_connection_not_granted_is_refused_naming_the_field() -> None:
    config = AwsAddress.parse({"connection": "bobs"}, ENV)
    with pytest.raises(ConfigError) as caught:
        aws_target(config, ENV)
    assert caught.value.field == "source.connection"


def test_secrets_are_masked_and_the_kind_is_registered() -> None:
    masked = mask_config(AwsAddress.OPTIONS, {"access_key_id": "AKIA", "secret_access_key": "s3cr3t"})
    assert "s3cr3t" not in str(masked) and "AKIA" not in str(masked)
    assert CONNECTION_KINDS["aws"].validate_url("https://s3.eu-west-1.amazonaws.com", "url")


def test_a_refused_key_pair_is_reported_without_the_key() -> None:
    exc = botocore.exceptions.ClientError(
        {"Error": {"Code": "InvalidAccessKeyId", "Message": "The AWS Access Key Id AKIA123 does not exist"}},
        "ListObjectsV2",
    )
    reason = aws_error_reason(exc)
    assert "AKIA123" not in reason and "access_key_id" in reason
