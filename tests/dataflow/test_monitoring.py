"""/metrics (Prometheus text format) and /healthz, against real PostgreSQL and Redis."""

from __future__ import annotations

from datetime import timedelta

import pytest
import redis
from django.conf import settings
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from dataflow import monitoring
from dataflow.beat import Scheduler
from dataflow.celery import app as celery_app
from dataflow.models import FlowStatus, SplitStatus
from dataflow.redis_client import get_redis
from dataflow.services.context import coordinator_for
from tests.factories import DataFlowFactory, FlowRunFactory, MetricSampleFactory, SplitFactory, UserFactory

pytestmark = pytest.mark.django_db

#: The scrapers' token in these tests (a deployment sets DATAFLOW_METRICS_TOKEN).
SCRAPE_TOKEN = "scrape-token"


@pytest.fixture(autouse=True)
def _metrics_token(settings):
    settings.DATAFLOW_METRICS_TOKEN = SCRAPE_TOKEN
    settings.DATAFLOW_METRICS_PUBLIC = False


#: The counters of a split that was read to its end, in the tests' runs.
READ = {
    "status": SplitStatus.FINISHED,
    "records_read": 100,
    "bytes_read": 4_000,
    "batches": 2,
    "errors_count": 1,
}


def _scrape(client, **headers) -> dict[tuple[str, frozenset], float]:
    """Every sample of a 200 scrape, by (sample name, labels); with the scrapers' token
    unless ``headers`` say otherwise."""
    headers = headers or {"Authorization": f"Bearer {SCRAPE_TOKEN}"}
    response = client.get("/metrics", headers=headers)
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain; version=")
    families = text_string_to_metric_families(response.content.decode())
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in families
        for sample in family.samples
    }


def _of(samples: dict, name: str, **labels) -> float | None:
    return samples.get((name, frozenset(labels.items())))


@pytest.fixture()
def active_run():
    """A flow that ran twice (succeeded, then failed) and now reads: its active run has a
    split in each state, two pending ones, a lag sample and one reader registered in Redis."""
    flow = DataFlowFactory(name="orders", status=FlowStatus.RUNNING)
    first = FlowRunFactory(flow=flow, took=timedelta(seconds=90), rows_written=500)
    SplitFactory.create_batch(2, run=first, **READ)
    second = FlowRunFactory(flow=flow, failed=True, took=timedelta(seconds=30), rows_written=120)
    SplitFactory(
        run=second, status=SplitStatus.FAILED, records_read=7, bytes_read=70, batches=0, errors_count=3
    )
    run = FlowRunFactory(flow=flow, running=True, splits_pending=2)
    SplitFactory(run=run, **READ)
    SplitFactory(
        run=run, status=SplitStatus.ASSIGNED, records_read=50, bytes_read=500, batches=1, errors_count=0
    )
    SplitFactory.create_batch(3, run=run, status=SplitStatus.UNASSIGNED, errors_count=1)
    now = timezone.now()
    for at, lag in ((now - timedelta(seconds=20), 900), (now - timedelta(seconds=10), 400), (now, None)):
        MetricSampleFactory(run=run, at=at, lag=lag)
    MetricSampleFactory(run=run, split_id="/data/in/x.csv@0", at=now, lag=99_999)
    coordinator = coordinator_for(run)
    assert coordinator.acquire_reader(0, None) is not None
    yield run
    coordinator.purge()


def test_metrics_sum_a_flows_splits_over_its_runs(client, active_run):
    samples = _scrape(client)

    # 2 finished splits of run 1, the failed one of run 2, 5 of the active run (3 read nothing)
    assert _of(samples, "dataflow_records_read_total", flow="orders") == 100 + 100 + 7 + 100 + 50
    assert _of(samples, "dataflow_read_bytes_total", flow="orders") == 4_000 * 3 + 70 + 500
    assert _of(samples, "dataflow_batches_total", flow="orders") == 2 * 3 + 0 + 1
    assert _of(samples, "dataflow_errors_total", flow="orders") == 1 * 3 + 3 + 0 + 3 * 1


def test_metrics_show_the_active_runs_splits_lag_and_readers(client, active_run):
    samples = _scrape(client)

    splits = {
        state: _of(samples, "dataflow_splits", flow="orders", state=state)
        for state in ("finished", "assigned", "unassigned", "failed", "pending")
    }
    assert splits == {"finished": 1, "assigned": 1, "unassigned": 3, "failed": 0, "pending": 2}
    # the newest whole-run sample that knows the lag; a split's own sample is not the run's
    assert _of(samples, "dataflow_lag_records", flow="orders") == 400
    assert _of(samples, "dataflow_live_readers", flow="orders") == 1
    assert _of(samples, "dataflow_flow_status", flow="orders", status="running") == 1
    assert _of(samples, "dataflow_flow_status", flow="orders", status="idle") == 0


