"""A server of a test's own, in a process on a free loopback port, stopped by its pid: the
shared part of the private NATS and moto servers; and ``free_port``, the one place tests take
a loopback port from.

Ports come from a range of this pytest-xdist worker's own (``PORT_BASE + PORT_SPAN * N`` for
worker ``gwN``), below the kernel's ephemeral range (32768-60999 on Linux). A port probed
free with ``bind(0)`` is an ephemeral port: between the probe and its use, any process that
binds port 0 (a Spark driver's accumulator server, py4j, a Celery worker's connection) could
get it, and a test then reached another test's Spark (a wrong-token traceback in
tests/e2e/test_readme.py's output). Nothing binds port 0 into this range, another worker
never hands out a port of this one's, and within a worker each call hands out the next port.
"""

from __future__ import annotations

import itertools
import random
import socket
import subprocess
import time

from tests.worker_env import worker_number

#: Worker N's ports are ``PORT_BASE + PORT_SPAN * N`` up to the next worker's; the 16 workers
#: Redis's 16 databases allow end where Linux's ephemeral ports begin (32768).
PORT_BASE = 16384
PORT_SPAN = 1024


def port_range(number: int | None) -> range:
    """The ports worker ``gw<number>`` hands out (worker 0's outside xdist)."""
    start = PORT_BASE + PORT_SPAN * (number or 0)
    return range(start, start + PORT_SPAN)


def _ports():
    ports = port_range(worker_number())
    # Two pytest runs of the same worker number (two checkouts on one machine) start apart.
    first = random.randrange(len(ports))
    return itertools.cycle([*ports[first:], *ports[:first]])


_next_port = _ports()


def free_port() -> int:
    """A loopback port of this worker's range that nothing listens on or holds now, and that
    no earlier call of this process handed out (until the range has gone round). Also the
    port for a test that needs one where nothing answers: no process binds into the range
    unless a test of this worker gave it the port."""
    for _ in range(PORT_SPAN):
        port = next(_next_port)
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free loopback port in {port_range(worker_number())}")


class ServerProcess:
    """Holds the server's process; ``stop`` ends it gently, ``kill`` with SIGKILL."""

    def __init__(self) -> None:
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=20)
            self.proc = None

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def wait_listening(self, name: str, timeout_s: float = 60) -> None:
        """Returns once the server accepts connections on its port; fails naming ``name``
        if its process ends first or ``timeout_s`` pass."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            if self.proc is not None and self.proc.poll() is not None:
                raise AssertionError(f"{name} exited with {self.proc.returncode}")
            time.sleep(0.05)
        raise AssertionError(f"{name} did not listen on {self.port}")
