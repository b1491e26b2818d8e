"""Loaded with ``-p tests.worker_env`` (pyproject's addopts), before pytest-django reads the
settings: under pytest-xdist, worker N (``gwN``) uses Redis database ``base - N``, where
``base`` is the database of REDIS_URL, so no worker sees another's keys, queues or flushes.

PostgreSQL needs nothing here: pytest-django names each worker's test database
``test_<name>_gwN`` itself. Everything the tests start (servers, brokers, live servers) takes
a free port of its own (tests/server_process.py ``free_port``), and every file a test writes
is under its ``tmp_path``, which xdist already keeps apart per worker.

The processes a test starts (workers, beat, ``manage.py``) inherit the environment, so they
use the worker's Redis database too.
"""

from __future__ import annotations

import os
import re

#: Redis has databases 0-15 by default; worker N takes ``base - N``.
REDIS_DATABASES = 16


def worker_number() -> int | None:
    """N of the xdist worker ``gwN`` this process is, None outside xdist."""
    name = os.environ.get("PYTEST_XDIST_WORKER", "")
    match = re.fullmatch(r"gw(\d+)", name)
    return int(match.group(1)) if match else None


def redis_url_for_worker(url: str, number: int) -> str:
    """``url`` with its database number lowered by ``number``; a clear error when the
    workers would run out of databases (more workers than the base number allows)."""
    match = re.fullmatch(r"(?P<head>rediss?://[^/]*)(?:/(?P<db>\d*))?(?P<tail>\?.*)?", url)
    if match is None:
        raise RuntimeError(f"REDIS_URL {url!r}: expected redis://host:port/DB for pytest-xdist workers")
    base = int(match.group("db") or 0)
    db = base - number
    if db < 0:
        raise RuntimeError(
            f"REDIS_URL {url!r}: xdist worker gw{number} would need Redis database {db}; "
            f"use a higher database number (workers take {base}, {base - 1}, ... down to 0)"
        )
    return f"{match.group('head')}/{db}{match.group('tail') or ''}"


#: REDIS_URL as pytest was given it, before this worker's database was put in.
GIVEN_REDIS_URL = os.environ.get("REDIS_URL", "")


def _apply() -> None:
    number = worker_number()
    if number is None or not GIVEN_REDIS_URL:
        return
    os.environ["REDIS_URL"] = redis_url_for_worker(GIVEN_REDIS_URL, number)


_apply()