def test_metrics_show_the_last_ended_run_and_runs_by_outcome(client, active_run):
    samples = _scrape(client)

    assert _of(samples, "dataflow_last_run_duration_seconds", flow="orders") == 30
    assert _of(samples, "dataflow_last_run_rows_written", flow="orders") == 120
    assert _of(samples, "dataflow_run_duration_seconds_count", flow="orders") == 2
    assert _of(samples, "dataflow_run_duration_seconds_sum", flow="orders") == 90 + 30
    assert _of(samples, "dataflow_runs_total", flow="orders", status="succeeded") == 1
    assert _of(samples, "dataflow_runs_total", flow="orders", status="failed") == 1
    assert _of(samples, "dataflow_runs_total", flow="orders", status="stopped") == 0


def test_every_metric_has_help_text_and_the_dataflow_prefix(client, active_run):
    text = client.get("/metrics", headers={"Authorization": f"Bearer {SCRAPE_TOKEN}"}).content.decode()
    families = list(text_string_to_metric_families(text))

    assert len(families) == 20  # 14 of flows, beat's last tick, and 5 of postgres cdc slots
    for family in families:
        assert family.name.startswith("dataflow_"), family.name
        assert family.documentation, family.name
    assert {f.name for f in families if f.type == "counter"} == {
        "dataflow_records_read",
        "dataflow_read_bytes",
        "dataflow_batches",
        "dataflow_errors",
        "dataflow_runs",
    }
    assert "process_cpu_seconds_total" not in text  # not the default registry


def test_a_flow_without_runs_appears_with_zeros_and_its_status(client):
    DataFlowFactory(name="fresh")

    samples = _scrape(client)

    for counter in ("records_read", "read_bytes", "batches", "errors"):
        assert _of(samples, f"dataflow_{counter}_total", flow="fresh") == 0, counter
    for state in ("finished", "assigned", "unassigned", "failed", "pending"):
        assert _of(samples, "dataflow_splits", flow="fresh", state=state) == 0, state
    assert _of(samples, "dataflow_runs_total", flow="fresh", status="succeeded") == 0
    assert _of(samples, "dataflow_live_readers", flow="fresh") == 0
    assert _of(samples, "dataflow_flow_status", flow="fresh", status="idle") == 1
    assert _of(samples, "dataflow_flow_status", flow="fresh", status="running") == 0
    # unknown, so absent rather than a misleading 0
    assert _of(samples, "dataflow_last_run_duration_seconds", flow="fresh") is None
    assert _of(samples, "dataflow_lag_records", flow="fresh") is None


def test_metrics_want_the_bearer_token_when_one_is_set(client, settings):
    settings.DATAFLOW_METRICS_TOKEN = "s3cret-token"
    DataFlowFactory(name="guarded")

    wrong = client.get("/metrics", headers={"Authorization": "Bearer nope"})
    missing = client.get("/metrics")

    for response in (wrong, missing):
        assert response.status_code == 401
        assert response["WWW-Authenticate"].startswith("Bearer")
        assert b"guarded" not in response.content
    assert (
        _of(_scrape(client, Authorization="Bearer s3cret-token"), "dataflow_live_readers", flow="guarded")
        == 0
    )


def test_metrics_are_closed_to_anonymous_and_non_staff_users_by_default(client, settings):
    settings.DATAFLOW_METRICS_TOKEN = ""  # a deployment that set no token: still closed
    DataFlowFactory(name="bobs-orders")

    anonymous = client.get("/metrics")
    client.force_login(UserFactory(username="alice", perms=()))
    alice = client.get("/metrics")
    empty_bearer = client.get("/metrics", headers={"Authorization": "Bearer "})

    assert anonymous.status_code == 401
    assert anonymous["WWW-Authenticate"].startswith("Bearer")
    assert alice.status_code == 403
    assert empty_bearer.status_code == 403
    for response in (anonymous, alice, empty_bearer):
        assert b"bobs-orders" not in response.content


def test_a_staff_session_reads_the_metrics_without_the_token(client):
    DataFlowFactory(name="bobs-orders")
    client.force_login(UserFactory(username="ops", is_staff=True, perms=()))

    response = client.get("/metrics")

    assert response.status_code == 200
    assert b'flow="bobs-orders"' in response.content


