"""Fixtures of the API tests: users with and without permissions, their clients, flows."""

from __future__ import annotations

import pytest
from django.core.cache import cache
from rest_framework.test import APIClient

from tests.factories import DataFlowFactory, TokenFactory, UserFactory
from tests.helpers import write_csv


@pytest.fixture(autouse=True)
def _api_settings(settings):
    """A write rate no test reaches unless it sets its own, and no throttle history left
    by an earlier test."""
    settings.REST_FRAMEWORK = {
        **settings.REST_FRAMEWORK,
        "DEFAULT_THROTTLE_RATES": {"api-write": "10000/min"},
    }
    cache.clear()
    yield
    cache.clear()


def client_of(user) -> APIClient:
    """A client that sends ``user``'s token, as a script would."""
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {TokenFactory(user=user).key}")
    return client


@pytest.fixture()
def owner(db):
    return UserFactory()


@pytest.fixture()
def api(owner) -> APIClient:
    """The owner's client: the owner has add, change and delete permissions."""
    return client_of(owner)


@pytest.fixture()
def other_api(db) -> APIClient:
    """Another user's client, with every permission on flows but owning none."""
    return client_of(UserFactory())


@pytest.fixture()
def staff_api(db) -> APIClient:
    return client_of(UserFactory(is_staff=True))


@pytest.fixture()
def anonymous() -> APIClient:
    return APIClient()


@pytest.fixture()
def csv_path(dirs):
    """A small CSV (10 rows of id, sensor, temperature) under the allowed data root."""
    path = dirs.data / "orders.csv"
    write_csv(path, range(10))
    return path


@pytest.fixture()
def make_flow(dirs, csv_path, owner):
    """Makes a valid flow over ``csv_path`` (owned by ``owner`` unless told otherwise)."""

    def make(name: str = "orders", *, owner=owner, **fields):
        return DataFlowFactory(name=name, owner=owner, source_path=str(csv_path), **fields)

    return make


@pytest.fixture()
def flow(make_flow):
    return make_flow()


@pytest.fixture()
def body(dirs, csv_path) -> dict:
    """A POST body for a flow named orders over ``csv_path``."""
    return {
        "name": "orders",
        "parallelism": 2,
        "batch_size": 1000,
        "skip_errors": False,
        "source": {"type": "files", "path": str(csv_path)},
        "format": {"type": "csv", "schema": "id BIGINT, sensor STRING, temperature DOUBLE"},
        "transform": {"sql": "SELECT id, sensor FROM source"},
        "sink": {"type": "parquet", "path": str(dirs.out / "orders")},
    }
