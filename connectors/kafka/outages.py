"""librdkafka's log lines, without the flood of an outage: a lost broker is said once, then a
summary (how many lines, for how long) every minute while it stays away and when it answers
again (issue 25: a 6 s outage made 221 ERROR lines).

Every client of the same brokers in a process shares one ``BrokerLog`` (their ``logger``);
a request that the brokers answer (``answered``) ends an outage.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from source_support.options import mask_url_credentials

LIBRDKAFKA_LOG = logging.getLogger("connectors.kafka.librdkafka")
#: How often an outage that goes on is summed up.
SUMMARY_EVERY_S = 60.0
#: librdkafka's facilities of a lost connection or a failed request.
OUTAGE_FACILITIES = frozenset({"FAIL", "ERROR"})


class BrokerLog:
    """The ``logger`` librdkafka's clients of ``servers`` write through: lines of a lost
    broker (``OUTAGE_FACILITIES`` at error level or worse) are said once per outage and
    counted; the rest go to ``LIBRDKAFKA_LOG`` as they come."""

    def __init__(
        self,
        servers: str,
        *,
        logger: logging.Logger = LIBRDKAFKA_LOG,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.servers = mask_url_credentials(servers) if "://" in servers else servers
        self.logger = logger
        self.clock = clock
        self._lock = threading.Lock()
        #: When the outage began (``clock``), None while the brokers answer.
        self.since: float | None = None
        #: Outage lines not said since the last summary, and in the whole outage.
        self.unsaid = 0
        self.total = 0
        self.last_said = 0.0

    # What confluent-kafka calls: logger.log(level, "%s [%s] %s", facility, client, text).
    def log(self, level: int, msg: str, *args: Any, **kwargs: Any) -> None:
        facility = str(args[0]) if args else ""
        if facility in OUTAGE_FACILITIES and level >= logging.ERROR:
            self.lost(msg % args if args else msg)
            return
        self.logger.log(level, msg, *args, **kwargs)

    def lost(self, what: str) -> None:
        """A line of a lost broker (or a failed request): said if it starts an outage,
        counted otherwise (and summed up every ``SUMMARY_EVERY_S``)."""
        now = self.clock()
        with self._lock:
            self.total += 1
            if self.since is None:
                self.since, self.last_said, self.unsaid = now, now, 0
                self.logger.error(
                    "Kafka at %s: %s (the brokers are lost: said once, then summed up every "
                    "%.0f s and when they answer again)",
                    self.servers,
                    what,
                    SUMMARY_EVERY_S,
                )
                return
            self.unsaid += 1
            if now - self.last_said < SUMMARY_EVERY_S:
                return
            self.logger.error(
                "Kafka at %s still lost after %.0f s: %d more error(s), the last: %s",
                self.servers,
                now - self.since,
                self.unsaid,
                what,
            )
            self.last_said, self.unsaid = now, 0

    def answered(self) -> None:
        """The brokers answered a request: an outage, if one was going on, is over."""
        now = self.clock()
        with self._lock:
            if self.since is None:
                return
            self.logger.warning(
                "Kafka at %s answers again after %.0f s (%d error(s) while it was lost)",
                self.servers,
                now - self.since,
                self.total,
            )
            self.since, self.unsaid, self.total = None, 0, 0


_logs: dict[str, BrokerLog] = {}
_logs_lock = threading.Lock()


def broker_log(servers: str) -> BrokerLog:
    """The one ``BrokerLog`` of ``servers`` in this process."""
    with _logs_lock:
        found = _logs.get(servers)
        if found is None:
            found = _logs[servers] = BrokerLog(servers)
        return found
