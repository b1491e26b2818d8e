"""A whole flow over Redis streams, through the framework: read to a stop, land, transform."""

from __future__ import annotations

import pytest

from tests.factories import ConnectionFactory, UserFactory
from tests.helpers import read_parquet_rows, run_flow


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_a_flow_reads_every_stream_of_the_topic_up_to_latest(worker, rds, prefix, dirs):
    for i in range(30):
        rds.xadd(f"{prefix}orders:{i % 3}", {"id": i, "customer": f"c{i % 4}", "amount": i / 2})
    sink = dirs.out / "sink"
    doc = {
        "flow": {"name": f"rs-{prefix[:-1]}", "parallelism": 2, "batch_size": 7, "poll_interval_ms": 50},
        "source": {"type": "redis_streams", "streams": f"{prefix}orders:*"},
        "format": {"type": "fields", "schema": "id BIGINT, customer STRING, amount DOUBLE"},
        "transform": {"sql": "SELECT id, customer, amount FROM source"},
        "sink": {"type": "parquet", "path": str(sink)},
        "stop": {"at": "latest"},
    }

    run = run_flow(doc, timeout=240)

    assert run.status == "succeeded", run.message
    assert sorted(read_parquet_rows(sink)) == [(i, f"c{i % 4}", i / 2) for i in range(30)]
    groups = rds.xinfo_groups(f"{prefix}orders:0")
    assert [g["last-delivered-id"] for g in groups] == [rds.xrevrange(f"{prefix}orders:0", count=1)[0][0]]


@pytest.mark.slow  # over 5 s on 2 cores: not in the fast lane
@pytest.mark.django_db(transaction=True)
def test_a_flow_writes_its_result_to_a_stream_once(worker, rds, prefix, dirs):
    for i in range(12):
        rds.xadd(f"{prefix}in", {"data": f'{{"id": {i}, "name": "n{i}"}}'})
    doc = {
        "flow": {"name": f"rs2-{prefix[:-1]}", "parallelism": 1, "batch_size": 5, "poll_interval_ms": 50},
        "source": {"type": "redis_streams", "streams": f"{prefix}in", "metadata": True},
        "format": {"type": "json", "field": "data", "schema": "id BIGINT, name STRING"},
        "transform": {"sql": "SELECT id, upper(name) AS name FROM source WHERE id % 2 = 0"},
        "sink": {"type": "redis_stream", "key": f"{prefix}out"},
        "stop": {"at": "latest"},
    }

    run = run_flow(doc, timeout=240)

    assert run.status == "succeeded", run.message
    written = [{k.decode(): v.decode() for k, v in f.items()} for _, f in rds.xrange(f"{prefix}out")]
    assert sorted(written, key=lambda e: int(e["id"])) == [
        {"id": str(i), "name": f"N{i}"} for i in range(0, 12, 2)
    ]


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_alice_reads_and_writes_only_her_keys_through_her_connection(worker, rds, prefix, dirs, settings):
    settings.DATAFLOW_ALLOWED_INTERNAL_ADDRESSES = ["127.0.0.1"]  # the tests' Redis, on loopback
    alice = UserFactory(username=f"alice-{prefix[:-1]}")
    mine = ConnectionFactory(name=f"alice-{prefix[:-1]}", key_patterns=[f"{prefix}alice:*"], users=[alice])
    for i in range(20):
        rds.xadd(f"{prefix}alice:in:{i % 2}", {"id": i, "customer": "alice", "amount": i})
    for i in range(30):
        rds.xadd(f"{prefix}bob:orders", {"id": 100 + i, "customer": "bob", "amount": 1})
    doc = {
        "flow": {"name": f"alice-{prefix[:-1]}", "parallelism": 1, "batch_size": 7, "poll_interval_ms": 50},
        "source": {"type": "redis_streams", "connection": mine.name, "streams": f"{prefix}alice:in:*"},
        "format": {"type": "fields", "schema": "id BIGINT, customer STRING, amount DOUBLE"},
        "transform": {"sql": "SELECT id, customer FROM source"},
        "sink": {"type": "redis_stream", "connection": mine.name, "key": f"{prefix}alice:out"},
        "stop": {"at": "latest"},
    }

    run = run_flow(doc, owner=alice, timeout=240)

    assert run.status == "succeeded", run.message
    written = sorted(int(fields[b"id"]) for _, fields in rds.xrange(f"{prefix}alice:out"))
    assert written == list(range(20))
    assert rds.xlen(f"{prefix}bob:orders") == 30
    assert rds.xinfo_groups(f"{prefix}bob:orders") == []
