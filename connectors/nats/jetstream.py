"""What the source asks of JetStream: a stream's state, the flow's consumer of a subject
filter set to start after a checkpoint, and where a time falls in a stream."""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime

import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, ConsumerInfo, DeliverPolicy, StreamInfo

#: A message not acknowledged this long is sent again; the reader reads by position and
#: takes a redelivery as a sign to set its consumer up again, so it only must be longer
#: than a commit usually takes.
ACK_WAIT_S = 600.0
#: Errors after which a request is tried again later (the server restarts, a leader moves).
TRANSIENT = (
    nats.errors.TimeoutError,
    nats.errors.ConnectionClosedError,
    nats.errors.NoRespondersError,
    nats.errors.ConnectionReconnectingError,
    nats.errors.StaleConnectionError,
    nats.errors.NoServersError,
    nats.js.errors.ServiceUnavailableError,
    TimeoutError,
    ConnectionError,
    OSError,
)
_NAME_CHARS = re.compile(r"[^A-Za-z0-9_-]")
#: The subject prefix of JetStream's API (no domain: the client's JetStream is made without one).
API_PREFIX = "$JS.API"


def consumer_name(flow: str, subject: str) -> str:
    """The durable consumer of ``flow`` for ``subject``: named after the flow, one per filter."""
    digest = hashlib.sha256(subject.encode()).hexdigest()[:12]
    return f"{_NAME_CHARS.sub('_', flow)[:100] or 'adf'}_{digest}"


async def stream_info(js: JetStreamContext, stream: str) -> StreamInfo | None:
    """The stream's config and state; None if there is no such stream."""
    try:
        return await js.stream_info(stream)
    except nats.js.errors.NotFoundError:
        return None


@dataclass(frozen=True)
class StreamSeen:
    """A stream as one look saw it: its config and state, and when it was created (which
    tells one stream of a name from the next: nats-py's ``StreamInfo`` drops it)."""

    info: StreamInfo
    created: str

    @property
    def first_seq(self) -> int:
        return self.info.state.first_seq

    @property
    def last_seq(self) -> int:
        return self.info.state.last_seq


async def stream_seen(nc: Client, stream: str, timeout_s: float) -> StreamSeen | None:
    """The stream's info and creation time; None if there is no such stream."""
    reply = await nc.request(f"{API_PREFIX}.STREAM.INFO.{stream}", b"", timeout=timeout_s)
    data = json.loads(reply.data)
    error = data.get("error")
    if error is not None:
        if error.get("code") == 404:
            return None
        nats.js.errors.APIError.from_error(error)  # raises the error's class
    return StreamSeen(StreamInfo.from_response(data), str(data.get("created", "")))


@dataclass(frozen=True)
class ConsumerAt:
    """The flow's consumer of a filter, ready to deliver the message after ``position``;
    ``delivered`` is the consumer sequence of the last message it delivered."""

    name: str
    delivered: int
    reused: bool


async def consumer_after(
    js: JetStreamContext, stream: str, name: str, subject: str, position: int
) -> ConsumerAt:
    """The consumer ``name`` delivering ``subject`` from the message after ``position``.

    A checkpoint wins over the consumer's own state: the consumer is reused only when it
    stands exactly at ``position`` (it delivered up to it, nothing unacknowledged, no pull
    request waiting from a reader that is gone); otherwise it is made again there, which
    also ends whatever an older reader still had in flight on it."""
    try:
        info: ConsumerInfo | None = await js.consumer_info(stream, name)
    except nats.js.errors.NotFoundError:
        info = None
    if info is not None and _stands_at(info, subject, position):
        return ConsumerAt(name, info.delivered.consumer_seq if info.delivered else 0, True)
    if info is not None:
        await js.delete_consumer(stream, name)
    made = await js.add_consumer(  # pyright: ignore[reportUnknownMemberType] - **params untyped
        stream,
        ConsumerConfig(
            durable_name=name,
            filter_subject=subject,
            deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
            opt_start_seq=position + 1,
            ack_policy=AckPolicy.ALL,
            ack_wait=ACK_WAIT_S,
            max_ack_pending=-1,
        ),
    )
    return ConsumerAt(name, made.delivered.consumer_seq if made.delivered else 0, False)


def _stands_at(info: ConsumerInfo, subject: str, position: int) -> bool:
    config, delivered = info.config, info.delivered
    return (
        config.filter_subject == subject
        and config.ack_policy == AckPolicy.ALL
        and delivered is not None
        and delivered.stream_seq == position
        and not info.num_ack_pending
        and not info.num_redelivered
        and not info.num_waiting
    )


async def delete_consumer(js: JetStreamContext, stream: str, name: str) -> None:
    with contextlib.suppress(nats.js.errors.NotFoundError):
        await js.delete_consumer(stream, name)


async def position_before_time(js: JetStreamContext, stream: str, subject: str, ms: int) -> int:
    """The stream sequence just before the first message of ``subject`` at or after ``ms``
    (the stream's last sequence if there is none): an ephemeral consumer started by
    time tells, by the first message it delivers."""
    sub = await js.pull_subscribe(
        subject,
        stream=stream,
        config=ConsumerConfig(
            deliver_policy=DeliverPolicy.BY_START_TIME,
            opt_start_time=_iso(ms),  # pyright: ignore[reportArgumentType] - sent as given: RFC 3339
            ack_policy=AckPolicy.NONE,
            inactive_threshold=30.0,
        ),
    )
    try:
        try:
            first = (await sub.fetch(1, timeout=1.0))[0]
            return first.metadata.sequence.stream - 1
        except nats.errors.TimeoutError:
            info = await js.stream_info(stream)
            return info.state.last_seq
    finally:
        await sub.unsubscribe()


def _iso(ms: int) -> str:
    seconds, rest = divmod(ms, 1000)
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S") + f".{rest:03d}Z"
