"""Shared fixtures: real Redis, real PostgreSQL, a real Celery worker, a real Spark session.

Run through ``bash .ci/run`` (or with DATABASE_URL and REDIS_URL set to a PostgreSQL and a
Redis server); the embedded defaults are under test only in tests/e2e/test_quickstart.py.
"""

from __future__ import annotations

import os
import signal
import socket
import time
import uuid
from pathlib import Path

import pytest
import redis
from celery.contrib.testing.worker import start_worker
from celery.worker import state as worker_state
from django.conf import settings
from kombu.asynchronous import set_event_loop

from dataflow.celery import app as celery_app
from dataflow.redis_client import get_redis, redis_url
from dataflow.spark.session import warm_up
from source_support import addresses
from tests.db_template import copy_template_into_test_database
from tests.factories import UserFactory
from tests.worker_env import worker_number

#: A skip for want of a tool fails the run under CI=true.
pytest_plugins = ["tests.missing_tool", "tests.plugin_install"]

TESTS = Path(__file__).resolve().parent
#: The marker every test under a directory of tests/ carries, set here from the test's path
#: so that a new file there cannot be left unmarked (see pyproject.toml for the markers).
#: The most a test's teardown waits for the tasks it left running (``worker``).
WORKER_DRAIN_S = 20
DIRECTORY_MARKERS = {"e2e": pytest.mark.e2e, "browser": pytest.mark.browser}


def pytest_configure(config):
    settings.PASSWORD_HASHERS = ["tests.helpers.QuickPBKDF2PasswordHasher", *settings.PASSWORD_HASHERS]
    # The processes a test starts (runflow, a worker, a server) read the secrets this one
    # stored in the test database, whatever var directory they are given.
    os.environ.setdefault("DATAFLOW_SECRET_KEYS", ",".join(settings.DATAFLOW_SECRET_KEYS))
    # Tests press Ctrl-C on the processes they start, as a terminal does. A suite started in
    # the background by a shell without job control (`bash .ci/run &`) inherits SIGINT
    # ignored, and so would every runflow it starts: Python turns an ignored SIGINT into no
    # KeyboardInterrupt, and those tests waited for a runflow that never heard them.
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(scope="session")
def django_db_keepdb(request, django_db_modify_db_settings) -> bool:
    """The test database is a copy of the migrated template (tests/db_template.py), made
    after xdist gave it its worker's name: pytest-django keeps it instead of migrating a
    new one."""
    return bool(request.config.getvalue("reuse_db")) or copy_template_into_test_database()


def pytest_collection_modifyitems(items):
    for item in items:
        path = Path(item.path).resolve()
        if TESTS in path.parents:
            marker = DIRECTORY_MARKERS.get(path.relative_to(TESTS).parts[0])
            if marker is not None:
                item.add_marker(marker)


#: The names the tests' resolver knows (a public address: nothing connects to it in a test).
OFFLINE_NAMES = {
    "localhost": "127.0.0.1",
    "example.com": "93.184.216.34",
    "hooks.example.com": "93.184.216.34",
    "a.corp.example": "93.184.216.34",
}


def offline_getaddrinfo(host, port, family=0, type=0, proto=0, flags=0):
    """``getaddrinfo`` that sends no DNS query (the network here is monitored): a numeric
    host as the system reads it (0x7f000001 too), a name of OFFLINE_NAMES, or gaierror."""
    host = OFFLINE_NAMES.get(str(host).lower().rstrip("."), host)
    return socket.getaddrinfo(host, port, family, type, proto, flags | socket.AI_NUMERICHOST)


@pytest.fixture(autouse=True)
def _offline_resolver(monkeypatch):
    """Replaces the address policy's resolver for every test; a test of DNS answers
    installs its own over this one."""
    monkeypatch.setattr(addresses, "getaddrinfo", offline_getaddrinfo)


@pytest.fixture(scope="session", autouse=True)
def _clean_redis():
    get_redis().flushdb()
    yield


