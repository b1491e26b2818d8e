"""The redis_stream sink: rows become entries once per run or batch, whatever crashes."""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import replace
from decimal import Decimal

import pyarrow as pa
import pytest

from connectors.redis_streams import sink
from connectors.redis_streams.sink import RedisStreamSink, StreamTarget, append_batch
from source_support.connections import ConnectionTarget
from source_support.errors import ConfigError


def entries(rds, key: str) -> list[dict[str, str]]:
    return [{k.decode(): v.decode() for k, v in fields.items()} for _, fields in rds.xrange(key)]


def rows(count: int, first: int = 0) -> pa.Table:
    return pa.table(
        {"id": pa.array(range(first, first + count), pa.int64()), "name": [f"n{i}" for i in range(count)]}
    )


def test_each_row_becomes_an_entry_of_text_values_without_its_nulls(rds, prefix, env):
    table = pa.table(
        {
            "id": pa.array([1, 2], pa.int64()),
            "amount": pa.array([1.5, None], pa.float64()),
            "ok": [True, False],
            "at": pa.array([dt.datetime(2024, 1, 1, 12, tzinfo=dt.UTC), None], pa.timestamp("us", tz="UTC")),
            "day": pa.array([dt.date(2024, 1, 2), None]),
            "price": pa.array([Decimal("1.20"), None], pa.decimal128(6, 2)),
            "tags": pa.array([["a", "b"], None], pa.list_(pa.string())),
            "who": pa.array([{"name": "x"}, None], pa.struct([("name", pa.string())])),
        }
    )

    written = append_batch(table, {"key": f"{prefix}out"}, batch_key=f"{prefix}b1", env=env)

    assert written == 2
    first, second = entries(rds, f"{prefix}out")
    assert first == {
        "id": "1",
        "amount": "1.5",
        "ok": "true",
        "at": "2024-01-01T12:00:00.000000Z",
        "day": "2024-01-02",
        "price": "1.20",
        "tags": '["a", "b"]',
        "who": '{"name": "x"}',
    }
    assert second == {"id": "2", "ok": "false"}
    assert json.loads(first["tags"]) == ["a", "b"]


def test_a_row_of_nulls_is_an_entry_with_its_first_column_empty(rds, prefix, env):
    table = pa.table({"a": pa.array([None], pa.int64()), "b": pa.array([None], pa.string())})

    append_batch(table, {"key": f"{prefix}out"}, batch_key=f"{prefix}b1", env=env)

    assert entries(rds, f"{prefix}out") == [{"a": ""}]


def test_the_same_batch_twice_is_written_once(rds, prefix, env):
    config = {"key": f"{prefix}out"}

    assert append_batch(rows(3), config, batch_key=f"{prefix}b1", env=env) == 3
    assert append_batch(rows(3), config, batch_key=f"{prefix}b1", env=env) == 0
    assert append_batch(rows(2, 10), config, batch_key=f"{prefix}b2", env=env) == 2

    assert [e["id"] for e in entries(rds, f"{prefix}out")] == ["0", "1", "2", "10", "11"]
    assert not list(rds.scan_iter(match=f"adf:sink:staging:{prefix}*"))  # staging streams are gone


def test_a_batch_that_died_half_written_is_finished_by_its_replay(rds, prefix, env, monkeypatch):
    monkeypatch.setattr(sink, "CHUNK_ROWS", 4)
    config = {"key": f"{prefix}out"}
    target = StreamTarget(rds, config, marker=f"batch:{prefix}b1")
    staging = target.stage(rows(10), f"{prefix}b1")
    target._claim(staging)
    target._move_chunk(staging)  # then the process dies

    assert len(entries(rds, f"{prefix}out")) == 4
    assert append_batch(rows(10, 100), config, batch_key=f"{prefix}b1", env=env) == 6

    assert [e["id"] for e in entries(rds, f"{prefix}out")] == [str(i) for i in range(10)]


def test_maxlen_trims_the_stream_approximately(rds, prefix, env):
    config = {"key": f"{prefix}out", "maxlen": 10}

    append_batch(rows(1000), config, batch_key=f"{prefix}b1", env=env)

    assert 10 <= rds.xlen(f"{prefix}out") < 1000
    assert entries(rds, f"{prefix}out")[-1]["id"] == "999"


def published(rows_seen: list[int]):
    def publish(staged_rows: int, swap) -> bool:
        rows_seen.append(staged_rows)
        swap()
        return True

    return publish


