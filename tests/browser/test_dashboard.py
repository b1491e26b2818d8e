"""A person's view of the dashboard: log in, see the flows, open one, watch it update."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from dataflow.models import DataFlow, FlowStatus, RunStatus
from tests.factories import (
    PASSWORD,
    DataFlowFactory,
    FlowRunFactory,
    MetricSampleFactory,
    UserFactory,
    dashboard_flow,
)

pytestmark = pytest.mark.timeout(90)


def _fleet(owner) -> None:
    """Flows in each state, as the list shows them."""
    dashboard_flow(owner=owner, name="orders-daily")
    paused = DataFlowFactory(
        name="clicks-stream",
        owner=owner,
        status=FlowStatus.PAUSED,
        stream=True,
        description="Click events from the web shop, per minute",
    )
    run = FlowRunFactory(flow=paused, running=True, paused_at=timezone.now())
    MetricSampleFactory(run=run, records_per_s=0, lag=182_400)
    invoices = DataFlowFactory(
        name="invoices-monthly",
        owner=owner,
        status=FlowStatus.SUCCEEDED,
        sink_type="csv",
        description="Invoices as CSV files for the accounting team",
    )
    FlowRunFactory(
        flow=invoices,
        status=RunStatus.SUCCEEDED,
        records_read=48_210,
        rows_written=48_210,
        finished_at=timezone.now() - timedelta(hours=5),
    )
    failed = DataFlowFactory(name="sensor-backfill", owner=owner, status=FlowStatus.FAILED, description="")
    FlowRunFactory(
        flow=failed,
        status=RunStatus.FAILED,
        message="no live reader for 300 s",
        records_read=18_000,
        finished_at=timezone.now() - timedelta(minutes=42),
    )
    DataFlowFactory(name="partner-feed", owner=owner, status=FlowStatus.IDLE, description="Not started yet")
    DataFlowFactory(name="someone-elses", owner=UserFactory(username="bob"))


def _log_in(page, username: str) -> None:
    page.get("/")
    page.wait_for("form input[name=username]").send_keys(username)
    page.find("form input[name=password]").send_keys(PASSWORD)
    page.click("form button[type=submit]")
    page.wait_for("table.flows-table")


def test_owner_sees_their_flows_and_a_flow_page_that_updates_itself(page, settings):
    settings.DATAFLOW_ALLOWED_INTERNAL_ADDRESSES = ["127.0.0.1"]  # ada's stream flow's connection
    owner = UserFactory(username="ada")
    _fleet(owner)

    _log_in(page, "ada")
    names = [a.text for a in page.find_all("a.flow-link")]
    assert names == ["clicks-stream", "invoices-monthly", "orders-daily", "partner-feed", "sensor-backfill"]
    assert page.find('tr[data-flow="clicks-stream"] .badge').text.lower() == "paused"
    # The list keeps itself up to date too.
    DataFlow.objects.filter(name="partner-feed").update(status=FlowStatus.RUNNING)
    page.wait_until(
        lambda: page.find('tr[data-flow="partner-feed"] .badge').text.lower() == "running",
        message="the flow list did not show the new state",
    )
    page.screenshot("dashboard-index")
    page.screenshot("dashboard-index-narrow", width=420)

    page.click('a.flow-link[href="/flows/orders-daily/"]')
    page.wait_until(
        lambda: page.points("chart-throughput") == 90,
        message="the throughput chart never drew its 90 samples",
    )
    assert page.js("return document.querySelector('#chart-throughput canvas').width") > 0
    assert page.points("chart-lag") == 90
    assert len(page.find_all("#runs-timeline .timeline-seg")) == 3
    assert len(page.find_all(".splits-table tbody tr")) == 4

    # A sample taken after the page loaded shows up without a reload.
    run = owner.dataflows.get(name="orders-daily").runs.order_by("-id").first()
    MetricSampleFactory(run=run, records_per_s=9000.0, lag=1000)
    page.wait_until(
        lambda: page.points("chart-throughput") == 91,
        message="the page did not pick up the new sample",
    )
    assert page.find("[data-live-status]").text.startswith("updated")
    assert page.find('[data-kpi="records_per_s"]').text == "9,000"
    page.screenshot("dashboard-flow")
    page.screenshot("dashboard-flow-narrow", width=420)

    assert page.console_errors() == []


def test_flow_that_never_ran_shows_empty_charts_without_errors(page):
    DataFlowFactory(name="partner-feed", owner=UserFactory(username="ada"))

    _log_in(page, "ada")
    page.get("/flows/partner-feed/")
    page.wait_for("#chart-throughput canvas")

    assert "is-empty" in page.find("#chart-throughput").get_attribute("class")
    assert page.find("[data-part=splits]").text == "This flow has not run yet."
    page.screenshot("dashboard-flow-never-ran", full_page=False)
    assert page.console_errors() == []


def test_staff_logged_in_on_the_admin_see_a_finished_run_and_the_admin_links(page):
    owner = UserFactory(username="ada")
    UserFactory(username="root", is_staff=True)
    run = FlowRunFactory(
        flow=DataFlowFactory(name="files-once", owner=owner, status=FlowStatus.SUCCEEDED),
        status=RunStatus.SUCCEEDED,
        records_read=135_600,
        rows_written=135_600,
        finished_at=timezone.now(),
    )
    now = timezone.now()
    for i in range(12):
        MetricSampleFactory(run=run, at=now - timedelta(seconds=10 * (12 - i)), records_per_s=1000 + 50 * i)

    page.get("/admin/login/?next=/flows/files-once/")
    page.wait_for("#id_username").send_keys("root")
    page.find("#id_password").send_keys(PASSWORD)
    page.click("input[type=submit]")
    page.wait_until(lambda: page.points("chart-throughput") == 12)

    assert "is-empty" in page.find("#chart-lag").get_attribute("class")
    assert "is-empty" not in page.find("#chart-throughput").get_attribute("class")
    assert [a.text for a in page.find_all(".actions a")] == ["Edit, start or stop", "Runs", "Dead letters"]
    assert page.find('[data-kpi="records_read"]').text == "135,600"
    page.screenshot("dashboard-flow-staff", full_page=False)
    assert page.console_errors() == []


def test_run_shorter_than_a_sample_is_drawn_as_measured_not_as_a_ramp_from_zero(page):
    """A 5 s run has two samples: one as it started (nothing read yet) and its last, whose
    records/s is the rate since the first. The chart holds each rate over the time it was
    measured; it draws no line from 0 up to the rate, which nobody measured."""
    owner = UserFactory(username="ada")
    run = FlowRunFactory(
        flow=DataFlowFactory(name="quick-files", owner=owner, status=FlowStatus.SUCCEEDED),
        records_read=5_000,
        took=timedelta(seconds=5),
    )
    start, end = run.started_at, run.finished_at
    MetricSampleFactory(run=run, at=start + timedelta(seconds=1), records_read=0, records_per_s=0)
    MetricSampleFactory(run=run, at=end, records_read=5_000, records_per_s=1250)

    _log_in(page, "ada")
    page.get("/flows/quick-files/")
    page.wait_until(lambda: page.points("chart-throughput") == 2)

    xs, ys = page.js("return window.dashboardCharts.throughput.data;")
    drawn = list(zip(xs, ys, strict=True))
    assert (xs[0], xs[-1]) == (
        pytest.approx(start.timestamp(), abs=0.001),
        pytest.approx(end.timestamp(), abs=0.001),
    )
    # 0 from the start to the first sample, then 1,250/s from there to the end.
    assert [y for _, y in drawn] == [0, 0, 1250, 1250]
    assert drawn[2][0] - drawn[1][0] < 0.01
    page.screenshot("dashboard-short-run", full_page=False)
    assert page.console_errors() == []


def test_admin_pages_log_no_console_errors(page):
    """No 404 for /favicon.ico (the admin's pages named no icon), nor anything else."""
    UserFactory(username="root", is_staff=True, is_superuser=True)

    page.get("/admin/login/")
    page.wait_for("#id_username").send_keys("root")
    page.find("#id_password").send_keys(PASSWORD)
    page.click("input[type=submit]")
    page.wait_for("#content")
    page.get("/admin/dataflow/dataflow/")
    page.wait_for("#changelist")

    assert page.console_errors() == []
