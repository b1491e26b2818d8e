"""What ``runflow``'s progress line shows, phase by phase, for a bounded and a stream flow."""

from __future__ import annotations

import re

import pytest

from dataflow.services.flows import flow_apply
from tests.e2e.fleet import fleet_env
from tests.e2e.streams_helpers import Producer, stream_spec
from tests.e2e.test_runflow import run_manage
from tests.factories import DataFlowFactory
from tests.helpers import write_csv

pytestmark = pytest.mark.django_db(transaction=True)


def _runflow_screens(name: str) -> list[str]:
    """Each state of the progress line that ``runflow NAME --until-done`` drew (tqdm
    redraws a line after a carriage return)."""
    done = run_manage(fleet_env(), "runflow", name, "--until-done")
    return [screen.strip() for screen in re.split(r"[\r\n]", done.stderr) if screen.strip()]


def test_only_a_bounded_runs_reading_shows_a_percentage(dirs):
    for i in range(4):
        write_csv(dirs.data / f"part-{i}.csv", range(i * 1000, (i + 1) * 1000))
    DataFlowFactory(name="phases")

    screens = _runflow_screens("phases")

    assert any(s.startswith("reading:") and "%|" in s for s in screens), screens
    later = [s for s in screens if s.startswith(("starting Spark", "transforming", "succeeded"))]
    assert later, screens
    assert not [s for s in later if "%" in s], "a phase after reading has no percentage"


def test_a_stream_runs_reading_shows_rate_lag_and_epoch_not_a_percentage(dirs, rds, prefix):
    Producer(rds, prefix, streams=2).write(400)
    doc = stream_spec("stream-phases", prefix, dirs.out / "sink")
    doc["stop"] = {"after_records": 400}
    flow_apply(spec=doc)

    screens = _runflow_screens("stream-phases")

    reading = [s for s in screens if s.startswith("reading")]
    assert reading, screens
    assert not [s for s in reading if "%" in s or "/2" in s], reading
    assert all(s.startswith("reading (stream): [") for s in reading), reading
    assert any("epoch=" in s or "no epoch yet" in s for s in reading), reading
    # The line is true at the end: an ended run's line never shows the lag, rate or epoch of
    # a moment before (each redraw is one state), and after reading no sampled rate or lag.
    ended = [s for s in screens if s.startswith(("succeeded", "failed", "stopped"))]
    assert ended and all(s.endswith("records=400 errors=0]") for s in ended), ended
    after_reading = [s for s in screens if s.startswith(("starting Spark", "transforming"))]
    assert not [s for s in after_reading if "lag=" in s or "rec/s" in s], after_reading