def test_write_publishes_through_the_fence_once_per_run(rds, prefix, env):
    config = {"key": f"{prefix}out"}
    seen: list[int] = []

    assert RedisStreamSink.write(
        rows(3), config, attempt_key=f"{prefix}run-1", publish=published(seen), env=env
    )
    assert RedisStreamSink.write(
        rows(3), config, attempt_key=f"{prefix}run-2", publish=published(seen), env=env
    )

    assert seen == [3, 3]
    assert len(entries(rds, f"{prefix}out")) == 3  # the second attempt of the run added nothing
    assert not list(rds.scan_iter(match=f"adf:sink:staging:{prefix}*"))


def test_a_stale_attempt_writes_nothing(rds, prefix, env):
    def refuse(staged_rows: int, swap) -> bool:
        return False

    assert not RedisStreamSink.write(
        rows(3), {"key": f"{prefix}out"}, attempt_key=f"{prefix}run-1", publish=refuse, env=env
    )

    assert not rds.exists(f"{prefix}out")
    assert not list(rds.scan_iter(match=f"adf:sink:staging:{prefix}*"))


def test_an_attempt_that_died_while_publishing_is_finished_by_the_next(rds, prefix, env, monkeypatch):
    monkeypatch.setattr(sink, "CHUNK_ROWS", 4)
    config = {"key": f"{prefix}out"}

    def die_after_one_chunk(staged_rows: int, swap) -> bool:
        original = StreamTarget._move_chunk
        calls = []

        def move_then_die(self, staging):
            if calls:
                raise ConnectionError("worker lost")
            calls.append(1)
            return original(self, staging)

        monkeypatch.setattr(StreamTarget, "_move_chunk", move_then_die)
        try:
            swap()
        finally:
            monkeypatch.setattr(StreamTarget, "_move_chunk", original)
        return True

    with pytest.raises(ConnectionError):
        RedisStreamSink.write(
            rows(10), config, attempt_key=f"{prefix}run-1", publish=die_after_one_chunk, env=env
        )
    assert len(entries(rds, f"{prefix}out")) == 4

    # The next attempt's query gave other rows: the first attempt's staged rows are the ones published.
    RedisStreamSink.write(rows(10, 50), config, attempt_key=f"{prefix}run-2", publish=published([]), env=env)

    assert [e["id"] for e in entries(rds, f"{prefix}out")] == [str(i) for i in range(10)]


@pytest.mark.slow  # over 5 s on 2 cores: not in the fast lane
@pytest.mark.django_db
def test_a_spark_dataframe_is_written(rds, prefix, env):
    from dataflow.spark.session import spark_job

    with spark_job() as spark:
        df = spark.sql("SELECT id, CAST(id * 2 AS STRING) AS doubled FROM range(5)")
        seen: list[int] = []
        RedisStreamSink.write(
            df, {"key": f"{prefix}out"}, attempt_key=f"{prefix}run-1", publish=published(seen), env=env
        )

    assert seen == [5]
    assert sorted(int(e["doubled"]) for e in entries(rds, f"{prefix}out")) == [0, 2, 4, 6, 8]


def test_an_epoch_of_a_streaming_transform_is_appended_once(rds, prefix, env):
    config = {"key": f"{prefix}out"}
    seen: list[int] = []

    for _ in range(2):
        assert RedisStreamSink.append(
            rows(3), config, epoch_key=f"{prefix}run-7", publish=published(seen), env=env
        )
    RedisStreamSink.append(rows(2, 10), config, epoch_key=f"{prefix}run-8", publish=published(seen), env=env)

    assert [e["id"] for e in entries(rds, f"{prefix}out")] == ["0", "1", "2", "10", "11"]
    assert not list(rds.scan_iter(match=f"adf:sink:staging:{prefix}*"))


def test_a_sink_key_outside_its_connections_patterns_is_refused_before_writing(rds, prefix, env):
    connection = ConnectionTarget("alice-redis", "redis", env.redis_url, key_patterns=(f"{prefix}alice:*",))
    narrowed = replace(env, connections={"alice-redis": connection})
    rds.xadd(f"{prefix}bob:orders", {"id": 0})

    with pytest.raises(ConfigError) as refused:
        append_batch(
            rows(3),
            {"key": f"{prefix}bob:orders", "connection": "alice-redis", "maxlen": 1},
            batch_key=f"{prefix}b",
            env=narrowed,
        )

    assert refused.value.field == "sink.key"
    assert rds.xlen(f"{prefix}bob:orders") == 1
