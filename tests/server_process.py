"""A server of a test's own, in a process on a free loopback port, stopped by its pid: the
shared part of the private NATS and moto servers."""

from __future__ import annotations

import socket
import subprocess
import time


def free_port() -> int:
    """A loopback port nothing listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


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

    def wait_listening(self, name: str, timeout_s: float = 20) -> None:
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
