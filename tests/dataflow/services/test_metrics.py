"""Metric samples: what the charts and the records/s figures are drawn from."""

from __future__ import annotations

from datetime import timedelta

import pytest

from dataflow.models import FlowRun, MetricSample, SplitStatus
from dataflow.services.flows import flow_start
from dataflow.services.metrics import metrics_sample
from tests.factories import DataFlowFactory, SplitFactory
from tests.helpers import write_csv


@pytest.mark.django_db
def test_a_runs_first_sample_measures_records_per_second_since_the_run_started(dirs):
    """A run shorter than one sample interval has one sample: its rate is what the run read
    per second, not 0 (which the dashboard drew as a ramp from 0)."""
    write_csv(dirs.data / "a.csv", range(10))
    run = flow_start(flow=DataFlowFactory(source_path=str(dirs.data / "a.csv")))
    FlowRun.objects.filter(pk=run.pk).update(started_at=run.started_at - timedelta(seconds=4))
    run.refresh_from_db()
    SplitFactory(run=run, records_read=8_000, status=SplitStatus.FINISHED, position=1000)

    metrics_sample(run=run)

    first = MetricSample.objects.get(run=run, split_id="")
    assert first.records_per_s == pytest.approx(8_000 / (first.at - run.started_at).total_seconds())
    assert first.records_per_s > 0
