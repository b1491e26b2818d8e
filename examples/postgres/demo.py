"""The README's PostgreSQL flow, whole: makes the database adf_example on the PostgreSQL at
``POSTGRES_URL`` (default ``postgres://postgres@127.0.0.1:5432/adf_example``, which the flow
file reads too) if it is missing, makes the table shop.orders afresh with 1,000 orders,
applies and runs examples/postgres/orders.toml with ``manage.py runflow``, and prints what
the sink holds.

Run from the checkout's root: ``python examples/postgres/demo.py``.
"""

from __future__ import annotations

import os
import subprocess
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pyarrow.parquet as pq
from psycopg import sql

URL = os.environ.get("POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/adf_example")


def make_table() -> None:
    parts = urlsplit(URL)
    name = parts.path.strip("/")
    with psycopg.connect(urlunsplit(parts._replace(path="/postgres")), autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone():
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    with psycopg.connect(URL, autocommit=True) as conn:
        conn.execute("DROP SCHEMA IF EXISTS shop CASCADE")
        conn.execute("CREATE SCHEMA shop")
        conn.execute(
            "CREATE TABLE shop.orders (id bigint PRIMARY KEY, customer text, amount numeric(10,2), "
            "placed_at timestamptz)"
        )
        conn.execute(
            "INSERT INTO shop.orders SELECT g, (ARRAY['acme', 'globex', 'hooli'])[g % 3 + 1], g / 4.0, "
            "timestamptz '2026-03-01 00:00Z' + make_interval(mins => g) FROM generate_series(1, 1000) g"
        )
        conn.execute("ANALYZE shop.orders")
    print("table shop.orders: 1000 rows", flush=True)


def run(*command: str) -> None:
    print("running:", " ".join(command), flush=True)
    subprocess.run(command, check=True)


def main() -> None:
    make_table()
    run("python", "manage.py", "applyflows", "examples/postgres/orders.toml")
    run("python", "manage.py", "runflow", "postgres-orders", "--until-done")
    table = pq.read_table("out/postgres-orders").to_pandas().sort_values("customer")
    print(table.to_string(index=False))


if __name__ == "__main__":
    main()
