"""A stream that is not the one its split read: deleted and created again under its key,
or lost with a Redis server that restarted empty (issue 13, B8 and B9). The old split
ends, what it had not read is reported as lost (its split fails naming the range, or a
dead letter with skip_errors), and the key's new stream is the split's next generation.

The restarts use a redis-server of the test's own, without persistence, of each major
version a source can be here (7, and the embedded 6.2 that has no ``entries-added``).
"""

from __future__ import annotations

from typing import NamedTuple

import pytest

from connectors.redis_streams.reader import STREAM_REPLACED
from connectors.redis_streams.split import StreamSplit, StreamSplitSerializer, decode_position, encode_id
from source_support.api import SourceEvent
from source_support.errors import SplitFailed
from tests.connectors.redis_streams.conftest import build_source
from tests.connectors.redis_streams.test_enumerator import owners, tick
from tests.redis_server import PrivateRedis, server_binary
from tests.source_support.fakes import RecordingContext, RecordingReaderContext


def orders(client, key: str, count: int, first: int = 0, *, ids=None) -> list[bytes]:
    return [
        client.xadd(key, {"id": i, "customer": f"c{i}", "amount": i / 2}, id=ids[i - first] if ids else "*")
        for i in range(first, first + count)
    ]


def reader_of(env, source: dict, *, fails_split=False, flow_name="flow"):
    context = RecordingReaderContext(fails_split=fails_split)
    source = build_source(env, source, flow_name=flow_name)
    return source.create_reader(context).split_reader, context


def read_all(reader) -> list:
    batches = []
    while got := reader.fetch(100, 0):
        batches += got
    return batches


def commit(reader, batches) -> None:
    """What the runtime does once the batches are committed."""
    positions = {}
    for batch in batches:
        positions[batch.split_id] = batch.end.position
    reader.notify_checkpoint_complete(positions)


def checked(reader, split_id: str):
    reader.streams[split_id].next_check = 0
    return reader.fetch(100, 0)


@pytest.fixture(params=["7", "6"])
def empty_on_restart(request, tmp_path):
    """A redis-server that forgets everything when it restarts, of Redis 7 and of 6.2."""
    server = PrivateRedis(tmp_path / "redis", binary=server_binary(request.param), persist=False)
    server.start()
    yield server
    server.kill()


@pytest.fixture(params=["7", "6"])
def either_redis(request, tmp_path):
    """A redis-server of the test's own, of Redis 7 and of 6.2 (no ``entries-added``)."""
    server = PrivateRedis(tmp_path / "redis", binary=server_binary(request.param), persist=False)
    server.start()
    client = server.client()
    yield server.url, client
    client.close()
    server.kill()


def test_a_caught_up_stream_deleted_and_created_again_is_read_as_its_next_generation(env, either_redis):
    url, rds = either_redis
    key = "o"
    ids = orders(rds, key, 5)
    reader, context = reader_of(env, {"streams": key, "url": url})
    reader.handle_splits_changes([StreamSplit(key, 0)], [])
    commit(reader, read_all(reader))
    rds.delete(key)
    orders(rds, key, 3, 100, ids=["1-1", "1-2", "1-3"])  # below the checkpoint

    [batch] = checked(reader, key)

    assert batch.finished and batch.records.num_rows == 0 and batch.bad_records == []
    assert batch.end.position == encode_id(ids[-1])
    assert batch.note.startswith(f"stream {key} was deleted and created again")
    assert "every entry up to" in batch.note and "none was seen after it" in batch.note
    assert "generation 2" in batch.note
    assert context.events == []  # only once the end of the old split is committed
    commit(reader, [batch])
    [event] = context.events
    assert (event.kind, event.payload) == (STREAM_REPLACED, {"key": key, "generation": 0, "exists": True})


def _read_then_created_again(env, url: str, rds, key: str):
    """A reader that read and committed the 5 entries of stream ``key``, which was then
    deleted and created again with 8 entries of later ids (more than were read: Redis 7's
    count of entries added does not tell them apart)."""
    orders(rds, key, 5)
    reader, _ = reader_of(env, {"streams": key, "url": url})
    reader.handle_splits_changes([StreamSplit(key, 0)], [])
    commit(reader, read_all(reader))
    rds.delete(key)
    orders(rds, key, 8, 100)
    return reader


