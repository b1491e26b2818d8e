"""Expectations (``[[expect]]``) on a flow's output: warn, drop and fail, end to end with a
real Celery worker, PostgreSQL, Redis and Spark; the sink read with pandas. The refusals at
save need only the database."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from dataflow.models import DeadLetter, RunStatus
from dataflow.services.dead_letters import dead_letters_replay
from dataflow.services.flows import flow_apply
from dataflow.services.toml_export import flow_toml
from dataflow.services.toml_import import flow_import, flow_spec_from_toml
from source_support.errors import ConfigError
from tests.factories import DataFlowFactory, DeadLetterFactory, FlowRunFactory
from tests.helpers import SCHEMA, run_flow, write_csv


def _doc(dirs, expect: list[dict], *, name: str = "checked") -> dict:
    return {
        "flow": {"name": name, "parallelism": 2, "poll_interval_ms": 50},
        "source": {"type": "files", "path": str(dirs.data / "*.csv")},
        "format": {"type": "csv", "schema": SCHEMA},
        "transform": {"sql": "SELECT id, sensor, temperature FROM source"},
        "sink": {"type": "parquet", "path": str(dirs.out / name)},
        "expect": expect,
    }


@pytest.mark.slow
def test_drop_leaves_exactly_the_failing_rows_in_dead_letters(worker, dirs):
    rows = write_csv(dirs.data / "readings.csv", range(100))
    run = run_flow(
        _doc(
            dirs,
            [
                {"name": "no threes", "check": "id % 10 != 3", "on_fail": "drop"},
                {"name": "cool", "check": "temperature < 40", "on_fail": "warn"},
            ],
        )
    )
    assert run.status == RunStatus.SUCCEEDED, run.message
    dropped = {r for r in rows if r[0] % 10 == 3}
    sink = pd.read_parquet(dirs.out / "checked")
    assert {tuple(r) for r in sink[["id", "sensor", "temperature"]].itertuples(index=False)} == set(
        rows
    ) - dropped
    letters = DeadLetter.objects.filter(run=run)
    assert {letter.expectation for letter in letters} == {"no threes"}
    assert {tuple(json.loads(letter.raw).values()) for letter in letters} == dropped
    assert run.rows_written == 90
    # each expectation counts over the whole output: temperatures of 40 and up are ids 80..99
    assert run.expectation_counts == {
        "no threes": {"passed": 90, "failed": 10, "on_fail": "drop"},
        "cool": {"passed": 80, "failed": 20, "on_fail": "warn"},
    }


@pytest.mark.slow
def test_fail_fails_the_run_and_publishes_nothing(worker, dirs):
    write_csv(dirs.data / "readings.csv", range(50))
    run = run_flow(_doc(dirs, [{"name": "small ids", "check": "id < 45", "on_fail": "fail"}]))
    assert run.status == RunStatus.FAILED
    assert "expectation 'small ids' failed on 5 of 50 rows; nothing was published" in run.message
    assert not (dirs.out / "checked").exists() or not any((dirs.out / "checked").rglob("*.parquet"))
    assert not DeadLetter.objects.filter(run=run).exists()


@pytest.mark.parametrize(
    ("check", "why"),
    [
        ("temperature + 1", "is not a boolean expression"),
        ("reflect('java.lang.Runtime', 'getRuntime') IS NOT NULL", "reflect"),
        ("humidity > 3", "refers to column 'humidity'"),
        ("id IN (SELECT id FROM source)", "subquery"),
        ("count(*) > 1", "one output row"),
    ],
)
def test_bad_check_is_refused_at_save_naming_the_expectation(db, dirs, check, why):
    doc = _doc(
        dirs, [{"name": "fine", "check": "id > 0"}, {"name": "wrong", "check": check, "on_fail": "drop"}]
    )
    with pytest.raises(ConfigError) as refused:
        flow_apply(spec=doc)
    assert refused.value.field == "expect[1].check"
    assert "expectation 'wrong'" in str(refused.value)
    assert why in str(refused.value)


@pytest.mark.parametrize(
    ("expect", "field"),
    [
        ([{"name": "x", "check": "id > 0", "on_fail": "explode"}], "expect[0].on_fail"),
        ([{"name": "x", "check": "id > 0", "severity": "high"}], "expect[0].severity"),
        ([{"name": "x", "check": "id > 0"}, {"name": "x", "check": "id > 1"}], "expect[1].name"),
        ([{"check": "id > 0"}], "expect[0].name"),
    ],
)
def test_bad_expectation_fields_are_refused(db, dirs, expect, field):
    with pytest.raises(ConfigError) as refused:
        flow_apply(spec=_doc(dirs, expect))
    assert refused.value.field == field


def test_expectations_are_stored_and_exported(db, dirs):
    flow, _ = flow_apply(spec=_doc(dirs, [{"name": "positive", "check": "temperature >= 0"}]))
    assert flow.expectations == [{"name": "positive", "check": "temperature >= 0", "on_fail": "warn"}]


def test_rows_an_expectation_dropped_are_not_replayed(db, dirs):
    flow = DataFlowFactory(expect=[{"name": "small", "check": "id < 5", "on_fail": "drop"}])
    run = FlowRunFactory(flow=flow)
    letter = DeadLetterFactory(flow=flow, run=run, expectation="small", raw='{"id": 9}')
    with pytest.raises(ConfigError) as refused:
        dead_letters_replay(flow=flow, ids=[letter.pk])
    assert refused.value.field == "ids"
    assert "an expectation dropped" in refused.value.reason


def test_expectations_export_as_toml_and_import_back(db, dirs):
    flow, _ = flow_apply(
        spec=_doc(dirs, [{"name": "positive", "check": "temperature >= 0", "on_fail": "fail"}])
    )
    text = flow_toml(flow=flow)
    assert '[[expect]]\nname = "positive"\ncheck = "temperature >= 0"\non_fail = "fail"\n' in text
    again, created = flow_import(spec=flow_spec_from_toml(text))
    assert not created and again.expectations == flow.expectations
