"""A PostgreSQL cluster of a test's own (``initdb`` + ``pg_ctl`` on a free port, trust auth
on loopback), which a test stops and starts again; the machine's shared server is never
restarted. Stopped by ``pg_ctl stop`` (its postmaster pid) at the end."""

from __future__ import annotations

import glob
import os
import socket
import subprocess
from pathlib import Path

import psycopg

#: The machine's PostgreSQL binaries (Debian keeps them out of the PATH).
BIN_GLOB = "/usr/lib/postgresql/*/bin"


def postgres_bin() -> Path:
    found = sorted(glob.glob(BIN_GLOB), key=lambda p: int(Path(p).parent.name))
    if not found:
        raise RuntimeError(f"no PostgreSQL binaries at {BIN_GLOB}")
    return Path(found[-1])


class PrivatePostgres:
    """One cluster in ``directory``, database ``postgres``, user ``postgres``."""

    def __init__(self, directory: Path, *, logical: bool = False) -> None:
        self.dir = directory
        #: ``wal_level = logical`` (change data capture), which the shared server lacks.
        self.logical = logical
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.url = f"postgres://postgres@127.0.0.1:{self.port}/postgres"
        self.bin = postgres_bin()
        run_as = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        self.run_as = run_as

    def _run(self, *args: str) -> None:
        subprocess.run([*self.run_as, *args], check=True, capture_output=True, timeout=120)

    def init(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        if self.run_as:
            os.chown(self.dir, *_postgres_ids())
        self._run(str(self.bin / "initdb"), "-D", str(self.dir / "data"), "-U", "postgres", "--auth=trust")

    def start(self) -> None:
        options = f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.dir}"
        if self.logical:
            options += " -c wal_level=logical -c max_replication_slots=10 -c max_wal_senders=10"
        self._run(
            str(self.bin / "pg_ctl"),
            "-D",
            str(self.dir / "data"),
            "-o",
            options,
            "-l",
            str(self.dir / "log"),
            "-w",
            "start",
        )

    def stop(self) -> None:
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.dir / "data"), "-m", "fast", "-w", "stop")

    def connect(self) -> psycopg.Connection:
        return psycopg.connect(self.url, autocommit=True)


def _postgres_ids() -> tuple[int, int]:
    import pwd

    entry = pwd.getpwnam("postgres")
    return entry.pw_uid, entry.pw_gid
