"""format.on_schema_change end to end: a directory of CSV (or JSON lines) files whose later
files gain, lose or retype a column, run through the real flow (readers, landing, Spark,
the Parquet sink), the sink compared with pandas reading the same files with the policy
applied by hand; the changes listed on the run and posted to the webhook."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from dataflow.models import DeliveryStatus, SchemaChangeRecord, WebhookDelivery
from dataflow.redis_client import redis_url
from dataflow.services.flows import flow_apply, flow_start
from tests.dataflow.services.test_notify import receiver  # noqa: F401 - the fixture
from tests.helpers import Beat, run_flow, spec, wait_for_run, wait_until

BASE = ["id", "sensor", "temperature"]
CASTS = {"id": int, "sensor": str, "temperature": float}


def _write(path: Path, header: list[str], rows: list[list[object]]) -> Path:
    path.write_text("\n".join([",".join(header), *(",".join(map(str, r)) for r in rows)]) + "\n")
    return path


def _drifting_files(data: Path) -> dict[str, Path]:
    """a.csv as the schema is inferred from it; b.csv gains a column ``region``; c.csv lacks
    ``temperature``; d.csv holds a temperature that is not a number."""
    return {
        "a": _write(data / "a.csv", BASE, [[i, f"s{i}", i * 0.5] for i in range(5)]),
        "b": _write(
            data / "b.csv",
            [*BASE, "region"],
            [[i, f"s{i}", i * 0.5, "eu" if i % 2 else "us"] for i in range(5, 10)],
        ),
        "c": _write(data / "c.csv", ["id", "sensor"], [[i, f"s{i}"] for i in range(10, 13)]),
        "d": _write(data / "d.csv", BASE, [[13, "s13", "hot"], [14, "s14", 1.5]]),
    }


def by_hand(policy: str, files: list[Path]) -> list[dict]:
    """What the sink should hold: pandas reads each file as text, and the policy is applied
    to each record here (a value that is not of its column's type, a column the schema
    lacks, a column the file lacks)."""
    rows = []
    for path in files:
        frame = pd.read_csv(path, dtype=str, keep_default_na=False)
        for record in frame.to_dict("records"):
            row: dict[str, object] = {}
            rescued: dict[str, str] = {}
            for name in BASE:
                text = record.get(name, "")
                try:
                    row[name] = CASTS[name](text) if text != "" else None
                except ValueError:
                    row[name], rescued[name] = None, text
            extra = {k: v for k, v in record.items() if k not in BASE and v != ""}
            if policy == "evolve":
                row["region"] = extra.get("region")
            if policy == "rescue":
                rescued.update(extra)
                row["_rescued"] = json.dumps(rescued, sort_keys=True) if rescued else None
            rows.append(row)
    return sorted(rows, key=lambda r: r["id"])


def sink_rows(path: Path) -> list[dict]:
    return sorted(pq.read_table(path).to_pylist(), key=lambda r: r["id"])


def _doc(name: str, dirs, policy: str, **flow_fields) -> dict:
    doc = spec(name, str(dirs.data / "*.csv"), str(dirs.out / "sink"), parallelism=1, **flow_fields)
    doc["format"] = {"type": "csv", "on_schema_change": policy}  # the schema is inferred from a.csv
    return doc


def _changes(run) -> set[tuple[str, str, str]]:
    return set(SchemaChangeRecord.objects.filter(run=run).values_list("column_name", "kind", "policy"))


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["rescue", "ignore"])
def test_gained_lost_and_retyped_columns_land_as_the_policy_says(worker, dirs, policy):
    files = _drifting_files(dirs.data)

    run = run_flow(_doc(f"drift-{policy}", dirs, policy))

    assert run.status == "succeeded", run.message
    assert sink_rows(dirs.out / "sink") == by_hand(policy, list(files.values()))
    assert _changes(run) == {
        ("region", "added", policy),
        ("temperature", "missing", policy),
        ("temperature", "retyped", policy),
    }
    added = SchemaChangeRecord.objects.get(run=run, kind="added")
    assert added.records == 5 and "b.csv line " in added.first_position
    retyped = SchemaChangeRecord.objects.get(run=run, kind="retyped")
    assert (retyped.old_type, retyped.records) == ("DOUBLE", 1)
    assert "d.csv line 2" in retyped.first_position


@pytest.mark.slow
def test_evolve_adds_the_new_column_to_the_sink_and_nulls_the_missing_one(worker, dirs):
    files = _drifting_files(dirs.data)
    files.pop("d").unlink()

    run = run_flow(_doc("drift-evolve", dirs, "evolve"))

    assert run.status == "succeeded", run.message
    assert pq.read_table(dirs.out / "sink").column_names == [*BASE, "region"]
    assert sink_rows(dirs.out / "sink") == by_hand("evolve", list(files.values()))
    assert _changes(run) == {("region", "added", "evolve"), ("temperature", "missing", "evolve")}


@pytest.mark.slow
def test_evolve_fails_on_a_retyped_value_naming_the_column_and_where(worker, dirs):
    _write(dirs.data / "a.csv", BASE, [[1, "s1", 0.5]])
    _write(dirs.data / "d.csv", BASE, [[13, "s13", "hot"]])

    run = run_flow(_doc("drift-evolve-retype", dirs, "evolve"))

    # A value of another type is a bad record, as under fail: the split fails naming the
    # column and where (with skip_errors it would be dead-lettered).
    assert run.status == "failed"
    assert "d.csv line 2" in run.message and "'temperature'" in run.message, run.message
    assert "invalid value 'hot' for DOUBLE" in run.message
    assert not (dirs.out / "sink").exists()


@pytest.mark.slow
def test_fail_fails_the_run_at_the_new_column_naming_it_and_the_file(worker, dirs):
    _drifting_files(dirs.data)

    run = run_flow(_doc("drift-fail", dirs, "fail"))

    assert run.status == "failed"
    assert "b.csv line 1" in run.message and "new column 'region'" in run.message, run.message
    assert "on_schema_change = 'fail'" in run.message
    change = SchemaChangeRecord.objects.get(run=run)
    assert (change.column_name, change.kind, change.policy) == ("region", "added", "fail")
    assert not (dirs.out / "sink").exists()


@pytest.mark.slow
def test_the_webhook_receives_the_runs_schema_changes(worker, dirs, receiver):  # noqa: F811
    _write(dirs.data / "a.csv", BASE, [[1, "s1", 0.5]])
    _write(dirs.data / "b.csv", [*BASE, "region"], [[2, "s2", 1.0, "eu"]])
    doc = _doc("drift-hooked", dirs, "rescue")
    doc["notify"] = {"webhook": receiver.url}

    run = run_flow(doc)

    assert run.status == "succeeded", run.message

    def delivered() -> bool:
        return WebhookDelivery.objects.filter(
            run=run, event="schema.changed", status=DeliveryStatus.DELIVERED
        ).exists()

    wait_until(delivered, 30, lambda: f"deliveries: {list(WebhookDelivery.objects.values())}")
    call = next(c for c in receiver.calls if c.headers["X-Dataflow-Event"] == "schema.changed")
    assert call.body["run"] == run.pk and call.body["event"] == "schema.changed"
    [change] = call.body["schema_changes"]
    assert {k: change[k] for k in ("column", "kind", "old_type", "new_type", "policy", "records")} == {
        "column": "region",
        "kind": "added",
        "old_type": "",
        "new_type": "STRING",
        "policy": "rescue",
        "records": 1,
    }
    assert "b.csv line 2" in change["first_position"]


@pytest.mark.slow
def test_json_lines_gaining_a_field_evolve(worker, dirs):
    (dirs.data / "a.jsonl").write_text('{"id": 1, "sensor": "s1"}\n{"id": 2, "sensor": "s2"}\n')
    (dirs.data / "b.jsonl").write_text(
        '{"id": 3, "sensor": "s3", "battery": 87}\n{"id": 4, "sensor": "s4"}\n'
    )
    doc = spec("drift-json", str(dirs.data / "*.jsonl"), str(dirs.out / "sink"), parallelism=1)
    doc["format"] = {"type": "jsonl", "on_schema_change": "evolve"}

    run = run_flow(doc)

    assert run.status == "succeeded", run.message
    expected = pd.concat([pd.read_json(p, lines=True) for p in sorted(dirs.data.glob("*.jsonl"))])
    expected["battery"] = [None if pd.isna(v) else str(int(v)) for v in expected["battery"]]
    assert sink_rows(dirs.out / "sink") == sorted(expected.to_dict("records"), key=lambda r: r["id"])
    change = SchemaChangeRecord.objects.get(run=run)
    assert (change.column_name, change.kind, change.records) == ("battery", "added", 1)
    assert "b.jsonl line 1" in change.first_position


def _stream_doc(name: str, prefix: str, dirs, policy: str) -> dict:
    return {
        "flow": {"name": name, "parallelism": 1, "batch_size": 50, "poll_interval_ms": 50},
        "source": {"type": "redis_streams", "url": redis_url(), "streams": f"{prefix}orders:*"},
        "format": {"type": "json", "schema": "id BIGINT, customer STRING", "on_schema_change": policy},
        "transform": {"sql": "SELECT * FROM source", "trigger_ms": 200},
        "sink": {"type": "parquet", "path": str(dirs.out / "sink")},
        "stop": {"at": "latest"},
    }


def _orders_gaining_a_field(rds, prefix: str) -> tuple[list[dict], str]:
    """Entries of JSON orders; from the 31st on they carry a field ``coupon`` too. Returns
    the orders and the entry id of the first with a coupon."""
    orders = [
        {"id": i, "customer": f"c{i % 4}", **({"coupon": f"K{i}"} if i >= 30 else {})} for i in range(60)
    ]
    ids = [rds.xadd(f"{prefix}orders:0", {"data": json.dumps(o)}).decode() for o in orders]
    return orders, ids[30]


@pytest.mark.slow
def test_a_stream_gaining_a_field_mid_stream_evolves_the_sink(worker, rds, prefix, dirs):
    orders, first_coupon = _orders_gaining_a_field(rds, prefix)
    flow, _ = flow_apply(spec=_stream_doc("drift-stream", prefix, dirs, "evolve"))

    with Beat():
        run = wait_for_run(flow_start(flow=flow), timeout=120)

    assert run.status == "succeeded", run.message
    expected = pd.DataFrame(orders).astype(object)
    expected = expected.where(expected.notna(), None)
    got = sorted(pq.read_table(dirs.out / "sink").to_pylist(), key=lambda r: r["id"])
    assert got == expected.to_dict("records")
    change = SchemaChangeRecord.objects.get(run=run)
    assert (change.column_name, change.kind, change.records) == ("coupon", "added", 30)
    assert change.first_position == f"stream {prefix}orders:0 entry {first_coupon}"


@pytest.mark.slow
def test_a_stream_gaining_a_field_fails_under_fail_naming_the_entry(worker, rds, prefix, dirs):
    _, first_coupon = _orders_gaining_a_field(rds, prefix)
    flow, _ = flow_apply(spec=_stream_doc("drift-stream-fail", prefix, dirs, "fail"))

    with Beat():
        run = wait_for_run(flow_start(flow=flow), timeout=120)

    assert run.status == "failed"
    assert f"entry {first_coupon}" in run.message and "new column 'coupon'" in run.message, run.message
    change = SchemaChangeRecord.objects.get(run=run)
    assert (change.column_name, change.kind, change.policy) == ("coupon", "added", "fail")
