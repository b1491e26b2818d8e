"""``flows`` and ``flowctl status`` say when a flow is stale or its schedule paused;
``flowctl health`` runs the freshness check now."""

from __future__ import annotations

import io
import json
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

from dataflow.models import DataFlow, RunStatus
from dataflow.services.health import flows_health_check
from dataflow.services.runs.finish import run_finish
from tests.factories import DataFlowFactory, FlowRunFactory

pytestmark = pytest.mark.django_db


def _out(*args: str) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def test_flows_and_status_show_a_stale_flow(dirs):
    flow = DataFlowFactory(name="late", freshness="15 minutes")
    DataFlowFactory(name="on-time", freshness="15 minutes")
    DataFlow.objects.filter(pk=flow.pk).update(created_at=timezone.now() - timedelta(hours=1))
    flows_health_check()

    listed = _out("flows")
    status = _out("flowctl", "status", "late")

    assert "    stale: the sink has not moved for 15 minutes" in listed
    assert listed.count("stale:") == 1
    assert "stale: since " in status
    assert "stale" not in _out("flowctl", "status", "on-time")


def test_status_shows_a_paused_schedule(dirs):
    flow = DataFlowFactory(name="flaky", schedule={"every": "1 hour"}, disable_after_failures=1)
    run = FlowRunFactory(flow=flow, running=True)
    run_finish(run=run, status=RunStatus.FAILED, message="boom")

    status = _out("flowctl", "status", "flaky").splitlines()
    assert any(
        line.startswith("schedule paused: 1 run failed in a row (the latest: run ") for line in status
    ), status
    assert "schedule paused: 1 run failed in a row" in _out("flows")


def test_flowctl_health_runs_the_check_now_and_says_what_changed(dirs):
    late = DataFlowFactory(name="late", freshness="15 minutes")
    DataFlowFactory(name="on-time", freshness="15 minutes")
    DataFlow.objects.filter(pk=late.pk).update(created_at=timezone.now() - timedelta(hours=1))

    first = _out("flowctl", "health")
    again = _out("flowctl", "health", "--json")

    assert first == "stale: late\n"
    assert json.loads(again) == {"stale": [], "fresh": []}
    late.refresh_from_db()
    assert late.stale_since is not None


def test_flowctl_health_takes_no_flow_name(dirs):
    with pytest.raises(CommandError, match="health takes no flow name"):
        _out("flowctl", "health", "late")
