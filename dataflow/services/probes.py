"""What previews and tests of a connection share: a few at once per user, and a time limit.

Both contact a system a user named and wait on it, in the web process: one user must not
hold many of its threads, and no answer may take longer than the user asked for.
"""

from __future__ import annotations

import contextlib
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import TypeVar

from django.conf import settings

from dataflow.redis_client import get_redis
from dataflow.services.errors import TooManyAtOnce
from source_support.errors import ConfigError

T = TypeVar("T")

#: Seconds a probe's slot outlives its time limit (a process that died holding it).
SLOT_GRACE_S = 60


@contextlib.contextmanager
def probe_slot(*, user, timeout_s: float) -> Iterator[None]:
    """Holds one of ``DATAFLOW_PREVIEWS_PER_USER`` slots of ``user`` (None: the operator,
    no limit) while the block runs; TooManyAtOnce when all are taken. A slot is a Redis
    key that expires on its own, so a crashed process frees it."""
    if user is None:
        yield
        return
    client = get_redis()
    token = uuid.uuid4().hex
    ttl = int(timeout_s) + SLOT_GRACE_S
    keys = [
        f"{settings.DATAFLOW_REDIS_NAMESPACE}:probe:{user.pk}:{slot}"
        for slot in range(max(1, settings.DATAFLOW_PREVIEWS_PER_USER))
    ]
    held = next((key for key in keys if client.set(key, token, nx=True, ex=ttl)), None)
    if held is None:
        raise TooManyAtOnce(
            f"{user.get_username()!r} runs {len(keys)} previews or connection tests already "
            "(DATAFLOW_PREVIEWS_PER_USER); try again when one has ended",
            retry_after_s=max(1, int(timeout_s)),
        )
    try:
        yield
    finally:
        if client.get(held) == token.encode():
            client.delete(held)


def within(timeout_s: float, work: Callable[[], T], *, field: str, what: str) -> T:
    """``work()``'s answer, or ConfigError naming ``field`` if it takes more than
    ``timeout_s`` (``what`` says what did not answer). The work goes on in its thread until
    its own socket timeouts end it; its answer is then dropped."""
    outcome: dict[str, object] = {}

    def run() -> None:
        try:
            outcome["value"] = work()
        except BaseException as exc:  # noqa: BLE001 - raised again in the caller's thread
            outcome["error"] = exc

    thread = threading.Thread(target=run, name="probe", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        raise ConfigError(field, f"{what} did not answer within {timeout_s:g} s")
    if "error" in outcome:
        raise outcome["error"]  # type: ignore[misc]
    return outcome["value"]  # type: ignore[return-value]


def bounded_number(value: object, *, field: str, default: float, most: float, least: float) -> float:
    """``value`` (None: ``default``) as a number from ``least`` to ``most``, or ConfigError
    naming ``field``."""
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(field, "must be a number")
    if not least <= value <= most:
        raise ConfigError(field, f"must be between {least:g} and {most:g}, not {value:g}")
    return float(value)