def test_metrics_public_opens_them_to_anyone(client, settings):
    settings.DATAFLOW_METRICS_TOKEN = ""
    settings.DATAFLOW_METRICS_PUBLIC = True
    DataFlowFactory(name="public-flow")

    assert _of(_scrape(client, Accept="text/plain"), "dataflow_live_readers", flow="public-flow") == 0


@pytest.mark.parametrize("flows", [3, 30])
@pytest.mark.slow
def test_a_scrape_makes_as_many_queries_for_30_flows_as_for_3(client, django_assert_max_num_queries, flows):
    for _ in range(flows):
        active = DataFlowFactory(running=True, with_history=True).runs.first()
        SplitFactory(run=active)
        MetricSampleFactory(run=active, lag=5)

    # 5 for the flows, 1 for the cdc flows whose slots are reported (none here)
    with django_assert_max_num_queries(6):
        samples = _scrape(client)

    assert sum(1 for name, _ in samples if name == "dataflow_lag_records") == flows


BEAT_KEY = f"{settings.DATAFLOW_REDIS_NAMESPACE}:beat:last-tick"


@pytest.fixture()
def beat_ticked(transactional_db):
    """Celery beat's scheduler as ``celery -A dataflow beat`` runs it, after one tick (it
    closes the database connection: not inside a test's transaction)."""
    Scheduler(app=celery_app, lazy=True).tick()
    yield
    get_redis().delete(BEAT_KEY)


def _beat_stopped_for(seconds: float) -> None:
    """As if beat's last tick was ``seconds`` ago (on Redis's clock, as beat records it)."""
    client = get_redis()
    now_s, now_us = client.time()
    client.set(BEAT_KEY, now_s + now_us / 1e6 - seconds)


@pytest.mark.slow
def test_healthz_reports_ok_when_database_and_redis_answer_and_beat_ticks(client, beat_ticked):
    response = client.get("/healthz")

    assert response.status_code == 200
    assert response.json() == {"status": "ok", "database": "ok", "redis": "ok", "beat": "ok"}


@pytest.mark.slow
def test_a_beat_down_for_four_minutes_is_degraded_in_healthz_metrics_and_the_dashboard(client, beat_ticked):
    _beat_stopped_for(240)

    response = client.get("/healthz")
    samples = _scrape(client)
    client.force_login(UserFactory(username="alice"))
    page = client.get("/").content.decode()
    live = client.get("/live.json").json()["html"]["summary"]

    assert response.status_code == 200, "this process still serves: not a 503"
    body = response.json()
    assert body["status"] == "degraded"
    assert body["degraded"] == ["beat"]
    assert body["beat"].startswith("no tick for 24"), body
    assert (body["database"], body["redis"]) == ("ok", "ok")
    assert _of(samples, "dataflow_beat_seconds_since_tick") >= 240
    for shown in (page, live):
        assert "Scheduler (celery beat): no tick for 24" in shown


def test_a_beat_that_never_ticked_is_degraded_and_its_gauge_infinite(client):
    get_redis().delete(BEAT_KEY)

    response = client.get("/healthz")

    assert response.status_code == 200
    assert response.json()["status"] == "degraded"
    assert response.json()["beat"] == "no tick recorded: is celery beat running?"
    assert _of(_scrape(client), "dataflow_beat_seconds_since_tick") == float("inf")


@pytest.mark.slow
def test_a_ticking_beat_shows_no_warning_on_the_dashboard(client, beat_ticked):
    client.force_login(UserFactory(username="alice"))

    assert "celery beat" not in client.get("/").content.decode()
    assert _of(_scrape(client), "dataflow_beat_seconds_since_tick") < settings.DATAFLOW_BEAT_STALE_SECONDS


def test_healthz_names_redis_when_it_cannot_be_reached(client, settings):
    settings.REDIS_URL = "redis://:hunter2@127.0.0.1:1/0"  # nothing listens on port 1

    response = client.get("/healthz")

    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "unavailable"
    assert body["failed"] == ["redis"]
    assert body["database"] == "ok"
    assert body["redis"].startswith("ConnectionError: ")
    assert "127.0.0.1:1" in body["redis"]
    assert "hunter2" not in response.content.decode()
    assert "Traceback" not in response.content.decode()


def test_a_failed_checks_reason_shows_no_password_of_a_url():
    reason = monitoring._describe(
        redis.ConnectionError("no route to redis://:hunter2@10.0.0.9:6379/0\nTraceback")
    )

    assert reason == "ConnectionError: no route to redis://***@10.0.0.9:6379/0"


def test_healthz_and_metrics_answer_only_get_and_head(client):
    assert client.head("/healthz").status_code == 200
    assert client.post("/healthz").status_code == 405
    assert client.post("/metrics").status_code == 405
