"""The dashboard shows a user the flows they own (staff: all), and its JSON keeps a page fresh."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from dataflow.models import FlowStatus, SplitStatus
from tests.factories import (
    PASSWORD,
    DataFlowFactory,
    FlowRunFactory,
    MetricSampleFactory,
    SplitFactory,
    UserFactory,
    dashboard_flow,
    splits_bulk,
)

pytestmark = pytest.mark.django_db


@pytest.fixture()
def owner(client):
    user = UserFactory(username="ada")
    client.force_login(user)
    return user


@pytest.mark.parametrize("path", ["/", "/live.json", "/flows/any-flow/", "/flows/any-flow/live.json"])
def test_anonymous_user_is_sent_to_the_login_page(client, path):
    response = client.get(path)

    assert response.status_code == 302
    assert response["Location"] == f"/login/?next={path}"


def test_owner_logs_in_on_the_dashboard_login_page_and_lands_on_the_flow_list(client):
    DataFlowFactory(name="ada-orders", owner=UserFactory(username="ada"))

    response = client.post("/login/", {"username": "ada", "password": PASSWORD, "next": "/"}, follow=True)

    assert response.redirect_chain == [("/", 302)]
    assert "ada-orders" in response.content.decode()


def test_wrong_password_is_refused_with_a_message(client):
    UserFactory(username="ada")

    response = client.post("/login/", {"username": "ada", "password": "nope"})

    assert response.status_code == 200
    assert "do not match an account" in response.content.decode()


def test_flow_list_shows_only_the_users_own_flows(client, owner):
    DataFlowFactory(name="ada-orders", owner=owner, status=FlowStatus.PAUSED)
    DataFlowFactory(name="bob-clicks", owner=UserFactory(username="bob"))

    response = client.get("/")

    page = response.content.decode()
    assert response.status_code == 200
    assert 'href="/flows/ada-orders/"' in page
    assert '<span class="badge badge-paused">paused</span>' in page
    assert "bob-clicks" not in page


def test_staff_see_every_flow(client):
    client.force_login(UserFactory(username="root", is_staff=True))
    DataFlowFactory(name="ada-orders", owner=UserFactory(username="ada"))
    DataFlowFactory(name="toml-flow", owner=None)

    page = client.get("/").content.decode()

    assert "ada-orders" in page
    assert "toml-flow" in page


def test_flow_list_shows_records_per_second_and_lag_of_a_reading_run(client, owner):
    run = DataFlowFactory(name="ada-orders", owner=owner, running=True).runs.get()
    SplitFactory(run=run, records_read=1_234_567)
    MetricSampleFactory(run=run, at=timezone.now() - timedelta(seconds=10), records_per_s=10.0, lag=9)
    MetricSampleFactory(run=run, records_per_s=12345.6, lag=4200)

    page = client.get("/").content.decode()
    flows = client.get("/live.json").json()["flows"]

    assert "12,345.6" in page and "4,200" in page and "1,234,567" in page
    assert flows[0]["name"] == "ada-orders"
    assert (flows[0]["records_per_s"], flows[0]["lag"], flows[0]["records_read"]) == (
        12345.6,
        4200,
        1_234_567,
    )


def test_paused_run_shows_its_lag_but_no_records_per_second(client, owner):
    run = FlowRunFactory(
        flow=DataFlowFactory(owner=owner, status=FlowStatus.PAUSED), running=True, paused_at=timezone.now()
    )
    MetricSampleFactory(run=run, records_per_s=500.0, lag=10)

    flow = client.get("/live.json").json()["flows"][0]

    assert flow["status"] == "paused"
    assert flow["run"]["paused"] is True
    assert flow["records_per_s"] is None
    assert flow["lag"] == 10


def test_flow_list_json_carries_the_rows_to_redraw(client, owner):
    DataFlowFactory(name="ada-orders", owner=owner)

    data = client.get("/live.json").json()

    assert set(data) == {"now", "flows", "html"}
    assert set(data["html"]) == {"flows", "summary"}
    assert 'data-flow="ada-orders"' in data["html"]["flows"]
    assert set(data["flows"][0]) >= {"name", "status", "run", "records_read", "records_per_s", "lag"}


def test_another_users_flow_is_not_found(client, owner):
    DataFlowFactory(name="bob-clicks", owner=UserFactory(username="bob"))

    assert client.get("/flows/bob-clicks/").status_code == 404
    assert client.get("/flows/bob-clicks/live.json").status_code == 404


@pytest.mark.slow
def test_flow_page_shows_splits_runs_and_errors(client, owner):
    dashboard_flow(owner=owner, name="ada-orders")

    response = client.get("/flows/ada-orders/")

    page = response.content.decode()
    assert response.status_code == 200
    assert '<h1 class="flow-title">ada-orders' in page
    assert 'aria-valuenow="62"' in page  # the split read to 62 % of its byte range
    assert "62% of 64.0\xa0MB" in page
    assert "line 84,112: expected 3 fields, saw 5" in page  # a failed split's error
    assert "the file changed while it was read" in page  # a failed run's message
    assert "could not convert &#x27;twelve euros&#x27; to double" in page  # a dead letter
    assert "3 in all" in page
    assert 'id="flow-data"' in page  # the charts' first data
    assert "Edit, start or stop" not in page  # admin links are for staff


def test_flow_page_links_staff_to_the_admin(client):
    client.force_login(UserFactory(username="root", is_staff=True))
    flow = DataFlowFactory(name="ada-orders")

    page = client.get("/flows/ada-orders/").content.decode()

    assert f'href="/admin/dataflow/dataflow/{flow.pk}/change/"' in page


def test_flow_json_has_status_series_runs_errors_and_parts(client, owner):
    flow = dashboard_flow(owner=owner, name="ada-orders", samples=5)
    run = flow.runs.order_by("-id").first()

    data = client.get("/flows/ada-orders/live.json").json()

    assert set(data) >= {
        "flow",
        "run",
        "splits",
        "series",
        "series_reset",
        "latest_sample",
        "runs",
        "errors",
        "html",
    }
    assert set(data["html"]) == {"state", "kpis", "expectations", "splits", "runs", "errors"}
    assert data["flow"]["name"] == "ada-orders"
    assert data["run"]["id"] == run.pk
    assert data["series_reset"] is True
    assert len(data["series"]) == 5
    assert set(data["series"][0]) >= {"at", "records_per_s", "lag", "records_read", "latency_ms"}
    assert [r["status"] for r in data["runs"]] == ["reading", "failed", "succeeded"]
    assert data["runs"][2]["duration_s"] == 14 * 60 + 17
    progress = {s["split_id"]: (s["state"], s["progress"]) for s in data["splits"]}
    assert progress["/srv/data/orders/2024-01.csv@0"] == ("finished", 1.0)
    assert progress["/srv/data/orders/2024-02.csv@0"] == ("assigned", pytest.approx(0.62, abs=0.01))
    assert progress["/srv/data/orders/2024-03.csv@0"] == ("assigned", 0.125)
    assert data["errors"]["dead_letters_total"] == 3
    assert data["errors"]["runs"][0]["status"] == "failed"


@pytest.mark.slow
def test_flow_json_sends_only_samples_after_since_of_the_same_run(client, owner):
    flow = dashboard_flow(owner=owner, name="ada-orders", samples=6)
    run = flow.runs.order_by("-id").first()
    first = client.get("/flows/ada-orders/live.json").json()["series"]

    later = client.get("/flows/ada-orders/live.json", {"run": run.pk, "since": first[3]["at"]}).json()
    older_run = client.get("/flows/ada-orders/live.json", {"run": run.pk - 1, "since": first[3]["at"]}).json()

    assert later["series_reset"] is False
    # The JSON keeps milliseconds, so the sample at "since" itself may come again.
    assert [s["at"] for s in later["series"]][-2:] == [first[4]["at"], first[5]["at"]]
    assert len(later["series"]) <= 3
    assert older_run["series_reset"] is True
    assert len(older_run["series"]) == 6


@pytest.mark.slow
def test_split_without_a_byte_range_has_no_progress(client, owner, settings):
    settings.DATAFLOW_ALLOWED_INTERNAL_ADDRESSES = ["127.0.0.1"]  # ada's connection to the tests' Redis
    run = FlowRunFactory(flow=DataFlowFactory(name="ada-stream", owner=owner, stream=True), running=True)
    SplitFactory(run=run, split_id="orders:0", payload={"stream": "orders", "shard": 0})
    SplitFactory(
        run=run, split_id="orders:1", payload={"stream": "orders", "shard": 1}, status=SplitStatus.FINISHED
    )

    splits = client.get("/flows/ada-stream/live.json").json()["splits"]

    assert [(s["split_id"], s["size"], s["progress"]) for s in splits] == [
        ("orders:0", None, None),
        ("orders:1", None, 1.0),
    ]


def test_flow_that_never_ran_says_so(client, owner):
    DataFlowFactory(name="ada-new", owner=owner)

    page = client.get("/flows/ada-new/").content.decode()
    data = client.get("/flows/ada-new/live.json").json()

    assert "This flow has not run yet." in page
    assert (data["run"], data["series"], data["runs"]) == (None, [], [])


def test_run_status_badges_use_the_run_states(client, owner):
    flow = DataFlowFactory(name="ada-orders", owner=owner)
    FlowRunFactory(flow=flow, stopped=True)

    page = client.get("/flows/ada-orders/").content.decode()

    assert '<span class="badge badge-stopped">stopped</span>' in page
    assert "stopped by request" in page


def _finished_run(owner, *, records: int, seconds: int, last_rate: float):
    """A run that read ``records`` in ``seconds`` and ended; its last sample measured
    ``last_rate`` (the last interval's rate, not the run's)."""
    flow = DataFlowFactory(name="files-once", owner=owner, status=FlowStatus.SUCCEEDED)
    run = FlowRunFactory(flow=flow, records_read=records, rows_written=5, took=timedelta(seconds=seconds))
    MetricSampleFactory(
        run=run, at=run.finished_at, records_read=records, records_per_s=last_rate, latency_ms=1800
    )
    return run


def test_finished_run_has_the_same_records_per_second_on_the_dashboard_and_the_admin(client, owner):
    run = _finished_run(owner, records=12_000, seconds=60, last_rate=3.0)
    owner.is_staff = owner.is_superuser = True
    owner.save()

    listed = client.get("/live.json").json()["flows"][0]["records_per_s"]
    page = client.get("/flows/files-once/live.json").json()["run"]["records_per_s"]
    admin = client.get(f"/admin/dataflow/flowrun/{run.pk}/progress/").json()["rate"]["records_per_s"]
    admin_page = client.get(f"/admin/dataflow/flowrun/{run.pk}/change/").content.decode()

    assert listed == page == admin == 200.0  # 12,000 records over the run's 60 s
    assert 'data-field="records_per_s">200</dd>' in admin_page
    assert 'data-kpi="records_per_s">200<' in client.get("/flows/files-once/").content.decode()


def test_finished_stream_shows_its_last_latency_as_final_not_current(client, owner):
    _finished_run(owner, records=500, seconds=30, last_rate=0.0)

    page = client.get("/flows/files-once/").content.decode()

    note = re.search(r'data-kpi="latency">([^<]*)<', page).group(1)
    assert note.startswith("final, when the run ended")
    assert note.endswith("; last latency 1,800 ms")


def test_favicon_is_served_so_no_page_logs_a_404(client):
    response = client.get("/favicon.ico")

    assert response.status_code == 200
    assert response["Content-Type"] == "image/x-icon"
    assert b"".join(response.streaming_content)[:4] == b"\0\0\1\0"  # an ICO file's header
    assert '<link rel="icon" href="/favicon.ico">' in client.get("/login/").content.decode()
    assert '<link rel="icon" href="/favicon.ico">' in client.get("/admin/login/").content.decode()


@pytest.mark.slow
def test_flow_page_makes_as_many_queries_for_3000_splits_as_for_10(
    client, owner, django_assert_max_num_queries
):
    # Issue 25, 2.2: a page's cost must not grow with the run's splits.
    run = FlowRunFactory(flow=DataFlowFactory(name="ada-wide", owner=owner), running=True)
    splits_bulk(run, 10)
    with CaptureQueriesContext(connection) as few:
        assert client.get("/flows/ada-wide/live.json").status_code == 200
    splits_bulk(run, 2_990, start=10)

    with django_assert_max_num_queries(len(few.captured_queries)):
        data = client.get("/flows/ada-wide/live.json").json()
    with django_assert_max_num_queries(len(few.captured_queries) + 2):  # the page: its session and user
        assert client.get("/flows/ada-wide/").status_code == 200

    assert len(data["splits"]) == 200 and data["splits_by_state"] == {"assigned": 3_000}
