"""The replication slots the cdc flows own, on a private cluster with ``wal_level = logical``
(``tests.postgres_server.PrivatePostgres(logical=True)``, one for the module): their lag in
the run's status (API), ``/metrics`` and the dashboard, ``flowctl slots`` (with the slots
left behind, and ``--drop``), and a stopped flow that starts again from its slot."""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Iterator
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.urls import reverse
from psycopg import sql
from rest_framework.test import APIClient

from connectors.postgres import snapshot
from connectors.postgres.cdc import drop_slot
from connectors.postgres.pgoutput import parse_lsn
from dataflow.models import DataFlow, FlowRun
from dataflow.services import slots
from dataflow.services.flows import flow_create, flow_delete, flow_start, flow_stop
from dataflow.services.slots import slot_cache_clear
from tests.dataflow.api.conftest import client_of
from tests.factories import ConnectionFactory, UserFactory
from tests.postgres_server import PrivatePostgres

pytestmark = [pytest.mark.slow, pytest.mark.django_db]


@pytest.fixture()
def cdc_flow(logical_postgres: PrivatePostgres, dirs: Any, settings: Any) -> Iterator[DataFlow]:
    """A staff user's cdc flow over a table of its own, started (its slot made)."""
    settings.DATAFLOW_ALLOWED_INTERNAL_ADDRESSES = ["127.0.0.1"]
    slot_cache_clear()
    name = f"t_{uuid.uuid4().hex[:8]}"
    with logical_postgres.connect() as conn:
        conn.execute(sql.SQL("CREATE TABLE {} (id int PRIMARY KEY, v text)").format(sql.Identifier(name)))
        conn.execute(
            sql.SQL("INSERT INTO {} SELECT g, 'r' || g FROM generate_series(1, 50) g").format(
                sql.Identifier(name)
            )
        )
    staff = UserFactory(username=f"ops-{name}", is_staff=True)
    spec = {
        "flow": {"name": f"cdc-{name}".replace("_", "-")},
        "source": {"type": "postgres", "url": logical_postgres.url, "table": name, "mode": "cdc"},
        "transform": {"sql": "SELECT * FROM source"},
        "sink": {"type": "parquet", "path": str(dirs.out / name)},
    }
    flow = flow_create(spec=spec, owner=staff)
    flow_start(flow=flow)
    yield flow
    snapshot.release_all()
    with contextlib.suppress(Exception):
        drop_slot(logical_postgres.url, slot_of(flow))
    slot_cache_clear()


def slot_of(flow: DataFlow) -> str:
    return "adf_" + flow.name.replace("-", "_")


def write_wal(server: PrivatePostgres, flow: DataFlow, rows: int) -> None:
    table = flow.source_config["table"]
    with server.connect() as conn:
        conn.execute(
            sql.SQL("INSERT INTO {} SELECT g, repeat('x', 200) FROM generate_series(1000, %s) g").format(
                sql.Identifier(table)
            ),
            (1000 + rows,),
        )


def flowctl_slots(*args: str) -> dict[str, Any]:
    out = StringIO()
    call_command("flowctl", "slots", "--json", *args, stdout=out)
    return json.loads(out.getvalue())


def confirmed_lsn(server: PrivatePostgres, slot: str) -> int:
    with server.connect() as conn:
        row = conn.execute(
            "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s", (slot,)
        ).fetchone()
    assert row is not None
    return parse_lsn(row[0])


def test_a_stopped_flow_starts_again_from_its_slot_without_a_new_snapshot(
    logical_postgres: PrivatePostgres, cdc_flow: DataFlow
) -> None:
    first = FlowRun.objects.filter(flow=cdc_flow).get()
    assert first.enumerator_state["plan"]["count"] >= 1  # the first run read a snapshot
    flow_stop(flow=cdc_flow)
    write_wal(logical_postgres, cdc_flow, 10)

    second = flow_start(flow=cdc_flow)  # refused before: "slot ... exists already"

    second.refresh_from_db()
    plan = second.enumerator_state["plan"]
    assert plan["count"] == 0, "no second snapshot: the slot's changes follow the first run's"
    assert plan["stream_lsn"] == confirmed_lsn(logical_postgres, slot_of(cdc_flow))
    flow_stop(flow=cdc_flow)
    flow_delete(flow=cdc_flow)
    with logical_postgres.connect() as conn:
        names = {r[0] for r in conn.execute("SELECT slot_name FROM pg_replication_slots")}
    assert slot_of(cdc_flow) not in names, "deleting the flow still drops its slot"


