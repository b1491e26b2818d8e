"""``connector_test`` and ``connection_test`` against real systems: Redis, NATS, PostgreSQL,
local files, the librdkafka mock cluster and moto's S3 server (the stand-ins the connector
tests use for Kafka and S3, which cannot run here). Each says what it found, or what
failed, and never a secret."""

from __future__ import annotations

import asyncio
import uuid

import nats
import psycopg
import pytest
from confluent_kafka import Producer

from dataflow.redis_client import redis_url
from dataflow.services.connection_test import connection_test, connector_test
from source_support.errors import ConfigError
from tests.factories import ConnectionFactory, UserFactory
from tests.kafka_cluster import MockKafkaCluster
from tests.moto_server import ACCESS_KEY_ID, SECRET_ACCESS_KEY, PrivateMotoServer
from tests.server_process import free_port

pytestmark = [pytest.mark.django_db, pytest.mark.slow]

NATS_URL = "nats://127.0.0.1:4222"


def source_test(table: dict, **kw) -> dict:
    return connector_test(section="source", table=table, owner=None, **kw)


def test_files_say_how_many_matched_and_their_total_size(dirs):
    (dirs.data / "a.csv").write_text("n\n1\n")
    (dirs.data / "b.csv").write_text("n\n22\n")
    (dirs.data / "skip.txt").write_text("x")

    answer = source_test({"type": "files", "path": str(dirs.data / "*.csv")})

    assert answer["ok"], answer
    assert answer["found"][0] == f"2 files matched {dirs.data / '*.csv'}, 9 bytes in all"
    assert answer["found"][1:] == [f"{dirs.data / 'a.csv'}: 4 bytes", f"{dirs.data / 'b.csv'}: 5 bytes"]


def test_a_path_outside_the_allowed_roots_is_refused_before_anything_is_looked_at(dirs):
    with pytest.raises(ConfigError) as refused:
        source_test({"type": "files", "path": "/etc/*.conf"})
    assert refused.value.field == "source.path"


def test_a_file_sink_says_its_directory_is_made_by_the_first_run(dirs):
    answer = connector_test(
        section="sink", table={"type": "parquet", "path": str(dirs.out / "x")}, owner=None
    )
    assert answer["found"] == [f"{dirs.out / 'x'}: does not exist yet (the first run makes it)"]


def test_redis_streams_and_their_lengths_or_a_refused_connection(rds, prefix):
    rds.xadd(f"{prefix}a", {"n": 1})
    rds.xadd(f"{prefix}a", {"n": 2})
    rds.xadd(f"{prefix}b", {"n": 3})

    found = source_test({"type": "redis_streams", "url": redis_url(), "streams": f"{prefix}*"})
    refused = source_test(
        {"type": "redis_streams", "url": "redis://:s3cret@127.0.0.1:1/0", "streams": "x:*"}, timeout_s=3
    )

    assert found["found"] == [
        f"2 streams matched {prefix}*",
        f"{prefix}a: 2 entries",
        f"{prefix}b: 1 entries",
    ]
    assert not refused["ok"] and refused["field"] == "source.url"
    assert "refused" in refused["error"].lower() and "s3cret" not in str(refused)


def test_a_redis_stream_sink_says_its_length(rds, prefix):
    rds.xadd(f"{prefix}out", {"n": 1})
    table = {"type": "redis_stream", "url": redis_url(), "key": f"{prefix}out"}

    answer = connector_test(section="sink", table=table, owner=None)

    assert answer["found"] == [f"stream {prefix}out: 1 entries"]


def test_postgres_says_a_tables_row_estimate_or_that_it_is_missing(settings):
    url = settings.DATABASES["default"]
    dsn = f"postgres://{url['USER']}@{url['HOST']}:{url['PORT']}/{url['NAME']}"
    table = f"probe_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table} (id int PRIMARY KEY)")
        conn.execute(f"INSERT INTO {table} SELECT generate_series(1, 500)")
        conn.execute(f"ANALYZE {table}")
    try:
        found = source_test({"type": "postgres", "url": dsn, "table": table})
        missing = source_test({"type": "postgres", "url": dsn, "table": "no_such_table"})
        sink = connector_test(
            section="sink",
            table={"type": "postgres", "url": dsn, "table": table, "mode": "append"},
            owner=None,
        )
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"DROP TABLE {table}")

    assert found["found"][0].startswith(f"table public.{table}: about 500 rows (pg_class.reltuples)"), found
    assert not missing["ok"] and missing["field"] == "source.table" and "no_such_table" in missing["error"]
    assert sink["found"] == [f"table public.{table}: about 500 rows (pg_class.reltuples), mode append"]


