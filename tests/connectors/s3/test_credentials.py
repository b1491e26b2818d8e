"""A run is refused before it reads, naming the field and the reason with no secret in
it, when the credentials are wrong, the bucket is missing or the endpoint does not
answer.

This module's moto server (the stand-in for S3, on a free loopback port) checks
signatures: moto accepts any key unless ``INITIAL_NO_AUTH_ACTION_COUNT`` is set, after
which only keys made through its IAM are taken (the first calls make that key)."""

from __future__ import annotations

import boto3
import pytest

from source_support.errors import ConfigError
from tests.connectors.s3.helpers import build_source
from tests.moto_server import PrivateMotoServer
from tests.server_process import free_port

CSV = {"type": "csv", "schema": "id BIGINT", "header": False}
ALLOW_ALL = '{"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}'


@pytest.fixture(scope="module")
def moto():
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("INITIAL_NO_AUTH_ACTION_COUNT", "3")  # the three IAM calls below
        server = PrivateMotoServer()
        server.start()
    try:
        yield server
    finally:
        server.kill()


@pytest.fixture(scope="module")
def key(moto) -> dict[str, str]:
    """A key pair moto's IAM made, allowed everything, and a bucket "secured" it made."""
    iam = moto.client("iam")
    iam.create_user(UserName="reader")
    made = iam.create_access_key(UserName="reader")["AccessKey"]
    iam.put_user_policy(UserName="reader", PolicyName="all", PolicyDocument=ALLOW_ALL)
    pair = {"access_key_id": made["AccessKeyId"], "secret_access_key": made["SecretAccessKey"]}
    client = boto3.client(
        "s3",
        endpoint_url=moto.endpoint_url,
        region_name="us-east-1",
        aws_access_key_id=pair["access_key_id"],
        aws_secret_access_key=pair["secret_access_key"],
    )
    client.create_bucket(Bucket="secured")
    client.put_object(Bucket="secured", Key="a.csv", Body=b"1\n2\n")
    return pair


def check(moto_endpoint: str, env, **table) -> ConfigError:
    source = build_source(
        {"endpoint_url": moto_endpoint, "bucket": "secured", **table}, CSV, env, infer=False
    )
    with pytest.raises(ConfigError) as caught:
        source.check_input()
    return caught.value


@pytest.mark.slow
def test_the_right_key_pair_passes_the_check(moto, key, env):
    build_source({"endpoint_url": moto.endpoint_url, "bucket": "secured", **key}, CSV, env).check_input()


def test_a_wrong_secret_is_refused_naming_the_key_field_without_the_secret(moto, key, env):
    error = check(
        moto.endpoint_url, env, access_key_id=key["access_key_id"], secret_access_key="not-the-secret"
    )

    assert error.field == "source.access_key_id"
    assert "the credentials were refused (SignatureDoesNotMatch)" in error.reason
    assert "not-the-secret" not in str(error) and key["access_key_id"] not in str(error)


@pytest.mark.slow
def test_an_unknown_key_is_refused_naming_the_key_field(moto, key, env):
    error = check(moto.endpoint_url, env, access_key_id="AKIAUNKNOWN0000", secret_access_key="x")

    assert error.field == "source.access_key_id" and "InvalidAccessKeyId" in error.reason
    assert "AKIAUNKNOWN0000" not in str(error)


def test_a_missing_bucket_is_refused_naming_the_bucket(moto, key, env):
    source = build_source(
        {"endpoint_url": moto.endpoint_url, "bucket": "no-such-bucket", **key}, CSV, env, infer=False
    )
    with pytest.raises(ConfigError) as caught:
        source.check_input()

    assert caught.value.field == "source.bucket"
    assert caught.value.reason == f"no bucket 'no-such-bucket' at {moto.endpoint_url}"


@pytest.mark.slow  # over 5 s on 2 cores: not in the fast lane
def test_an_endpoint_that_does_not_answer_is_refused_naming_it(key, env, quick_retries):
    port = free_port()  # nothing listens there
    error = check(f"http://127.0.0.1:{port}", env, **key)

    assert error.field == "source.endpoint_url"
    assert error.reason == f"http://127.0.0.1:{port}: the endpoint does not answer"
    assert key["secret_access_key"] not in str(error)