def test_slot_lag_is_in_metrics_the_run_status_and_the_dashboard_with_the_limit(
    logical_postgres: PrivatePostgres, cdc_flow: DataFlow, settings: Any, client: Any
) -> None:
    settings.DATAFLOW_POSTGRES_SLOT_MAX_LAG_MB = 0.01  # 10 KiB
    write_wal(logical_postgres, cdc_flow, 500)  # ~100 KiB of WAL the slot holds back
    slot_cache_clear()
    slot = slot_of(cdc_flow)

    status = client_of(cdc_flow.owner).get(reverse("dataflow:api:flow-status", args=[cdc_flow.name]))
    assert status.status_code == 200
    found = status.json()["run"]["slot"]
    assert found["slot"] == slot and found["found"] and found["lag_bytes"] > 10 * 1024
    assert found["over_limit"] is True and found["lag_seconds"] is not None

    text = StringIO()
    call_command("flowctl", "status", cdc_flow.name, stdout=text)
    assert (
        f"slot: {slot} on 127.0.0.1:" in text.getvalue()
        and "OVER DATAFLOW_POSTGRES_SLOT_MAX_LAG_MB" in text.getvalue()
    )

    client.force_login(cdc_flow.owner)
    metrics = client.get(reverse("dataflow:metrics")).content.decode()
    labels = f'{{flow="{cdc_flow.name}",slot="{slot}"}}'
    assert f"dataflow_postgres_slot_lag_bytes{labels}" in metrics
    assert f"dataflow_postgres_slot_over_limit{labels} 1.0" in metrics

    page = client.get(reverse("dataflow:dashboard:flow", args=[cdc_flow.name])).content.decode()
    assert f"Slot {slot} holds back" in page

    settings.DATAFLOW_POSTGRES_SLOT_MAX_LAG_MB = 1024
    metrics = client.get(reverse("dataflow:metrics")).content.decode()
    assert f"dataflow_postgres_slot_over_limit{labels} 0.0" in metrics


def test_flowctl_slots_lists_owned_slots_warns_of_left_behind_and_drops_only_those(
    logical_postgres: PrivatePostgres, cdc_flow: DataFlow, settings: Any
) -> None:
    with logical_postgres.connect() as conn:
        conn.execute("SELECT pg_create_logical_replication_slot('adf_forgotten', 'pgoutput')")
        conn.execute("SELECT pg_create_logical_replication_slot('someone_elses', 'pgoutput')")
    try:
        report = flowctl_slots()
        assert [(s["flow"], s["slot"], s["found"]) for s in report["slots"]] == [
            (cdc_flow.name, slot_of(cdc_flow), True)
        ]
        assert [s["slot"] for s in report["left_behind"]] == ["adf_forgotten"]
        text = StringIO()
        call_command("flowctl", "slots", stdout=text)
        assert "flowctl slots --drop adf_forgotten" in text.getvalue()

        UserFactory(username="tenant")
        assert flowctl_slots("--user", "tenant") == {"slots": [], "left_behind": [], "max_lag_mb": 1024}
        with pytest.raises(CommandError, match="only staff or the operator"):
            flowctl_slots("--user", "tenant", "--drop", "adf_forgotten")
        with pytest.raises(CommandError, match=f"belongs to flow '{cdc_flow.name}'"):
            flowctl_slots("--drop", slot_of(cdc_flow))

        assert flowctl_slots("--drop", "adf_forgotten")["dropped"] == "adf_forgotten"
        assert flowctl_slots()["left_behind"] == []

        settings.DATAFLOW_POSTGRES_SLOT_SERVERS_MAX = 0
        with pytest.raises(CommandError, match="DATAFLOW_POSTGRES_SLOT_SERVERS_MAX"):
            flowctl_slots()
    finally:
        for name in ("adf_forgotten", "someone_elses"):
            drop_slot(logical_postgres.url, name)


