"""A flow driven only through the REST API, as a script would: created, started and
watched over HTTP until it succeeds, with real Celery worker and beat processes, Spark,
and a token made like ``manage.py drf_create_token``."""

from __future__ import annotations

import io
import json
import urllib.error
import urllib.request

import pytest
from django.contrib.auth.models import Permission, User
from django.core.management import call_command
from rest_framework.authtoken.models import Token

from tests.helpers import SCHEMA, multiset, read_parquet_rows, wait_until, write_csv

pytestmark = pytest.mark.django_db(transaction=True)


def api_client(base_url: str, token: str):
    """``call(method, path, body=None) -> (status, json)`` over real HTTP."""

    def call(method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
        request = urllib.request.Request(
            base_url + path,
            method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={"Authorization": f"Token {token}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read() or b"{}")

    return call


def test_a_flow_created_and_started_through_the_api_lands_every_row(live_server, fleet, dirs):
    user = User.objects.create_user("ana", password="not-used")
    user.user_permissions.add(*Permission.objects.filter(codename__in=["add_dataflow", "change_dataflow"]))
    call_command("drf_create_token", "ana", stdout=io.StringIO())
    call = api_client(live_server.url, Token.objects.get(user=user).key)
    sent = write_csv(dirs.data / "a.csv", range(0, 3000)) + write_csv(dirs.data / "b.csv", range(3000, 5000))
    fleet.beat()
    fleet.worker("w1", concurrency=4)

    status, created = call(
        "POST",
        "/api/flows/",
        {
            "name": "via-api",
            "parallelism": 2,
            "batch_size": 700,
            "source": {"type": "files", "path": str(dirs.data / "*.csv")},
            "format": {"type": "csv", "schema": SCHEMA},
            "transform": {"sql": "SELECT id, sensor, temperature FROM source"},
            "sink": {"type": "parquet", "path": str(dirs.out / "sink")},
        },
    )
    assert status == 201, created
    assert (created["status"], created["owner"]) == ("idle", "ana")
    status, started = call("POST", "/api/flows/via-api/start/")
    assert status == 202, started

    def ended() -> bool:
        return call("GET", "/api/flows/via-api/status/")[1]["status"] in ("succeeded", "failed")

    wait_until(
        ended, 240, lambda: f"{call('GET', '/api/flows/via-api/status/')[1]}\n{fleet.log('w1')[-2000:]}"
    )
    status, run = call("GET", f"/api/runs/{started['run']}/")
    assert status == 200
    assert run["status"] == "succeeded", run
    assert (run["records_read"], run["rows_written"], run["errors_count"]) == (5000, 5000, 0)
    assert run["spark_app_id"].startswith("local-"), run  # as the Spark UI names the application
    assert multiset(read_parquet_rows(dirs.out / "sink")) == multiset(sent)
    status, runs = call("GET", "/api/flows/via-api/runs/")
    assert [r["id"] for r in runs["results"]] == [started["run"]]
