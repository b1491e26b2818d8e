"""An S3 sink under test: a prefix of its own in a bucket of a moto server, read back as a
plain reader would (pyarrow's S3 filesystem, names starting with "." or "_" skipped)."""

from __future__ import annotations

import csv
import io
import json
import uuid
from collections.abc import Iterator
from typing import Any

import boto3
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from botocore.config import Config

from connectors.files.sink import FILE_SINKS
from source_support.registry import Environment, SinkConnector
from source_support.testing.sink_suite import SinkContext
from tests.moto_server import ACCESS_KEY_ID, REGION, SECRET_ACCESS_KEY, PrivateMotoServer

SINKS = {sink.type: sink for sink in FILE_SINKS}
BUCKET = "sink-tests"


def key_pair(server: PrivateMotoServer) -> tuple[str, str]:
    """The key pair the server takes (a server that checks signatures sets ``key_pair``)."""
    return getattr(server, "key_pair", (ACCESS_KEY_ID, SECRET_ACCESS_KEY))


def s3_client(server: PrivateMotoServer) -> Any:
    key_id, secret = key_pair(server)
    return boto3.client(
        "s3",
        endpoint_url=server.endpoint_url,
        region_name=REGION,
        aws_access_key_id=key_id,
        aws_secret_access_key=secret,
        config=Config(s3={"addressing_style": "path"}),
    )


def s3_filesystem(server: PrivateMotoServer) -> pafs.S3FileSystem:
    host = server.endpoint_url.removeprefix("http://")
    key_id, secret = key_pair(server)
    return pafs.S3FileSystem(
        access_key=key_id,
        secret_key=secret,
        region=REGION,
        endpoint_override=host,
        scheme="http",
    )


def moto_with_bucket() -> Iterator[PrivateMotoServer]:
    """A module's moto server with the bucket ``BUCKET`` (its fixture yields from this)."""
    with PrivateMotoServer() as server:
        server.client("s3").create_bucket(Bucket=BUCKET)
        yield server


def s3_config(server: PrivateMotoServer, prefix: str, **fields: Any) -> dict[str, Any]:
    return {
        "path": f"s3://{BUCKET}/{prefix}",
        "endpoint_url": server.endpoint_url,
        "access_key_id": ACCESS_KEY_ID,
        "secret_access_key": SECRET_ACCESS_KEY,
        **fields,
    }


def data_keys(server: PrivateMotoServer, prefix: str) -> list[str]:
    """The keys under ``prefix/`` a plain reader takes as data (no "." or "_" part)."""
    s3 = s3_client(server)
    keys: list[str] = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=f"{prefix}/"):
        for item in page.get("Contents", []):
            relative = item["Key"][len(prefix) + 1 :]
            if not any(part.startswith((".", "_")) for part in relative.split("/")):
                keys.append(item["Key"])
    return sorted(keys)


def read_objects(server: PrivateMotoServer, prefix: str, kind: str) -> pa.Table:
    """What a plain reader sees under ``prefix/``: each data object read whole."""
    fs = s3_filesystem(server)
    tables: list[pa.Table] = []
    records: list[dict[str, Any]] = []
    for key in data_keys(server, prefix):
        with fs.open_input_file(f"{BUCKET}/{key}") as f:
            body = f.read()
        if kind == "parquet":
            tables.append(pq.read_table(pa.BufferReader(body)))
        elif kind == "csv":  # Spark writes a null as nothing
            rows = csv.DictReader(io.StringIO(body.decode(), newline=""))
            records += [{k: v or None for k, v in row.items()} for row in rows]
        else:
            records += [json.loads(line) for line in body.decode().splitlines() if line.strip()]
    if kind == "parquet":
        return pa.concat_tables(tables) if tables else pa.table({})
    return pa.Table.from_pylist(records) if records else pa.table({})


class S3SinkContext(SinkContext):
    """A fresh prefix in the moto server's bucket, given by endpoint and key pair."""

    def __init__(self, server: PrivateMotoServer, kind: str, env: Environment) -> None:
        self.server = server
        self.kind = kind
        self.keeps_types = kind == "parquet"
        self._env = env
        self.prefix = f"out/{kind}-{uuid.uuid4().hex[:8]}"

    @property
    def connector(self) -> SinkConnector:
        return SINKS[self.kind]

    @property
    def env(self) -> Environment:
        return self._env

    def config(self) -> dict[str, Any]:
        return self.connector.validate(s3_config(self.server, self.prefix), self._env)

    def read(self) -> pa.Table:
        return read_objects(self.server, self.prefix, self.kind)
