"""flow_delete, and the tick of a flow deleted some other way removing itself."""

from __future__ import annotations

import pytest
from django_celery_beat.models import PeriodicTask

from dataflow.models import DataFlow, FlowRun, RunStatus
from dataflow.services.cleanup import run_landing_dir
from dataflow.services.flows import flow_delete, flow_start
from dataflow.services.runs.tick import flow_tick
from tests.factories import DataFlowFactory
from tests.helpers import write_csv


def _running_flow(dirs, name: str) -> tuple[DataFlow, FlowRun]:
    write_csv(dirs.data / f"{name}.csv", range(10))
    flow = DataFlowFactory(name=name, source_path=str(dirs.data / f"{name}.csv"))
    return flow, flow_start(flow=flow)


@pytest.mark.django_db
def test_flow_delete_stops_the_run_and_removes_schedule_and_landed_files(dirs):
    flow, run = _running_flow(dirs, "doomed")
    landed = run_landing_dir(run) / "split" / "0.parquet"
    landed.parent.mkdir(parents=True)
    landed.write_bytes(b"x" * 100)
    other, other_run = _running_flow(dirs, "stays")

    flow_delete(flow=flow)

    assert not DataFlow.objects.filter(pk=flow.pk).exists()
    assert not PeriodicTask.objects.filter(name="dataflow-tick:doomed").exists()
    assert not run_landing_dir(run).exists()
    assert FlowRun.objects.get(pk=other_run.pk).status == RunStatus.READING
    assert PeriodicTask.objects.filter(name="dataflow-tick:stays", enabled=True).exists()


@pytest.mark.django_db
def test_the_tick_of_a_flow_deleted_without_the_service_removes_its_periodic_task(dirs):
    flow, _ = _running_flow(dirs, "orphan")
    _running_flow(dirs, "alive")
    DataFlow.objects.filter(pk=flow.pk).delete()  # e.g. a raw delete in a shell

    flow_tick(flow_id=flow.pk)

    assert not PeriodicTask.objects.filter(name="dataflow-tick:orphan").exists()
    assert PeriodicTask.objects.filter(name="dataflow-tick:alive").exists()
