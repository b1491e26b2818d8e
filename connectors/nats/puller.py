"""A pull consumer read as a flow of deliveries, without waiting on each pull request.

nats-py's ``fetch`` waits until its request has delivered the whole batch or expired, so a
filter that gets messages at a steady rate is read once per expiry. A ``Puller`` keeps one
pull request outstanding on its own inbox and hands out what has arrived at once; the next
request goes out as soon as the last is answered in full or ends (the server's 404, 408 or
409), and while the reader lands what it took, the next messages arrive.

Its deliveries go straight from the client's parser to the puller (``direct_deliveries``):
nats-py would queue each message for its subscription's task, which then awaits the
callback; that hop, not the reading, was a third of the NATS client's time in the bench.
"""

from __future__ import annotations

import asyncio
import json
import time
import weakref
from collections import deque
from collections.abc import Awaitable, Callable

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js import JetStreamContext

#: Statuses that end a pull request: no messages (404), expired (408), and the 409s
#: (a limit reached, the consumer deleted or changed).
REQUEST_ENDED = ("404", "408", "409")
#: A request unanswered this long past its expiry was lost (the server restarted): the
#: puller asks again.
LOST_AFTER_S = 2.0


class Puller:
    """Deliveries of consumer ``consumer`` of ``stream``, ``batch`` at a time."""

    def __init__(self, nc: Client, stream: str, consumer: str, *, batch: int, wait_s: float) -> None:
        self.nc, self.batch, self.wait_s = nc, batch, wait_s
        self.next_subject = f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{consumer}"
        self.inbox = nc.new_inbox()
        self.buffer: deque[Msg] = deque()
        self.arrived = asyncio.Event()
        #: Messages the outstanding request may still deliver (0: none is outstanding).
        self.outstanding = 0
        self.requested_at = 0.0
        #: The consumer went away (deleted, changed): it must be set up again.
        self.broken = ""
        self.subscription: Subscription | None = None

    async def start(self) -> None:
        # nats-py leaves subscribe()'s ``future`` untyped.
        self.subscription = await self.nc.subscribe(self.inbox, cb=self._delivered)  # pyright: ignore[reportUnknownMemberType]
        direct_deliveries(self.nc)[self.subscription._id] = self._delivered  # pyright: ignore[reportPrivateUsage]
        await self._request()

    async def stop(self) -> None:
        subscription, self.subscription = self.subscription, None
        if subscription is not None:
            direct_deliveries(self.nc).pop(subscription._id, None)  # pyright: ignore[reportPrivateUsage]
            await subscription.unsubscribe()

    def take(self, count: int) -> list[Msg]:
        """Up to ``count`` messages that arrived, in delivery order."""
        taken = [self.buffer.popleft() for _ in range(min(count, len(self.buffer)))]
        if not self.buffer:
            self.arrived.clear()
        return taken

    async def keep_asking(self) -> None:
        """Sends the next request where none is outstanding (the buffer had been full) or
        the outstanding one was lost with a server that went away."""
        if self.broken or self.subscription is None:
            return
        lost = self.outstanding and time.monotonic() - self.requested_at > self.wait_s + LOST_AFTER_S
        if (not self.outstanding or lost) and len(self.buffer) < self.batch:
            await self._request()

    async def _request(self) -> None:
        self.outstanding = self.batch
        self.requested_at = time.monotonic()
        request = {"batch": self.batch, "expires": int(self.wait_s * 1e9)}
        await self.nc.publish(self.next_subject, json.dumps(request).encode(), reply=self.inbox)

    async def _delivered(self, msg: Msg) -> None:
        status = JetStreamContext.is_status_msg(msg)
        if status is None:
            self.buffer.append(msg)
            self.outstanding -= 1
        elif status in REQUEST_ENDED:
            self.outstanding = 0
            description = (msg.headers or {}).get("Description", "")
            if status == "409" and "Consumer" in description:
                self.broken = description
        if not self.outstanding and not self.broken and len(self.buffer) < self.batch:
            await self._request()
        self.arrived.set()


Deliver = Callable[[Msg], Awaitable[None]]
_routes: weakref.WeakKeyDictionary[Client, dict[int, Deliver]] = weakref.WeakKeyDictionary()


def direct_deliveries(nc: Client) -> dict[int, Deliver]:
    """The subscriptions of ``nc`` (by sid) whose messages its parser hands to their
    callback at once, in the order they arrive, without nats-py's queue and task per
    subscription. Made once per client: it wraps the client's ``_process_msg`` (nats-py
    2.11, pinned), which the parser calls for each message; any other subscription's
    messages go on through it."""
    routes = _routes.get(nc)
    if routes is not None:
        return routes
    routes = _routes[nc] = {}
    through_nats_py = nc._process_msg  # pyright: ignore[reportPrivateUsage]

    # nats-py annotates ``headers`` as bytes; its parser passes None for a message without.
    async def process_msg(sid: int, subject: bytes, reply: bytes, data: bytes, headers: bytes) -> None:
        deliver = routes.get(sid)
        if deliver is None:
            return await through_nats_py(sid, subject, reply, data, headers)
        try:
            parsed = await nc._process_headers(headers) if headers else None  # pyright: ignore[reportPrivateUsage, reportUnknownMemberType]
            await deliver(nc._build_message(sid, subject, reply, data, parsed))  # pyright: ignore[reportPrivateUsage]
        except Exception as exc:  # noqa: BLE001 - as nats-py treats a callback's error: said, not fatal
            await nc._error_cb(exc)  # pyright: ignore[reportPrivateUsage]

    nc._process_msg = process_msg  # pyright: ignore[reportAttributeAccessIssue, reportPrivateUsage]
    return routes