def test_a_scrape_asks_each_server_once_and_reuses_the_answer_for_a_few_seconds(
    logical_postgres: PrivatePostgres,
    cdc_flow: DataFlow,
    dirs: Any,
    settings: Any,
    client: Any,
    monkeypatch: Any,
) -> None:
    second_spec = {
        "flow": {"name": f"{cdc_flow.name}-b"},
        "source": {**cdc_flow.source_config, "type": "postgres", "slot": f"{slot_of(cdc_flow)}_b"},
        "transform": {"sql": "SELECT * FROM source"},
        "sink": {"type": "parquet", "path": str(dirs.out / "second")},
    }
    second = flow_create(spec=second_spec, owner=cdc_flow.owner)
    flow_start(flow=second)
    asked: list[str] = []
    real = slots.server_slots

    def counted(url: str) -> Any:  # a spy: the real query runs
        asked.append(url)
        return real(url)

    monkeypatch.setattr(slots, "server_slots", counted)
    client.force_login(cdc_flow.owner)
    try:
        slot_cache_clear()
        first = client.get(reverse("dataflow:metrics")).content.decode()
        again = client.get(reverse("dataflow:metrics")).content.decode()
        assert len(asked) == 1, "two flows on one server, two scrapes: one query"
        for text in (first, again):
            assert (
                f'dataflow_postgres_slot_lag_bytes{{flow="{second.name}",slot="{slot_of(cdc_flow)}_b"}}'
                in text
            )

        settings.DATAFLOW_POSTGRES_SLOT_SERVERS_MAX = 0
        capped = client.get(reverse("dataflow:metrics")).content.decode()
        assert "dataflow_postgres_slot_servers_skipped 1.0" in capped
        assert "dataflow_postgres_slot_lag_bytes{" not in capped
        refused = client_of(cdc_flow.owner).get(reverse("dataflow:api:flow-status", args=[cdc_flow.name]))
        assert refused.status_code == 400 and "DATAFLOW_POSTGRES_SLOT_SERVERS_MAX" in str(refused.json())
    finally:
        flow_stop(flow=second)
        flow_delete(flow=second)


def test_the_api_lists_a_tenant_only_the_slots_of_their_own_flows(
    logical_postgres: PrivatePostgres, cdc_flow: DataFlow, dirs: Any
) -> None:
    alice = UserFactory(username="alice")
    ConnectionFactory(
        name="alice-db", type="postgres", url=logical_postgres.url, key_patterns=["public.t_*"], users=[alice]
    )
    table = cdc_flow.source_config["table"]
    spec = {
        "flow": {"name": "alice-cdc"},
        "source": {"type": "postgres", "connection": "alice-db", "table": table, "mode": "cdc"},
        "transform": {"sql": "SELECT * FROM source"},
        "sink": {"type": "parquet", "path": str(dirs.out / "alice")},
    }
    mine = flow_create(spec=spec, owner=alice)
    flow_start(flow=mine)
    with logical_postgres.connect() as conn:
        conn.execute("SELECT pg_create_logical_replication_slot('adf_nobodys', 'pgoutput')")
    try:
        seen = client_of(alice).get(reverse("dataflow:api:slots"))
        assert seen.status_code == 200
        assert [(s["flow"], s["slot"]) for s in seen.json()["slots"]] == [("alice-cdc", "adf_alice_cdc")]
        assert seen.json()["left_behind"] == [], "a tenant is shown no slot but their flows'"

        staff = client_of(cdc_flow.owner).get(reverse("dataflow:api:slots")).json()
        assert {s["flow"] for s in staff["slots"]} == {"alice-cdc", cdc_flow.name}
        assert [s["slot"] for s in staff["left_behind"]] == ["adf_nobodys"]

        assert APIClient().get(reverse("dataflow:api:slots")).status_code == 401
    finally:
        flow_stop(flow=mine)
        flow_delete(flow=mine)
        drop_slot(logical_postgres.url, "adf_nobodys")
