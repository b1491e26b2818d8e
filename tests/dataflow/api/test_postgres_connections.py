"""PostgreSQL connections through the API: staff make them (the password write-only, the
patterns ``schema.table`` globs); alice, an ordinary user, reads only the tables her
connection allows, and never the deployment's own (``auth_user``), however she names them."""

from __future__ import annotations

import pytest
from django.db import connection as django_connection

from dataflow.models import Connection, DataFlow
from tests.dataflow.api.conftest import client_of
from tests.dataflow.api.test_connections import connection_staff, refused
from tests.factories import ConnectionFactory

pytestmark = pytest.mark.django_db


@pytest.fixture()
def db_url(settings):
    """The tests' database on loopback, which the deployment allows on purpose here."""
    settings.DATAFLOW_ALLOWED_INTERNAL_ADDRESSES = ["127.0.0.1"]
    params = django_connection.settings_dict
    return f"postgres://{params['USER']}@{params['HOST'] or '127.0.0.1'}:{params['PORT'] or 5432}/{params['NAME']}"


@pytest.fixture()
def shop(alice, db_url):
    """alice's connection to the shop's database, allowing ``public.orders`` only."""
    return ConnectionFactory(
        name="shop-db", type="postgres", url=db_url, key_patterns=["orders"], users=[alice]
    )


def pg_flow(name: str, out, **source) -> dict:
    return {
        "name": name,
        "source": {"type": "postgres", **source},
        "transform": {"sql": "SELECT * FROM source"},
        "sink": {"type": "parquet", "path": str(out / name)},
    }


def test_staff_make_a_postgres_connection_whose_password_is_never_shown(alice, db_url):
    staff = client_of(connection_staff())
    body = {
        "name": "shop-db",
        "type": "postgres",
        "url": db_url.replace("postgres://postgres@", "postgres://postgres:hunter2@"),
        "key_patterns": ["Orders", "analytics.*"],
        "users": ["alice"],
    }

    created = staff.post("/api/connections/", body, format="json")

    assert created.status_code == 201, created.content
    assert "hunter2" not in created.content.decode()
    assert created.json()["key_patterns"] == ["public.orders", "analytics.*"]
    assert "hunter2" in Connection.objects.get(name="shop-db").url


@pytest.mark.parametrize(
    "pattern", ["public.auth_*", "auth_user", "*.django_session", "public.dataflow_*", "pg_catalog.*"]
)
def test_a_connection_pattern_that_names_only_the_deployments_tables_is_refused(db_url, pattern):
    body = {"name": "bad", "type": "postgres", "url": db_url, "key_patterns": [pattern]}

    reason = refused(
        client_of(connection_staff()).post("/api/connections/", body, format="json"), "key_patterns"
    )

    assert "the deployment itself uses" in reason
    assert not Connection.objects.filter(name="bad").exists()


def test_a_url_that_is_not_postgres_is_refused_naming_the_field():
    body = {"name": "bad", "type": "postgres", "url": "mysql://u:secret@10.1.1.1/shop"}

    reason = refused(client_of(connection_staff()).post("/api/connections/", body, format="json"), "url")

    assert "postgres://" in reason and "secret" not in reason


@pytest.mark.parametrize(
    ("source", "field", "words"),
    [
        ({"table": "auth_user"}, "source.table", "outside"),
        ({"table": "public.customers"}, "source.table", "outside"),
        ({"table": "public.*"}, "source.table", "outside"),
        ({"query": "SELECT * FROM orders WHERE id IN (SELECT id FROM auth_user)"}, "source.query", "outside"),
        ({"query": "SELECT * FROM pg_stat_activity"}, "source.query", "outside"),
        ({"model": "auth.User"}, "source.model", "outside"),
    ],
)
def test_alice_cannot_read_a_table_outside_her_connection_or_the_deployments_own(
    alice, shop, dirs, source, field, words
):
    body = pg_flow("mine", dirs.out, connection="shop-db", **source)

    reason = refused(client_of(alice).post("/api/flows/", body, format="json"), field)

    assert words in reason
    assert not DataFlow.objects.filter(name="mine").exists()


def test_auth_user_stays_out_even_through_a_connection_that_allows_every_table(alice, db_url, dirs):
    ConnectionFactory(name="all-db", type="postgres", url=db_url, key_patterns=["*.*"], users=[alice])
    body = pg_flow("mine", dirs.out, connection="all-db", table="public.auth_user")

    reason = refused(client_of(alice).post("/api/flows/", body, format="json"), "source.table")

    assert "the deployment itself uses" in reason


def test_alice_cannot_give_a_url_or_use_the_deployments_database(alice, db_url, dirs):
    with_url = pg_flow("mine", dirs.out, url=db_url, table="orders")
    without = pg_flow("mine", dirs.out, table="orders")

    api = client_of(alice)

    refused(api.post("/api/flows/", with_url, format="json"), "source.url")
    refused(api.post("/api/flows/", without, format="json"), "source.connection")


def test_alice_reads_a_table_her_connection_allows_named_bare(alice, shop, dirs):
    body = pg_flow("mine", dirs.out, connection="shop-db", table="orders")

    response = client_of(alice).post("/api/flows/", body, format="json")

    assert response.status_code == 201, response.content
    assert response.json()["source"] == {
        "type": "postgres",
        "connection": "shop-db",
        "table": "orders",
        "mode": "snapshot",
        "chunk_rows": 100000,
    }


def test_staff_read_the_deployments_database_by_leaving_the_url_out(dirs):
    body = pg_flow("theirs", dirs.out, table="public.orders")

    response = client_of(connection_staff()).post("/api/flows/", body, format="json")

    assert response.status_code == 201, response.content


def test_staff_cannot_read_the_deployments_tables_either(dirs):
    body = pg_flow("theirs", dirs.out, model="dataflow.DataFlow")

    reason = refused(client_of(connection_staff()).post("/api/flows/", body, format="json"), "source.model")

    assert "the deployment itself uses" in reason


def test_a_connection_narrowed_after_the_flow_was_saved_stops_its_start(alice, shop, dirs):
    """Checked at run time too: staff narrow shop-db to another table; alice's flow, saved
    while it allowed orders, cannot start, and nothing reaches its sink."""
    api = client_of(alice)
    body = pg_flow("mine", dirs.out, connection="shop-db", table="orders")
    assert api.post("/api/flows/", body, format="json").status_code == 201
    shop.key_patterns = ["public.customers"]
    shop.save()

    reason = refused(api.post("/api/flows/mine/start/"), "source.table")

    assert "outside" in reason and "public.customers" in reason
    assert not (dirs.out / "mine").exists()
