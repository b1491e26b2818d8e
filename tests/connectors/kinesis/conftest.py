"""A moto server per test module: the stand-in for Kinesis, which cannot be reached here.
It runs ``moto_kinesis.py``: moto with resharding corrected to Kinesis's documented
behaviour (children start empty, a closed shard read to its end returns no next iterator)."""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from source_support.registry import Environment
from tests.moto_server import ACCESS_KEY_ID, SECRET_ACCESS_KEY, PrivateMotoServer

LAUNCHER = str(Path(__file__).with_name("moto_kinesis.py"))


def kinesis_server() -> PrivateMotoServer:
    return PrivateMotoServer(LAUNCHER)


@pytest.fixture(scope="module")
def moto() -> Iterator[PrivateMotoServer]:
    with kinesis_server() as server:
        yield server


@pytest.fixture()
def env(tmp_path) -> Environment:
    return Environment(allowed_roots=(tmp_path,), base_dir=Path(tmp_path))


@pytest.fixture()
def kinesis(moto):  # noqa: ANN201 (boto3's clients have no common type)
    return moto.client("kinesis")


@pytest.fixture()
def stream_name(kinesis) -> Iterator[str]:
    name = f"t-{uuid.uuid4().hex[:10]}"
    yield name
    with contextlib.suppress(kinesis.exceptions.ResourceNotFoundException):
        kinesis.delete_stream(StreamName=name)


def source_table(moto: PrivateMotoServer, stream: str, **extra: Any) -> dict[str, Any]:
    """A ``[source]`` table that reads ``stream`` at the test server, with the test keys."""
    return {
        "endpoint_url": moto.endpoint_url,
        "access_key_id": ACCESS_KEY_ID,
        "secret_access_key": SECRET_ACCESS_KEY,
        "stream_name": stream,
        **extra,
    }


def shard_ids(kinesis, stream: str) -> list[str]:  # noqa: ANN001
    return [s["ShardId"] for s in kinesis.list_shards(StreamName=stream)["Shards"]]


def put_json(
    kinesis, stream: str, records: list[dict[str, Any]], *, shard_hash: str | None = None
) -> list[str]:  # noqa: ANN001
    """Puts each record as JSON (partition key: its ``key``, else ``k``), in order; returns
    the shard each went to."""
    shards = []
    for record in records:
        args: dict[str, Any] = {"StreamName": stream, "Data": json.dumps(record).encode()}
        args["PartitionKey"] = str(record.get("key", "k"))
        if shard_hash is not None:
            args["ExplicitHashKey"] = shard_hash
        shards.append(kinesis.put_record(**args)["ShardId"])
    return shards