def test_a_stream_created_again_with_later_ids_is_told_by_its_missing_group(env, either_redis):
    """Ids made by the server after the deletion are above the checkpoint: the consumer
    group the reader made, which went with the old stream, tells them apart."""
    url, rds = either_redis
    key = "o"
    reader = _read_then_created_again(env, url, rds, key)

    [batch] = checked(reader, key)

    assert batch.finished and batch.records.num_rows == 0 and batch.bad_records == []
    assert "consumer group is gone" in batch.note


def test_unread_entries_of_a_replaced_stream_are_a_dead_letter_naming_them(rds, prefix, env):
    key = f"{prefix}o"
    ids = orders(rds, key, 6)
    reader, _ = reader_of(env, {"streams": key})
    reader.handle_splits_changes([StreamSplit(key, 0)], [])
    first = reader.fetch(2, 0)
    commit(reader, first)
    rds.delete(key)
    orders(rds, key, 3, 100, ids=["1-1", "1-2", "1-3"])

    [batch] = checked(reader, key)

    [letter] = batch.bad_records
    at = decode_position(encode_id(ids[1]))
    assert letter.position == encode_id(ids[1])
    assert letter.reason == f"4 entries after {at} up to {ids[-1].decode()} were not read and are lost"
    assert batch.finished and letter.reason in batch.note


def test_unread_entries_of_a_replaced_stream_fail_the_split_without_skip_errors(rds, prefix, env):
    key = f"{prefix}o"
    ids = orders(rds, key, 6)
    reader, context = reader_of(env, {"streams": key}, fails_split=True)
    reader.handle_splits_changes([StreamSplit(key, 0)], [])
    commit(reader, reader.fetch(2, 0))
    rds.delete(key)
    orders(rds, key, 3, 100, ids=["1-1", "1-2", "1-3"])

    with pytest.raises(SplitFailed) as failed:
        checked(reader, key)

    assert failed.value.split_id == key
    assert f"up to {ids[-1].decode()} were not read and are lost" in str(failed.value)
    assert "set skip_errors" in str(failed.value)
    assert context.events == []


def test_a_new_generation_is_its_own_split_read_from_its_start(rds, prefix, env):
    key = f"{prefix}o"
    orders(rds, key, 3, ids=["1-1", "1-2", "1-3"])
    split = StreamSplit(key, 0, generation=1)
    reader, _ = reader_of(env, {"streams": key})
    reader.handle_splits_changes([split], [])

    [batch] = reader.fetch(100, 0)

    assert split.split_id == f"{key} (generation 2)" == batch.split_id
    assert batch.records.column("id").to_pylist() == [0, 1, 2]
    serializer = StreamSplitSerializer()
    assert serializer.deserialize(serializer.serialize(split)) == split
    assert serializer.deserialize({"key": key, "position": 7, "stop_position": None}) == StreamSplit(key, 7)


class Restarted(NamedTuple):
    reader: object
    context: RecordingReaderContext
    committed: int
    old_ids: list[bytes]
    new_ids: list[bytes]


def _read_then_restarted_empty(env, server: PrivateRedis) -> Restarted:
    """Stream "orders" of 50 entries on ``server``, whose first 20 a reader read and
    committed; then the server restarted empty and 10 entries were added to it."""
    client = server.client()
    old_ids = orders(client, "orders", 50)
    reader, context = reader_of(env, {"streams": "orders", "url": server.url})
    reader.handle_splits_changes([StreamSplit("orders", 0)], [])
    read = reader.fetch(20, 0)
    commit(reader, read)
    client.close()
    server.stop()
    server.start()
    client = server.client()
    new_ids = orders(client, "orders", 10, 50)
    client.close()
    return Restarted(reader, context, read[-1].end.position, old_ids, new_ids)


