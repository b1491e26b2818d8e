"""``docs/postgres-sink.md`` runs as written: its flow (the source path and the database
URL put in for the test's own) writes ``order_totals`` in the Django test database, and
its model, installed in a tiny app (``tests/pgsink_app``), reads the rows through the ORM."""

from __future__ import annotations

import decimal
import re
import tomllib
from pathlib import Path

import psycopg
import pytest
from django.apps import apps
from django.db import connection
from django.test.utils import modify_settings

from tests.helpers import run_flow

ROOT = Path(__file__).resolve().parents[3]
DOC = ROOT / "docs" / "postgres-sink.md"


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", DOC.read_text(), re.S)


def test_the_docs_model_is_the_test_apps_model():
    (model,) = blocks("python")
    assert model == (ROOT / "tests" / "pgsink_app" / "models.py").read_text()


@pytest.mark.django_db(transaction=True)
def test_the_docs_flow_writes_the_table_its_model_reads(worker, dirs):
    db = connection.settings_dict
    url = f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"
    (flow_toml,) = blocks("toml")
    doc = tomllib.loads(flow_toml)
    doc["source"]["path"] = str(dirs.data / "*.csv")
    doc["sink"]["url"] = url
    (dirs.data / "orders.csv").write_text(
        "id,customer,amount,ts\n1,ann,10.50,2026-01-01 00:00:00\n2,bob,3.25,2026-01-01 00:01:00\n"
        "3,ann,4.00,2026-01-01 00:02:00\n"
    )
    try:
        run = run_flow(doc, timeout=240)
        assert run.status == "succeeded", run.message

        with modify_settings(INSTALLED_APPS={"append": "tests.pgsink_app"}):
            order_total = apps.get_model("pgsink_app", "OrderTotal")
            rows = list(order_total.objects.order_by("-total").values_list("customer", "total", "orders"))
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("DROP TABLE IF EXISTS public.order_totals, public.adf_sink_ledger")

    assert rows == [("ann", decimal.Decimal("14.50"), 2), ("bob", decimal.Decimal("3.25"), 1)]
