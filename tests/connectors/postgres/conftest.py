"""A real PostgreSQL for the sink's tests: the database of ``POSTGRES_TEST_URL``, else of
``DATABASE_URL`` when it is PostgreSQL, else ``postgres`` on 127.0.0.1:5432; each test gets
a schema of its own, dropped after it."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from source_support.registry import Environment


def postgres_url() -> str:
    url = os.environ.get("POSTGRES_TEST_URL") or os.environ.get("DATABASE_URL", "")
    if url.startswith(("postgres://", "postgresql://")):
        return url
    return "postgres://postgres@127.0.0.1:5432/postgres"


@pytest.fixture()
def pg_schema() -> Iterator[str]:
    schema = f"t_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(postgres_url(), autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    yield schema
    with psycopg.connect(postgres_url(), autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA {schema} CASCADE")


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
