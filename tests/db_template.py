"""Each test database is a copy of one migrated template, not migrated again per process.

pytest-django migrates a new test database for every process that runs tests: each xdist
worker of the fast lane and of CI, then the e2e run. Running the migrations took 10 s of CPU
(22 s at the shared machine's load) each time, and CREATE DATABASE ... TEMPLATE takes about
one. The template is named after the migrations and the pinned requirements, so a change to
either makes a new one; it is made once, under a lock, by whichever process comes first (a
scratch database migrated by ``manage.py migrate``, then renamed, so a template that exists
is whole). Each process then drops its own test database and copies the template into it,
and pytest-django keeps it as it is (``keepdb``) instead of making it again.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
from django.conf import settings
from psycopg import sql

REPO = Path(__file__).resolve().parent.parent


def fingerprint() -> str:
    """What the template's schema depends on: the app's migrations and the pinned packages
    (whose apps bring migrations of their own)."""
    digest = hashlib.sha256()
    for path in [*sorted((REPO / "dataflow" / "migrations").glob("*.py")), REPO / "requirements.txt"]:
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def copy_template_into_test_database() -> bool:
    """Makes the default database's test database a copy of the migrated template (made
    first if there is none); False where the database is not PostgreSQL (nothing done)."""
    db = settings.DATABASES["default"]
    url = os.environ.get("DATABASE_URL", "")
    if "postgresql" not in db["ENGINE"] or not url:
        return False
    test_name = db.get("TEST", {}).get("NAME") or f"test_{db['NAME']}"
    template = f"test_{db['NAME']}_tpl_{fingerprint()}"[:63]
    server = {"host": db["HOST"], "port": db["PORT"] or 5432, "user": db["USER"], "password": db["PASSWORD"]}
    lock_path = Path(tempfile.gettempdir()) / f"adf-{db['HOST']}-{db['PORT']}-{template}.lock"
    with lock_path.open("w") as lock, psycopg.connect(**server, dbname="postgres", autocommit=True) as conn:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released as the file closes
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [template]).fetchone() is None:
            scratch = f"{template[:58]}_new"
            conn.execute(f'DROP DATABASE IF EXISTS "{scratch}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{scratch}"')
            parts = urlsplit(url)
            env = {**os.environ, "DATABASE_URL": urlunsplit(parts._replace(path=f"/{scratch}"))}
            subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=REPO, env=env, check=True)
            conn.execute(f'ALTER DATABASE "{scratch}" RENAME TO "{template}"')
        conn.execute(f'DROP DATABASE IF EXISTS "{test_name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{test_name}" TEMPLATE "{template}"')
    return True


def own_database(suffix: str) -> str:
    """The URL of a database beside DATABASE_URL's (its name with ``suffix`` and the xdist
    worker appended), made when missing: on a fresh machine DATABASE_URL's own database need
    not exist, only pytest-django's test databases do."""
    base = os.environ.get("DATABASE_URL", "")
    if not base.startswith(("postgres://", "postgresql://")):
        base = "postgres://postgres@127.0.0.1:5432/postgres"
    parts = urlsplit(base)
    name = f"{parts.path.strip('/') or 'postgres'}_{suffix}_{os.environ.get('PYTEST_XDIST_WORKER', 'main')}"
    admin = urlunsplit(parts._replace(path="/postgres"))
    with psycopg.connect(admin, autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone():
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return urlunsplit(parts._replace(path=f"/{name}"))
