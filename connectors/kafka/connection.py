"""Kafka clients for the source: the bootstrap servers of a connection URL, the client
configuration they make, one metadata client per process, and the consumers readers keep
open from one time slice to the next (``keep_consumer``, ``take_consumer``).

A connection URL is ``kafka://host:9092,host2:9092`` (PLAINTEXT), ``kafka+ssl://...``
(TLS), with ``user:password@`` before the first host for SASL/PLAIN (over TLS with
``kafka+ssl``); a bare ``host:9092,host2:9092`` is PLAINTEXT.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from confluent_kafka import Consumer, KafkaError, KafkaException

from connectors.kafka.outages import broker_log
from source_support.options import mask_url_credentials

URL_SCHEMES = ("kafka://", "kafka+ssl://")
DEFAULT_PORT = 9092
#: How long a metadata or offset request waits for the brokers before it fails.
REQUEST_TIMEOUT_S = 10.0
#: How long a reader's consumer stays open after its time slice for the next slice of the
#: same reader in this process; closed after that (its run ended, or its reader went to
#: another worker).
KEPT_CONSUMER_S = 20.0


def split_url(servers: str) -> tuple[str, str, str, list[str]]:
    """(scheme, user, password, ["host:port", ...]) of a bootstrap list or URL."""
    scheme, sep, rest = servers.strip().partition("://")
    if not sep:
        scheme, rest = "kafka", servers.strip()
    user = password = ""
    if "@" in rest:
        user_info, rest = rest.rsplit("@", 1)
        user, _, password = user_info.partition(":")
    hosts = [h.strip().rstrip("/") for h in rest.split(",") if h.strip().rstrip("/")]
    return scheme, unquote(user), unquote(password), hosts


def bootstrap_list(servers: str) -> list[str]:
    """The ``host:port`` of each bootstrap server (port 9092 where none is given)."""
    return [h if _has_port(h) else f"{h}:{DEFAULT_PORT}" for h in split_url(servers)[3]]


def _has_port(host: str) -> bool:
    tail = host.rsplit("]", 1)[-1] if host.startswith("[") else host
    return ":" in tail


def mask_servers(servers: str) -> str:
    """``servers`` with its password masked."""
    return mask_url_credentials(servers) if "://" in servers else servers


def client_config(servers: str, **extra: Any) -> dict[str, Any]:
    """The librdkafka configuration of a client of ``servers``."""
    scheme, user, password, _ = split_url(servers)
    tls = scheme == "kafka+ssl"
    config: dict[str, Any] = {
        "bootstrap.servers": ",".join(bootstrap_list(servers)),
        "socket.timeout.ms": int(REQUEST_TIMEOUT_S * 1000),
        # librdkafka logs each lost connection itself; a failed request says so to the caller.
        "log.connection.close": False,
        # librdkafka's own log lines go through logging (served by the client's polls), a
        # lost broker said once per outage.
        "logger": broker_log(servers),
    }
    if user:
        config.update(
            {
                "security.protocol": "SASL_SSL" if tls else "SASL_PLAINTEXT",
                "sasl.mechanisms": "PLAIN",
                "sasl.username": user,
                "sasl.password": password,
            }
        )
    elif tls:
        config["security.protocol"] = "SSL"
    config.update(extra)
    return config


def new_consumer(servers: str, **extra: Any) -> Consumer:
    """A consumer of ``servers`` that reads only what it is assigned and commits nothing
    by itself (no group rebalancing: the enumerator assigns partitions)."""
    config = client_config(
        servers,
        **{
            "group.id": extra.pop("group_id", "adf-metadata"),
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "enable.partition.eof": False,
            # A checkpoint before the log start (records deleted by retention) is an error,
            # never a silent jump.
            "auto.offset.reset": "error",
            **extra,
        },
    )
    return Consumer(config)


def error_reason(exc: BaseException) -> str:
    """An error of confluent-kafka in words."""
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        return str(exc.args[0].str())
    return str(exc).strip() or type(exc).__name__


_shared: dict[tuple[int, str], Consumer] = {}
_shared_lock = threading.Lock()


def metadata_client(servers: str) -> Consumer:
    """One consumer per process (and per ``fork``: a child makes its own) for metadata and
    watermarks; it is never assigned anything."""
    key = (os.getpid(), servers)
    with _shared_lock:
        client = _shared.get(key)
        if client is None:
            client = _shared[key] = new_consumer(servers)
        return client


def close_metadata_clients() -> None:
    """Closes this process's metadata clients and kept consumers (a client left open at
    exit waits for its brokers)."""
    with _shared_lock:
        clients = [c for (pid, _), c in _shared.items() if pid == os.getpid()]
        _shared.clear()
    for client in clients:
        client.close()
    close_kept_consumers(older_than_s=0.0)


@dataclass
class KeptConsumer:
    """A reader's consumer kept open between two time slices, with what the reader left
    in it (its assigned partitions and the messages fetched and not yet handed out)."""

    consumer: Consumer
    #: The reader's own, handed back as it was left.
    state: Any
    kept_at: float


#: Kept consumers by (pid, servers, group, subtask): each taken by one reader at a time.
_kept: dict[tuple[int, str, str, int], KeptConsumer] = {}
_kept_lock = threading.Lock()
_sweeper: threading.Thread | None = None


def keep_consumer(servers: str, group: str, subtask: int, consumer: Consumer, state: Any) -> None:
    """Keeps ``consumer`` (and the reader's ``state``) for the next slice of reader
    ``subtask`` of ``group`` in this process, for ``KEPT_CONSUMER_S`` at most. A new
    consumer costs a connection and a fetch warm-up: a slice of a few seconds would spend
    a good part of it getting back to where the last one was."""
    global _sweeper
    kept = KeptConsumer(consumer, state, time.monotonic())
    with _kept_lock:
        replaced = _kept.pop((os.getpid(), servers, group, subtask), None)
        _kept[(os.getpid(), servers, group, subtask)] = kept
        if _sweeper is None or not _sweeper.is_alive():
            _sweeper = threading.Thread(target=_sweep, name="kafka-kept-consumers", daemon=True)
            _sweeper.start()
    if replaced is not None:
        _close_quietly(replaced.consumer)


def take_consumer(servers: str, group: str, subtask: int) -> KeptConsumer | None:
    """The consumer kept for reader ``subtask`` of ``group`` in this process, if any (it
    is no longer kept: the caller owns it)."""
    with _kept_lock:
        return _kept.pop((os.getpid(), servers, group, subtask), None)


def close_kept_consumers(*, older_than_s: float = KEPT_CONSUMER_S) -> None:
    """Closes this process's consumers kept longer than ``older_than_s``."""
    now = time.monotonic()
    with _kept_lock:
        stale = [
            key for key, kept in _kept.items() if key[0] == os.getpid() and now - kept.kept_at >= older_than_s
        ]
        closing = [_kept.pop(key).consumer for key in stale]
    for consumer in closing:
        _close_quietly(consumer)


def _sweep() -> None:
    """Closes what was kept too long, until nothing is kept."""
    global _sweeper
    while True:
        time.sleep(KEPT_CONSUMER_S / 4)
        close_kept_consumers()
        with _kept_lock:
            if not any(key[0] == os.getpid() for key in _kept):
                _sweeper = None
                return


def _close_quietly(consumer: Consumer) -> None:
    with contextlib.suppress(KafkaException, RuntimeError):  # a consumer of brokers that are gone
        consumer.close()
