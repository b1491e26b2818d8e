"""The puller against a real NATS server: its deliveries go from the client's parser
straight to it, in stream order, messages with headers among them, and a pull request's
end (the server's 408) still makes it ask again."""

from __future__ import annotations

import asyncio

import nats
from nats.js.api import AckPolicy, ConsumerConfig

from connectors.nats.puller import Puller
from tests.connectors.nats.conftest import nats_url
from tests.connectors.nats.test_reader import stream  # noqa: F401 - the fixture


async def _pull_all(stream_name: str, subject: str, count: int) -> tuple[list[int], int, int]:
    nc = await nats.connect(nats_url())
    try:
        js = nc.jetstream()
        await js.add_consumer(
            stream_name,
            ConsumerConfig(durable_name="puller", filter_subject=subject, ack_policy=AckPolicy.ALL),
        )
        # A batch of 3 and a short expiry: requests end full and by expiry (408) in turn.
        puller = Puller(nc, stream_name, "puller", batch=3, wait_s=0.2)
        await puller.start()
        seqs: list[int] = []
        while len(seqs) < count:
            await puller.arrived.wait()
            seqs += [m.metadata.sequence.stream for m in puller.take(10)]
            await puller.keep_asking()
        assert puller.subscription is not None
        queued_by_nats_py = puller.subscription.delivered  # what nats-py's own path counted
        await asyncio.wait_for(puller.arrived.wait(), timeout=10)  # the last request's 408
        after_end = puller.outstanding
        await puller.stop()
        return seqs, queued_by_nats_py, after_end
    finally:
        await nc.close()


def test_deliveries_reach_the_puller_from_the_parser_in_stream_order(stream):  # noqa: F811
    expected = []
    for i in range(10):
        expected += stream.orders("a", [i])
        if i % 3 == 0:  # a message published with headers (a de-duplication id)
            ack = stream.run(
                stream.js.publish(stream.subject("a"), b'{"id": -1}', headers={"Nats-Msg-Id": f"m{i}"})
            )
            expected.append(ack.seq)
        stream.orders("b", [100 + i])

    seqs, queued_by_nats_py, after_end = asyncio.run(_pull_all(stream.name, stream.subject("a"), 14))

    assert seqs == expected, "each once, in stream order, with headers or without"
    # Without the direct route nats-py counts each message as it queues it for the
    # subscription's task; with it, none went that way.
    assert queued_by_nats_py == 0
    assert after_end == 3, "a request ended by the server (408) is followed by the next one"