def test_nats_says_the_streams_subjects_and_message_counts():
    stream = f"T{uuid.uuid4().hex[:10].upper()}"

    async def setup() -> None:
        nc = await nats.connect(NATS_URL)
        js = nc.jetstream()
        await js.add_stream(name=stream, subjects=[f"{stream.lower()}.>"])
        for subject, count in (("a", 2), ("b", 1)):
            for i in range(count):
                await js.publish(f"{stream.lower()}.{subject}", str(i).encode())
        await nc.close()

    async def teardown() -> None:
        nc = await nats.connect(NATS_URL)
        await nc.jetstream().delete_stream(stream)
        await nc.close()

    asyncio.run(setup())
    try:
        answer = source_test(
            {
                "type": "nats_jetstream",
                "servers": NATS_URL,
                "stream": stream,
                "subjects": [f"{stream.lower()}.a"],
            },
            format_table={"type": "raw"},
        )
    finally:
        asyncio.run(teardown())

    assert answer["found"] == [
        f"stream {stream}: 3 messages, {answer['found'][0].rsplit(', ', 1)[1]}",
        f"subject {stream.lower()}.a: 2 messages",
    ]


def test_nats_says_a_stream_that_does_not_exist_yet_is_waited_for():
    # A run waits for the stream to be made (the enumerator's discovery): the test says so,
    # where it failed with nats-py's NotFoundError as the error of source.type.
    stream = f"T{uuid.uuid4().hex[:10].upper()}"

    answer = source_test(
        {"type": "nats_jetstream", "servers": NATS_URL, "stream": stream}, format_table={"type": "raw"}
    )

    assert answer["ok"], answer
    assert answer["found"] == [f"no stream {stream} on {NATS_URL} yet: a run waits for it to be made"]


def test_brokers_that_do_not_answer_in_time_are_named_by_their_address_field():
    # Nothing listens on the port: the test's time limit (1 s) passes before librdkafka gives
    # up. It named source.type ("the kafka source did not answer").
    port = free_port()

    answer = source_test(
        {"type": "kafka", "bootstrap_servers": f"127.0.0.1:{port}", "topics": ["t"]},
        format_table={"type": "json"},
        timeout_s=1,
    )

    assert answer == {
        "section": "source",
        "type": "kafka",
        "ok": False,
        "field": "source.bootstrap_servers",
        "error": f"the kafka source at 127.0.0.1:{port} did not answer within 1 s",
    }


@pytest.fixture(scope="module")
def kafka():
    cluster = MockKafkaCluster()
    yield cluster
    cluster.kill()


def test_kafka_says_each_partition_and_its_records(kafka):
    topic = f"t{uuid.uuid4().hex[:8]}"
    kafka.make_topic(topic)  # 4 partitions
    producer = Producer({"bootstrap.servers": kafka.bootstrap})
    for i in range(3):
        producer.produce(topic, b'{"id": 1}', partition=i % 2)
    producer.flush(10)

    answer = source_test(
        {"type": "kafka", "bootstrap_servers": kafka.bootstrap, "topics": [topic]},
        format_table={"type": "json"},
    )

    assert answer["found"] == [
        "4 partitions found, 3 records to read",
        f"{topic}:0: from 0, 2 records to read",
        f"{topic}:1: from 0, 1 records to read",
        f"{topic}:2: from 0, 0 records to read",
        f"{topic}:3: from 0, 0 records to read",
    ], answer


def test_s3_says_the_objects_matched_and_their_total_size(tmp_path):
    with PrivateMotoServer() as moto:
        bucket = f"t-{uuid.uuid4().hex[:12]}"
        s3 = moto.client("s3")
        s3.create_bucket(Bucket=bucket)
        s3.put_object(Bucket=bucket, Key="in/a.csv", Body=b"n\n1\n")
        s3.put_object(Bucket=bucket, Key="in/b.csv", Body=b"n\n1\n2\n")
        table = {
            "type": "s3",
            "bucket": bucket,
            "prefix": "in/",
            "endpoint_url": moto.endpoint_url,
            "access_key_id": ACCESS_KEY_ID,
            "secret_access_key": SECRET_ACCESS_KEY,
        }
        answer = source_test(table)

    assert answer["ok"], answer
    assert answer["found"][0].startswith("2 files matched") and answer["found"][0].endswith("10 bytes in all")
    assert SECRET_ACCESS_KEY not in str(answer)


def test_a_granted_redis_connection_lists_only_its_streams(rds, prefix, settings):
    settings.DATAFLOW_ALLOWED_INTERNAL_ADDRESSES = ["127.0.0.1"]
    alice = UserFactory(username="alice")
    rds.xadd(f"{prefix}mine", {"n": 1})
    rds.xadd(f"other{prefix}", {"n": 1})
    connection = ConnectionFactory(key_patterns=[f"{prefix}*"], users=[alice])

    answer = connection_test(connection=connection, user=alice)

    assert answer["ok"], answer
    assert answer["found"][1:] == [f"1 streams match {prefix}*", f"{prefix}mine: 1 entries"]
    rds.delete(f"other{prefix}")
