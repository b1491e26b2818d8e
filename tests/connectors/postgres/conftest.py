"""The connector's tests read real PostgreSQL: a database of their own on the machine's
server (``DATABASE_URL``'s, with ``_pgconn`` and the xdist worker appended to its name), a
schema per test; and, for the restart cases, a private cluster (``tests.postgres_server``).

The sink's tests write into the database of ``POSTGRES_TEST_URL``, else ``DATABASE_URL``'s
when it is PostgreSQL (``postgres_url``), a schema per test (``pg_schema``): worker processes
of a run (``fleet``) reach it by the same URL."""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from connectors.postgres import snapshot
from source_support.registry import Environment
from tests.db_template import own_database
from tests.postgres_server import PrivatePostgres


@pytest.fixture(scope="session")
def pg_url() -> str:
    """A database of the session's own on the machine's server."""
    return own_database("pgconn")


@pytest.fixture()
def schema(pg_url):
    """A schema of the test's own, dropped after it (with the snapshots it left held)."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(name)))
    yield name
    snapshot.release_all()
    with psycopg.connect(pg_url, autocommit=True) as conn:
        # A case that stops mid-chunk leaves its readers' COPY open (as a killed worker
        # would): their sessions hold the table until they are ended.
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(name)))


@pytest.fixture(scope="module")
def private_postgres():
    """A cluster of the module's own, which its tests may stop and start (in a directory of
    /tmp: the postgres user cannot reach pytest's own temporary directories)."""
    server = PrivatePostgres(Path(tempfile.mkdtemp(prefix="adf-pg-")))
    server.init()
    server.start()
    yield server
    snapshot.release_all()
    with contextlib.suppress(subprocess.CalledProcessError):  # stopped by the test already
        server.stop()
    shutil.rmtree(server.dir, ignore_errors=True)


@functools.cache
def postgres_url() -> str:
    """The sink tests' database: ``POSTGRES_TEST_URL``, else one of this worker's own."""
    url = os.environ.get("POSTGRES_TEST_URL", "")
    if url.startswith(("postgres://", "postgresql://")):
        return url
    return own_database("pgsink")


@pytest.fixture()
def pg_schema() -> Iterator[str]:
    """A schema of the sink test's own in ``postgres_url``, dropped after it."""
    name = f"t_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(postgres_url(), autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(name)))
    yield name
    with psycopg.connect(postgres_url(), autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(name)))


@pytest.fixture()
def pg_env(tmp_path) -> Environment:
    return Environment(allowed_roots=(tmp_path,), base_dir=Path(tmp_path))


@pytest.fixture()
def fleet(dirs, tmp_path):
    """Worker and beat processes started by the test; all are SIGKILLed at its end."""
    from tests.e2e.fleet import Fleet  # noqa: PLC0415 - Django's settings are set up by then

    fleet = Fleet(tmp_path)
    yield fleet
    fleet.close()


@pytest.fixture(scope="module")
def logical_postgres() -> Iterator[PrivatePostgres]:
    """A private cluster with `wal_level = logical` (cdc and its slots), for a module."""
    server = PrivatePostgres(Path(tempfile.mkdtemp(prefix="adf-pg-")), logical=True)
    server.init()
    server.start()
    yield server
    snapshot.release_all()
    with contextlib.suppress(subprocess.CalledProcessError):
        server.stop()
    shutil.rmtree(server.dir, ignore_errors=True)
