"""The whole-reply RESP2 parser gives what redis-py's own parser gives, however the
socket cuts a reply."""

from __future__ import annotations

import pytest
import redis
from redis.exceptions import ResponseError

from connectors.redis_streams.connection import connect
from connectors.redis_streams.resp import WholeReplyParser
from tests.connectors.redis_streams.conftest import redis_url

REPLY = (
    b"*5\r\n$5\r\nhello\r\n$-1\r\n:42\r\n*2\r\n*0\r\n*-1\r\n"
    b"*3\r\n+OK\r\n-WRONGTYPE Operation against a key\r\n$4\r\na\r\nb\r\n"
)
EXPECTED = [b"hello", None, 42, [[], None], [b"OK", "error", b"a\r\nb"]]


class Chunks:
    """A socket that delivers ``data`` in pieces of ``size`` bytes."""

    def __init__(self, data: bytes, size: int) -> None:
        self.pieces = [data[i : i + size] for i in range(0, len(data), size)]

    def recv(self, _: int) -> bytes:
        return self.pieces.pop(0) if self.pieces else b""


def parse(data: bytes, size: int, count: int = 1) -> list:
    parser = WholeReplyParser(65536)
    parser._sock = Chunks(data, size)
    replies = []
    for _ in range(count):
        reply = parser.read_response()
        replies.append(reply)
    return replies


@pytest.mark.parametrize("size", [1, 2, 3, 7, 64, 10_000])
def test_a_reply_cut_anywhere_parses_the_same(size):
    [reply] = parse(REPLY, size)

    assert isinstance(reply[4][1], ResponseError) and "Operation against a key" in str(reply[4][1])
    reply[4][1] = "error"
    assert reply == EXPECTED


def test_replies_of_a_pipeline_follow_each_other():
    assert parse(b"+OK\r\n:1\r\n$1\r\nx\r\n", 4, count=3) == [b"OK", 1, b"x"]


def test_a_closed_connection_is_a_connection_error():
    with pytest.raises(redis.ConnectionError):
        parse(b"*2\r\n$1\r\na\r\n", 100)


def test_a_client_with_it_works_for_every_command_the_connector_uses(prefix):
    client = connect(redis_url())
    key = f"{prefix}s"
    try:
        ids = [client.xadd(key, {"a": i, "b": "x\r\ny"}) for i in range(3)]
        pipe = client.pipeline(transaction=False)
        pipe.time()
        pipe.xinfo_stream(key)
        pipe.execute_command("XINFO", "GROUPS", key)
        pipe.get(f"{prefix}missing")
        seconds_micros, info, groups, missing = pipe.execute()
        reply = client.execute_command("XREAD", "COUNT", 10, "STREAMS", key, "0-0")
        with pytest.raises(redis.ResponseError):
            client.execute_command("XREAD", "COUNT", "x", "STREAMS", key, "0-0")
    finally:
        client.delete(key)
        client.close()

    assert len(seconds_micros) == 2 and info["length"] == 3 and groups == [] and missing is None
    assert reply == [
        [key.encode(), [[i, [b"a", str(n).encode(), b"b", b"x\r\ny"]] for n, i in enumerate(ids)]]
    ]
