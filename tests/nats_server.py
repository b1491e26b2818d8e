"""A nats-server of a test's own (JetStream, file storage), for tests that stop and start
their NATS: the streams survive a restart."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from tests.server_process import ServerProcess

NATS_SERVER = shutil.which("nats-server") or "/usr/sbin/nats-server"


class PrivateNatsServer(ServerProcess):
    """A nats-server with JetStream file storage in ``store``, on a free loopback port,
    stopped and started again by its pid (the store, and so the streams, survive)."""

    def __init__(self, store: Path) -> None:
        self.store = store
        super().__init__()
        self.url = f"nats://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [NATS_SERVER, "-js", "-a", "127.0.0.1", "-p", str(self.port), "-sd", str(self.store)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.wait_listening("nats-server")