def test_a_stream_whose_server_restarted_empty_fails_its_split_naming_the_lost_range(env, empty_on_restart):
    """B8: the reader that resumes (a new one: the last had no check of the old stream to
    go by) finds the group gone and the first entry past its checkpoint."""
    server = empty_on_restart
    _, _, position, ids, new_ids = _read_then_restarted_empty(env, server)
    assert position == encode_id(ids[19])
    resumed, context = reader_of(env, {"streams": "orders", "url": server.url}, fails_split=True)
    resumed.handle_splits_changes([StreamSplit("orders", 0).at(position)], [])

    with pytest.raises(SplitFailed) as failed:
        resumed.fetch(100, 0)

    message = str(failed.value)
    assert "the source was reset" in message
    assert f"entries after {decode_position(position)} and before {new_ids[0].decode()}" in message


def test_a_server_restarted_empty_with_skip_errors_gives_a_dead_letter_and_a_new_generation(
    env, empty_on_restart
):
    """B8 with the same reader, which saw the old stream: it says which entries it lost."""
    server = empty_on_restart
    reader, context, _, ids, new_ids = _read_then_restarted_empty(env, server)

    [batch] = checked(reader, "orders")

    [letter] = batch.bad_records
    count = "30 entries" if server.major_version() >= 7 else "entries"
    assert letter.reason == (
        f"{count} after {ids[19].decode()} up to {ids[-1].decode()} were not read and are lost,"
        f" with any added after {ids[-1].decode()} and before {new_ids[0].decode()}"
    )
    assert batch.note.startswith("stream orders: the source was reset")
    commit(reader, [batch])
    assert [e.payload for e in context.events] == [{"key": "orders", "generation": 0, "exists": True}]


def test_the_enumerator_assigns_the_next_generation_of_a_replaced_stream(rds, prefix, env):
    key = f"{prefix}o"
    orders(rds, key, 1)
    source = build_source(env, {"streams": key})
    context = RecordingContext(parallelism=1)
    enumerator = tick(source, context)
    enumerator.handle_source_event(0, _replaced(key, 0, exists=True))
    enumerator = tick(source, context, enumerator)

    assert owners(context) == {key: 0, f"{key} (generation 2)": 0}
    assert context.assigned[-1][1] == StreamSplit(key, 0, generation=1)
    enumerator.handle_source_event(0, _replaced(key, 0, exists=True))  # told twice: once is enough
    assert len(context.assigned) == 2


def test_a_deleted_stream_that_comes_back_after_discovery_ran_is_read_again(rds, prefix, env):
    key = f"{prefix}o"
    orders(rds, key, 1)
    source = build_source(env, {"streams": f"{prefix}*", "discovery_interval_ms": 100})
    clock = [1000.0]
    source.clock = lambda: clock[0]
    context = RecordingContext(parallelism=1)
    enumerator = tick(source, context)
    rds.delete(key)
    enumerator.handle_source_event(0, _replaced(key, 0, exists=False))
    clock[0] += 1
    enumerator = tick(source, context, enumerator)  # a discovery that finds nothing
    assert len(context.assigned) == 1
    orders(rds, key, 2)
    clock[0] += 1

    enumerator = tick(source, context, enumerator)

    assert context.assigned[-1][1] == StreamSplit(key, 0, generation=1)


def _replaced(key: str, generation: int, *, exists: bool) -> SourceEvent:
    return SourceEvent(STREAM_REPLACED, {"key": key, "generation": generation, "exists": exists})


def test_a_read_that_meets_a_stream_created_again_takes_nothing_from_it(env, either_redis):
    """Between two checks (a second apart) the XREAD itself must not take the new stream's
    entries for the old split's: they are its next generation's, read from its start."""
    url, rds = either_redis
    key = "o"
    reader = _read_then_created_again(env, url, rds, key)
    assert reader.streams[key].next_check > 0  # no check is due: the read finds it

    [batch] = reader.fetch(100, 0)

    assert batch.finished and batch.records.num_rows == 0 and "created again" in batch.note


def test_the_lag_is_never_negative(rds, prefix, env):
    """A group whose count is of an older stream under the key (as the source left it
    before generations) is behind by nothing, not by less than nothing."""
    key = f"{prefix}o"
    orders(rds, key, 3)
    rds.execute_command("XGROUP", "CREATE", key, "flow", "$", "ENTRIESREAD", 100)
    assert rds.xinfo_groups(key)[0]["lag"] < 0  # what Redis says
    source = build_source(env, {"streams": key}, flow_name="flow")

    lags = source.split_lags({key: ({"key": key, "position": 0}, 0)})

    assert lags == {key: 0}
