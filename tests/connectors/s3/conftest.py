"""One moto server per test module: the stand-in for S3, which cannot run here (a real
HTTP endpoint speaking the S3 protocol, started on a free loopback port and stopped by
its pid; see tests/moto_server.py). Each test gets a bucket of its own."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from connectors.aws import session
from connectors.s3 import objects
from source_support.registry import Environment
from tests.moto_server import ACCESS_KEY_ID, SECRET_ACCESS_KEY, PrivateMotoServer


@pytest.fixture(scope="module")
def moto():
    with PrivateMotoServer() as server:
        yield server


@pytest.fixture()
def s3(moto):
    return moto.client("s3")


@pytest.fixture()
def bucket(s3) -> str:
    name = f"t-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=name)
    return name


@pytest.fixture()
def env(tmp_path) -> Environment:
    return Environment(allowed_roots=(tmp_path,), base_dir=Path(tmp_path))


@pytest.fixture()
def quick_retries(monkeypatch):
    """An object's reads try again without the production backoff, so a server that is
    away costs a test little time (the backoff's shape is the same)."""
    monkeypatch.setattr(objects, "BACKOFF_S", 0.01)
    monkeypatch.setattr(objects, "MAX_BACKOFF_S", 0.02)
    monkeypatch.setattr(session, "MAX_ATTEMPTS", 1)  # botocore's own tries


def source_table(moto: PrivateMotoServer, bucket: str, **options) -> dict:
    """A staff ``[source]`` table over ``bucket`` on the test server."""
    return {
        "type": "s3",
        "endpoint_url": moto.endpoint_url,
        "bucket": bucket,
        "access_key_id": ACCESS_KEY_ID,
        "secret_access_key": SECRET_ACCESS_KEY,
        **options,
    }
