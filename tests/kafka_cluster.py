"""librdkafka's built-in mock cluster, in a process of its own: NOT a real Kafka broker.

No Kafka broker can be installed here, so the Kafka tests and the README's example run
against the mock cluster that librdkafka (inside confluent-kafka) starts when a client is
made with ``test.mock.num.brokers``: brokers in this process, listening on loopback ports,
that clients in other processes (Celery workers) reach like any broker. It keeps topics,
partitions, records, watermarks and group offsets in memory; it creates a topic (4
partitions) when a producer first names it; it does not implement CreateTopics,
CreatePartitions or looking offsets up by time. A restarted cluster is empty and on new
ports.

    python -m tests.kafka_cluster serve               # prints the bootstrap servers, runs until killed
    python -m tests.kafka_cluster start --address 127.0.0.1:9092   # in the background (pid in var/kafka-mock.pid)
    python -m tests.kafka_cluster stop

With ``--address``, a forwarder on HOST:PORT leads to the first broker, so a flow's
``bootstrap_servers`` can name a fixed address (the brokers then tell the client their own).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from confluent_kafka import Producer

BROKERS = 3
#: The partitions the mock cluster gives a topic it makes.
PARTITIONS = 4
PID_FILE = Path("var/kafka-mock.pid")
LOG_FILE = Path("var/kafka-mock.log")


def _pipe(a: socket.socket, b: socket.socket) -> None:
    with a, b:
        while True:
            ready, _, _ = select.select([a, b], [], [])
            for sock in ready:
                data = sock.recv(65536)
                if not data:
                    return
                (b if sock is a else a).sendall(data)


def forward(port: int, target: tuple[str, int], host: str = "127.0.0.1") -> None:
    """Forwards connections to ``host``:``port`` to ``target``, for ever (a daemon thread)."""
    server = socket.create_server((host, port), reuse_port=False)

    def accept() -> None:
        while True:
            client, _ = server.accept()
            upstream = socket.create_connection(target)
            threading.Thread(target=_pipe, args=(client, upstream), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()


def serve(port: int | None, host: str = "127.0.0.1") -> None:
    holder = Producer({"test.mock.num.brokers": BROKERS, "log_level": 3})
    brokers = holder.list_topics(timeout=10).brokers
    servers = [f"{b.host}:{b.port}" for _, b in sorted(brokers.items())]
    if port:
        broker, first = servers[0].rsplit(":", 1)
        forward(port, (broker, int(first)), host)
        print(f"{host}:{port}", flush=True)
    else:
        print(",".join(servers), flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    while True:
        signal.pause()


def start(port: int, host: str = "127.0.0.1") -> None:
    PID_FILE.parent.mkdir(parents=True, exist_ok=True)
    stop(quiet=True)
    with LOG_FILE.open("w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.kafka_cluster", "serve", "--address", f"{host}:{port}"],
            stdout=log,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
    deadline = time.monotonic() + 30
    while not LOG_FILE.read_text().strip():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"the mock cluster did not start (see {LOG_FILE})")
        time.sleep(0.05)
    PID_FILE.write_text(str(proc.pid))
    print(f"mock Kafka cluster ({BROKERS} brokers) on {LOG_FILE.read_text().strip()}")


def stop(*, quiet: bool = False) -> None:
    if not PID_FILE.exists():
        return
    pid = int(PID_FILE.read_text())
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    PID_FILE.unlink()
    if not quiet:
        print("mock Kafka cluster stopped")


class MockKafkaCluster:
    """The mock cluster in a child process of a test: ``bootstrap`` its brokers; ``freeze``
    stops the process (SIGSTOP: every broker stops answering, what it holds is kept) and
    ``thaw`` lets it go on; ``kill`` ends it."""

    name = "mock"

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.kafka_cluster", "serve"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            cwd=Path(__file__).resolve().parents[1],
        )
        assert self.proc.stdout is not None
        self.bootstrap = self.proc.stdout.readline().strip()
        assert self.bootstrap, "the mock cluster printed no bootstrap servers"

    def make_topic(self, topic: str, partitions: int = PARTITIONS) -> None:
        """Makes ``topic`` by naming it (the mock cluster gives it ``PARTITIONS``)."""
        assert partitions == PARTITIONS, f"the mock cluster makes topics of {PARTITIONS} partitions"
        Producer({"bootstrap.servers": self.bootstrap}).list_topics(topic, timeout=10)

    def freeze(self) -> None:
        os.kill(self.proc.pid, signal.SIGSTOP)

    def thaw(self) -> None:
        os.kill(self.proc.pid, signal.SIGCONT)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.thaw()
            self.proc.kill()
            self.proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("command", choices=("serve", "start", "stop"))
    parser.add_argument("--address", default=None, help="a fixed bootstrap HOST:PORT (a forwarder)")
    args = parser.parse_args()
    host, port = "127.0.0.1", None
    if args.address:
        given_host, _, given_port = args.address.rpartition(":")
        host, port = given_host or host, int(given_port)
    if args.command == "serve":
        serve(port, host)
    elif args.command == "start":
        start(port or 9092, host)
    else:
        stop()


if __name__ == "__main__":
    main()
