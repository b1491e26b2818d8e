"""The sinks at s3:// paths without Spark: config checks, a refused key pair, a missing
bucket, key patterns, the server going away mid-write, and what a plain reader sees.

S3 itself cannot be reached here: the store is a moto server (``python -m moto.server``)
this module starts on a free loopback port and stops by pid. It checks signatures
(``INITIAL_NO_AUTH_ACTION_COUNT``: the first four calls, which make its IAM user, key and
bucket, go unchecked), so a wrong secret is refused as AWS would refuse it.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from connectors.aws import session
from connectors.aws.config import AwsTarget
from connectors.aws.session import aws_client
from connectors.files import object_sink
from connectors.files.object_sink import ObjectSinkError, S3Place, append_objects, commit_objects
from connectors.files.sink import count_rows
from source_support.connections import ConnectionTarget
from source_support.errors import ConfigError
from source_support.registry import Environment
from source_support.testing.sink_suite import accept, crash_after_swap
from tests.connectors.files.s3_sink_support import (
    BUCKET,
    SINKS,
    data_keys,
    key_pair,
    moto_with_bucket,
    read_objects,
    s3_client,
    s3_filesystem,
)
from tests.e2e.netcut import TcpProxy
from tests.moto_server import REGION, PrivateMotoServer

WRONG_SECRET = "wrong-secret-never-shown"


@pytest.fixture(scope="module")
def moto():
    yield from moto_with_bucket()


@pytest.fixture(scope="module")
def strict_moto():
    """A moto server that checks signatures, with one IAM user allowed everything (its own
    server: moto 5.2 then miscomputes the signature of a listing with a "/" in its prefix,
    so it serves only the test of a wrong secret)."""
    mp = pytest.MonkeyPatch()
    mp.setenv("INITIAL_NO_AUTH_ACTION_COUNT", "4")
    server = PrivateMotoServer()
    try:
        server.start()
        mp.undo()  # only this server's process checks signatures
        iam = server.client("iam")
        iam.create_user(UserName="sink")
        policy = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}
        iam.put_user_policy(UserName="sink", PolicyName="all", PolicyDocument=json.dumps(policy))
        key = iam.create_access_key(UserName="sink")["AccessKey"]
        server.key_pair = (key["AccessKeyId"], key["SecretAccessKey"])  # type: ignore[attr-defined]
        s3_client(server).create_bucket(Bucket=BUCKET)
        yield server
    finally:
        server.kill()
        mp.undo()


def _target(server, endpoint_url: str | None = None, secret: str | None = None) -> AwsTarget:
    key_id, key_secret = key_pair(server)
    return AwsTarget(
        endpoint_url=endpoint_url or server.endpoint_url,
        region=REGION,
        access_key_id=key_id,
        secret_access_key=secret or key_secret,
        field="sink.endpoint_url",
    )


def _config(server, prefix: str, *, secret: str | None = None, bucket: str = BUCKET) -> dict:
    key_id, key_secret = key_pair(server)
    return {
        "path": f"s3://{bucket}/{prefix}",
        "endpoint_url": server.endpoint_url,
        "access_key_id": key_id,
        "secret_access_key": secret or key_secret,
    }


def _parquet_writer(*tables: pa.Table):
    """A ``write_to(staging)`` that writes one Parquet file per table, as Spark would."""

    def write(staging: str) -> None:
        Path(staging).mkdir(parents=True)
        for index, table in enumerate(tables):
            pq.write_table(table, f"{staging}/part-{index:05d}-x.c000.snappy.parquet")

    return write


def _ids(first: int, count: int) -> pa.Table:
    return pa.table({"id": pa.array(range(first, first + count), pa.int64())})


def _parquet_rows(staging: Path) -> int:
    return count_rows(staging, "parquet")


def _commit(client, place: S3Place, tables: list[pa.Table], attempt_key: str, publish=accept) -> bool:
    """A bounded write of ``tables`` (one Parquet file each)."""
    return commit_objects(
        client, place, _parquet_writer(*tables), _parquet_rows, attempt_key=attempt_key, publish=publish
    )


def _append(client, place: S3Place, tables: list[pa.Table], epoch_key: str, publish=accept) -> bool:
    """A stream epoch of ``tables`` (one Parquet file each)."""
    return append_objects(
        client, place, _parquet_writer(*tables), _parquet_rows, epoch_key=epoch_key, publish=publish
    )


def _open_uploads(server, prefix: str) -> list[str]:
    uploads = s3_client(server).list_multipart_uploads(Bucket=BUCKET, Prefix=f"{prefix}/")
    return [u["Key"] for u in uploads.get("Uploads", [])]


def _read_ids(server, prefix: str) -> list[int]:
    return sorted(read_objects(server, prefix, "parquet").column("id").to_pylist())


# Config


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("s3://sink-tests", "needs a prefix below the bucket"),
        ("s3://sink-tests/", "needs a prefix below the bucket"),
        ("s3://Bad_Bucket/out", "is not a bucket name"),
        ("s3://sink-tests/a//b", "is not a plain prefix"),
        ("s3://sink-tests/out/../etc", "is not a plain prefix"),
        ("s3://sink-tests/out/*", "is not a plain prefix"),
    ],
)
def test_a_bad_s3_path_is_refused_naming_the_field(env, path, reason):
    with pytest.raises(ConfigError, match=reason) as caught:
        SINKS["parquet"].validate({"path": path}, env)
    assert caught.value.field == "sink.path"


def test_aws_fields_on_a_local_path_are_refused(env):
    with pytest.raises(ConfigError, match="is for an s3:// path only") as caught:
        SINKS["csv"].validate({"path": "out", "endpoint_url": "http://127.0.0.1:9000"}, env)
    assert caught.value.field == "sink.endpoint_url"


def test_an_s3_path_keeps_its_fields_and_a_connection_excludes_typed_keys(env):
    stored = SINKS["json"].validate({"path": "s3://sink-tests/out/", "connection": "lake"}, env)
    assert stored["path"] == "s3://sink-tests/out/" and stored["connection"] == "lake"
    with pytest.raises(ConfigError) as caught:
        SINKS["json"].validate(
            {"path": "s3://sink-tests/out", "connection": "lake", "access_key_id": "k"}, env
        )
    assert caught.value.field == "sink.access_key_id"


# Reaching the store


@pytest.mark.slow
def test_a_wrong_secret_is_a_config_error_naming_the_field_and_nothing_is_written(strict_moto, env):
    config = SINKS["parquet"].validate(_config(strict_moto, "out/refused", secret=WRONG_SECRET), env)

    with pytest.raises(ConfigError) as caught:  # before Spark computes anything: no frame needed
        SINKS["parquet"].write(None, config, attempt_key="run1-1", publish=accept, env=env)

    assert caught.value.field == "sink.access_key_id"
    assert "refused the key pair" in str(caught.value)
    assert WRONG_SECRET not in str(caught.value) and WRONG_SECRET not in repr(caught.value)
    s3 = s3_client(strict_moto)
    assert "Contents" not in s3.list_objects_v2(Bucket=BUCKET)
    assert "Uploads" not in s3.list_multipart_uploads(Bucket=BUCKET)


@pytest.mark.slow
def test_a_bucket_that_does_not_exist_is_named(moto, env):
    config = SINKS["csv"].validate(_config(moto, "out", bucket="no-such-bucket"), env)

    with pytest.raises(ConfigError, match="bucket 'no-such-bucket' does not exist") as caught:
        SINKS["csv"].write(None, config, attempt_key="run1-1", publish=accept, env=env)
    assert caught.value.field == "sink.path"


def test_a_prefix_outside_the_connections_key_patterns_is_refused_before_contact(moto, tmp_path):
    key_id, secret = key_pair(moto)
    url = moto.endpoint_url.replace("http://", f"http://{key_id}:{secret}@")
    lake = ConnectionTarget(name="lake", type="aws", url=url, key_patterns=(f"{BUCKET}/team-a/*",))
    env = Environment(allowed_roots=(tmp_path,), base_dir=tmp_path, connections={"lake": lake})
    outside = SINKS["parquet"].validate({"path": f"s3://{BUCKET}/team-b/out", "connection": "lake"}, env)

    with pytest.raises(ConfigError, match="outside what the connection allows") as caught:
        SINKS["parquet"].write(None, outside, attempt_key="run1-1", publish=accept, env=env)
    assert caught.value.field == "sink.path"

    inside = replace(_target(moto), key_patterns=lake.key_patterns, field="sink.connection")
    client = object_sink.open_place(S3Place(BUCKET, "team-a/out"), inside)
    assert _commit(client, S3Place(BUCKET, "team-a/out"), [_ids(0, 3)], "r-1")
    assert _read_ids(moto, "team-a/out") == [0, 1, 2]


@pytest.mark.slow  # over 5 s on 2 cores: not in the fast lane
def test_the_server_going_away_mid_write_fails_the_attempt_and_keeps_the_old_output(moto, monkeypatch):
    place = S3Place(BUCKET, "out/outage")
    direct = aws_client(_target(moto), "s3")
    assert _commit(direct, place, [_ids(0, 5)], "run1-1")
    proxy = TcpProxy.for_url(moto.endpoint_url)
    monkeypatch.setattr(session, "MAX_ATTEMPTS", 1)  # botocore's backoff would only add seconds
    through_proxy = aws_client(_target(moto, endpoint_url=proxy.url(moto.endpoint_url)), "s3")
    uploaded: list[int] = []
    chunks = object_sink._chunks

    def chunks_then_cut(f):
        uploaded.append(1)
        if len(uploaded) == 2:  # the first file is up (its upload open), the server goes away
            proxy.close()
        return chunks(f)

    monkeypatch.setattr(object_sink, "_chunks", chunks_then_cut)
    monkeypatch.setattr(object_sink, "PART_BYTES", 5 * 1024 * 1024)
    try:
        with pytest.raises(ObjectSinkError, match=r"s3://sink-tests/out/outage: uploading .* failed"):
            _commit(through_proxy, place, [_ids(100, 5), _ids(200, 5)], "run2-1")
    finally:
        proxy.close()

    assert _read_ids(moto, "out/outage") == list(range(5)), "the old output, whole"
    assert len(_open_uploads(moto, "out/outage")) == 2, "the files' uploads, never completed"
    monkeypatch.undo()
    assert _commit(direct, place, [_ids(100, 5), _ids(200, 5)], "run2-2")
    assert _read_ids(moto, "out/outage") == [*range(100, 105), *range(200, 205)]
    assert _open_uploads(moto, "out/outage") == [], "the next attempt aborted the dead one's upload"


# What a reader sees


def test_a_dataset_reader_sees_one_runs_files_and_the_success_manifest_names_them(moto):
    place = S3Place(BUCKET, "out/dataset")
    client = aws_client(_target(moto), "s3")
    for attempt, first in (("run1-1", 0), ("run2-1", 50)):
        assert _commit(client, place, [_ids(first, 3), _ids(first + 10, 3)], attempt)

    table = ds.dataset(f"{BUCKET}/out/dataset", filesystem=s3_filesystem(moto)).to_table()
    assert sorted(table.column("id").to_pylist()) == [50, 51, 52, 60, 61, 62]
    success = json.loads(client.get_object(Bucket=BUCKET, Key="out/dataset/_SUCCESS")["Body"].read())
    assert success == {"attempt": "run2-1", "rows": 6, "files": data_keys(moto, "out/dataset")}


@pytest.mark.slow
def test_a_repeated_epoch_that_writes_fewer_files_leaves_only_its_own(moto):
    place = S3Place(BUCKET, "out/epochs")
    client = aws_client(_target(moto), "s3")
    assert _append(client, place, [_ids(0, 2)], "s1-000001")
    with pytest.raises(Exception, match="died after it published"):
        _append(client, place, [_ids(10, 2), _ids(20, 2)], "s1-000002", crash_after_swap)
    assert _read_ids(moto, "out/epochs") == [0, 1, 10, 11, 20, 21]

    assert _append(client, place, [_ids(30, 2)], "s1-000002")
    assert _read_ids(moto, "out/epochs") == [0, 1, 30, 31]
    assert _append(client, place, [_ids(40, 1)], "s1-000003")
    keys = [item["Key"] for item in client.list_objects_v2(Bucket=BUCKET, Prefix="out/epochs/")["Contents"]]
    assert [k for k in keys if "_epoch-" in k] == ["out/epochs/_epoch-s1-000003.json"], (
        "earlier manifests gone"
    )
    assert _read_ids(moto, "out/epochs") == [0, 1, 30, 31, 40]