@pytest.fixture(scope="session", autouse=True)
def _warm_spark():
    """Under pytest-xdist, each worker starts its Spark session (the process-wide one every
    job of this process shares) in the background as its first test starts: the first test
    that needed Spark used to wait for the JVM to start (over two minutes at load 20), now
    the start overlaps the tests before it. A test that needs other Spark settings still
    gets a session of its own (``dataflow.spark.session`` rebuilds it); a run of a few
    files without xdist starts Spark only if a test needs it."""
    if worker_number() is not None:
        warm_up()


@pytest.fixture(autouse=True)
def _login_failures_forgotten():
    """Each test starts with no failed login counted (they are kept in Redis for all web
    processes, and every test client logs in from 127.0.0.1)."""
    client = get_redis()
    for key in client.scan_iter(match=f"{settings.DATAFLOW_REDIS_NAMESPACE}:login-failures:*", count=1000):
        client.delete(key)


@pytest.fixture()
def dirs(tmp_path, settings):
    """Per-test data, output and landing directories, and the settings that allow them."""
    data, out, landing = tmp_path / "data", tmp_path / "out", tmp_path / "landing"
    for d in (data, out, landing):
        d.mkdir()
    settings.DATAFLOW_ALLOWED_ROOTS = [data.resolve(), out.resolve()]
    settings.DATAFLOW_BASE_DIR = tmp_path
    settings.DATAFLOW_LANDING_ROOT = landing
    settings.DATAFLOW_READER_LEASE_SECONDS = 3
    settings.DATAFLOW_READER_SLICE_SECONDS = 2
    settings.DATAFLOW_READER_PARK_SECONDS = 8
    settings.DATAFLOW_TICK_SECONDS = 1
    return type("Dirs", (), {"root": tmp_path, "data": data, "out": out, "landing": landing})


@pytest.fixture(scope="module")
def celery_worker_module(django_db_setup, django_db_blocker):
    """An in-process Celery worker (threads) on the project's own app, per test module.

    Not per session: a module that runs its own worker processes (tests/e2e/test_crash.py)
    must not have this worker take tasks from the same queue.
    """
    with (
        django_db_blocker.unblock(),
        start_worker(
            celery_app,
            pool="threads",
            concurrency=8,
            perform_ping_check=False,
            loglevel="WARNING",
            shutdown_timeout=30,
        ) as worker,
    ):
        yield worker
    # Celery's Hub step reuses kombu's process-wide event loop if one is set: the next
    # module's worker would get this one's hub, whose timer is not the new worker's, and
    # tasks with a countdown (a webhook's retry) would never run.
    set_event_loop(None)


@pytest.fixture()
def worker(celery_worker_module, transactional_db, dirs):
    """A running worker for a test whose rows must be visible to the worker's threads.

    After the test, the tasks it left running are given a while to end before the tables
    are emptied: a task's query and the flush's TRUNCATE, taking their locks in opposite
    orders, deadlocked, and PostgreSQL aborted the flush (a test's teardown erred)."""
    yield celery_worker_module
    deadline = time.monotonic() + WORKER_DRAIN_S
    while worker_state.active_requests and time.monotonic() < deadline:
        time.sleep(0.05)


@pytest.fixture()
def alice():
    """An ordinary user (no staff rights), the first of two tenants."""
    return UserFactory(username="alice")


@pytest.fixture()
def bob():
    """A second ordinary user, whose flows alice must not reach."""
    return UserFactory(username="bob")


@pytest.fixture()
def rds() -> redis.Redis:
    """A client of the tests' Redis, for tests that write streams as a producer would."""
    client = redis.Redis.from_url(redis_url())
    yield client
    client.close()


@pytest.fixture()
def prefix(rds) -> str:
    """A key prefix no other test uses; every key under it (and the redis_stream sink's
    staging and marker keys for it) is deleted after the test."""
    prefix = f"t{uuid.uuid4().hex[:10]}:"
    yield prefix
    for pattern in (f"{prefix}*", f"adf:sink:staging:{prefix}*", f"adf:sink:marker:*{prefix}*"):
        keys = list(rds.scan_iter(match=pattern, count=1000))
        if keys:
            rds.delete(*keys)
