"""The nats sink against a real NATS server: rows published once per run or epoch, whatever
attempts repeat or crash, as JSON messages a plain consumer reads back."""

from __future__ import annotations

import asyncio
import json

import nats
import pyarrow as pa
import pytest
from nats.js.api import StreamConfig

from connectors.nats.connection import shared_client
from connectors.nats.sink import NatsSink, publish_rows
from source_support.errors import ConfigError
from tests.connectors.nats.conftest import nats_url


def _table(n: int) -> pa.Table:
    return pa.table(
        {"id": list(range(n)), "name": [f"n{i}" for i in range(n)], "route": ["a", "b"] * (n // 2)}
    )


def _messages(stream: str) -> list[tuple[str, dict, str]]:
    async def read() -> list[tuple[str, dict, str]]:
        nc = await nats.connect(nats_url())
        js = nc.jetstream()
        info = await js.stream_info(stream)
        got = []
        for seq in range(info.state.first_seq, info.state.last_seq + 1) if info.state.messages else []:
            msg = await js.get_msg(stream, seq)
            got.append((msg.subject, json.loads(msg.data), (msg.headers or {}).get("Nats-Msg-Id", "")))
        await nc.close()
        return got

    return asyncio.run(read())


def _publish_all(rows: int, swap) -> bool:
    swap()
    return True


def test_a_missing_stream_is_created_with_the_duplicate_window_and_rows_arrive_once(env, stream_name):
    subject = f"{stream_name.lower()}.out"
    config = {
        "servers": nats_url(),
        "subject": subject,
        "stream": stream_name,
        "duplicate_window": "5 minutes",
    }

    assert NatsSink.write(_table(10), config, attempt_key="r1-1", publish=_publish_all, env=env)
    # A second attempt of the same run (the first crashed after publishing) adds nothing.
    assert NatsSink.write(_table(10), config, attempt_key="r1-2", publish=_publish_all, env=env)

    got = _messages(stream_name)
    assert [body for _, body, _ in got] == _table(10).to_pylist()
    assert {s for s, _, _ in got} == {subject}
    assert [mid for _, _, mid in got] == [f"run:r1:{i}" for i in range(10)]
    info = shared_client(nats_url()).run(shared_client(nats_url()).js.stream_info(stream_name))
    assert info.config.duplicate_window == 300


def test_an_epoch_repeated_after_a_crash_half_way_adds_only_what_was_missing(env, stream_name):
    subject = f"{stream_name.lower()}.out"
    config = {"servers": nats_url(), "subject": subject, "stream": stream_name}
    client = shared_client(nats_url())
    # The crashed attempt got the first 7 rows out.
    publish_rows(client, _table(10).slice(0, 7), {**config}, "epoch:e7")

    assert NatsSink.append(_table(10), config, epoch_key="e7", publish=_publish_all, env=env)
    assert NatsSink.append(_table(10), config, epoch_key="e7", publish=_publish_all, env=env)
    assert NatsSink.append(_table(4), config, epoch_key="e8", publish=_publish_all, env=env)

    ids = [body["id"] for _, body, _ in _messages(stream_name)]
    assert ids == list(range(10)) + list(range(4))


def test_an_attempt_the_fence_refuses_publishes_nothing(env, stream_name):
    config = {"servers": nats_url(), "subject": f"{stream_name.lower()}.out", "stream": stream_name}
    asyncio.run(_make_stream(stream_name, [config["subject"]]))

    assert not NatsSink.write(
        _table(6), config, attempt_key="r9-1", publish=lambda rows, swap: False, env=env
    )

    assert _messages(stream_name) == []


def test_rows_go_to_the_subject_their_column_names(env, stream_name):
    prefix = stream_name.lower()
    asyncio.run(_make_stream(stream_name, [f"{prefix}.>"]))
    table = _table(6).append_column("subject", pa.array([f"{prefix}.{r}" for r in ["a", "b"] * 3]))
    config = {"servers": nats_url(), "subject_column": "subject", "stream": stream_name}

    assert NatsSink.write(table, config, attempt_key="r2-1", publish=_publish_all, env=env)

    got = _messages(stream_name)
    assert [(s, body["id"]) for s, body, _ in got] == [(f"{prefix}.{'ab'[i % 2]}", i) for i in range(6)]


def test_a_subject_column_into_a_missing_stream_is_refused_naming_sink_stream(env, stream_name):
    config = {"servers": nats_url(), "subject_column": "route", "stream": stream_name}
    with pytest.raises(Exception, match="sink.stream"):
        NatsSink.write(_table(2), config, attempt_key="r3-1", publish=_publish_all, env=env)


def test_a_row_without_a_subject_is_refused_naming_sink_subject_column_and_nothing_is_sent(env, stream_name):
    prefix = stream_name.lower()
    asyncio.run(_make_stream(stream_name, [f"{prefix}.>"]))
    table = _table(4).append_column("subject", pa.array([f"{prefix}.a", None, f"{prefix}.b", f"{prefix}.c"]))
    config = {"servers": nats_url(), "subject_column": "subject", "stream": stream_name}

    with pytest.raises(ConfigError, match=r"sink\.subject_column: 1 row\(s\) have no subject"):
        NatsSink.write(table, config, attempt_key="r4-1", publish=_publish_all, env=env)

    assert _messages(stream_name) == []


async def _make_stream(name: str, subjects: list[str]) -> None:
    nc = await nats.connect(nats_url())
    await nc.jetstream().add_stream(StreamConfig(name=name, subjects=subjects))
    await nc.close()
