"""Run pages show live progress; runs, splits, dead letters and assignments are read-only;
the flow list shows each flow's last run in a constant number of queries."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from dataflow.models import DeadLetter, FlowRun, SplitStatus
from dataflow.services.flows import flow_start
from tests.factories import (
    AssignmentFactory,
    DataFlowFactory,
    DeadLetterFactory,
    FlowRunFactory,
    MetricSampleFactory,
    SplitFactory,
    WebhookDeliveryFactory,
)


@pytest.fixture()
def reading_run(csv_flow) -> FlowRun:
    """An active run whose splits have read 2,000,000 records, with a metric sample."""
    run = flow_start(flow=csv_flow)
    FlowRun.objects.filter(pk=run.pk).update(splits_pending=0)  # both splits are assigned
    SplitFactory(run=run, records_read=1_500_000, errors_count=2, position=500, status=SplitStatus.ASSIGNED)
    SplitFactory(run=run, records_read=500_000, status=SplitStatus.FINISHED, position=1000)
    MetricSampleFactory(run=run, records_read=2_000_000, records_per_s=12_345.6, lag=7)
    return run


@pytest.mark.django_db
def test_progress_json_has_the_runs_live_counters(admin_client, reading_run):
    response = admin_client.get(f"/admin/dataflow/flowrun/{reading_run.pk}/progress/")

    assert response.status_code == 200
    data = response.json()
    assert set(data) == {"run", "rate", "flow"}
    assert data["run"] | {"started_at": None, "duration_s": None} == {
        "id": reading_run.pk,
        "status": "reading",
        "paused": False,
        "done": False,
        "message": "",
        "trigger": "manual",
        "started_at": None,
        "finished_at": None,
        "duration_s": None,
        "records_read": 2_000_000,
        "errors_count": 2,
        "rows_written": None,
        "splits_total": 2,
        "splits_finished": 1,
    }
    assert data["run"]["duration_s"] >= 0
    assert data["rate"] | {"at": None} == {
        "at": None,
        "records_per_s": 12_345.6,
        "lag": 7,
        "latency_ms": None,
    }
    assert data["flow"] == {"id": reading_run.flow_id, "name": "csv-flow", "status": "running"}


@pytest.mark.django_db
def test_progress_json_of_a_run_without_samples_has_no_rate(admin_client, csv_flow):
    run = flow_start(flow=csv_flow)

    data = admin_client.get(f"/admin/dataflow/flowrun/{run.pk}/progress/").json()

    assert data["rate"] is None
    assert data["run"]["records_read"] == 0


@pytest.mark.django_db
def test_progress_json_needs_a_staff_user(client, reading_run):
    response = client.get(f"/admin/dataflow/flowrun/{reading_run.pk}/progress/")

    assert response.status_code == 302
    assert response["Location"].startswith("/admin/login/")


@pytest.mark.django_db
def test_the_run_page_shows_live_records_and_links_to_its_splits_and_dead_letters(admin_client, reading_run):
    page = admin_client.get(f"/admin/dataflow/flowrun/{reading_run.pk}/change/").content.decode()

    assert f'data-progress-url="/admin/dataflow/flowrun/{reading_run.pk}/progress/"' in page
    assert 'data-field="records_read">2,000,000</dd>' in page
    assert 'data-field="splits">1 / 2</dd>' in page
    assert 'data-field="records_per_s">12,346</dd>' in page
    assert f'href="/admin/dataflow/split/?run__id__exact={reading_run.pk}"' in page
    assert f'href="/admin/dataflow/deadletter/?run__id__exact={reading_run.pk}"' in page
    assert "dataflow/admin/progress.js" in page


@pytest.mark.django_db
@pytest.mark.slow
def test_the_flow_page_shows_its_latest_runs_progress(admin_client, reading_run):
    page = admin_client.get(f"/admin/dataflow/dataflow/{reading_run.flow_id}/change/").content.decode()

    assert f"Latest run: run {reading_run.pk}" in page
    assert 'data-field="records_read">2,000,000</dd>' in page


@pytest.mark.django_db
def test_the_run_list_shows_live_records_of_an_active_run(admin_client, reading_run):
    page = admin_client.get("/admin/dataflow/flowrun/").content.decode()

    assert '<td class="field-records">2,000,000</td>' in page


@pytest.mark.django_db
def test_dead_letters_and_splits_filter_by_run(admin_client, csv_flow):
    kept, other = FlowRunFactory(flow=csv_flow), FlowRunFactory(flow=csv_flow)
    DeadLetterFactory(run=kept, error="kept letter")
    DeadLetterFactory(run=other, error="other letter")
    SplitFactory(run=kept, split_id="kept-split@0")
    SplitFactory(run=other, split_id="other-split@0")

    letters = admin_client.get(f"/admin/dataflow/deadletter/?run__id__exact={kept.pk}").content.decode()
    splits = admin_client.get(f"/admin/dataflow/split/?run__id__exact={kept.pk}").content.decode()

    assert "kept letter" in letters and "other letter" not in letters
    assert "kept-split@0" in splits and "other-split@0" not in splits


def _page_buttons(page: str) -> dict[str, bool]:
    return {
        "save": 'name="_save"' in page,
        "continue": 'name="_continue"' in page,
        "delete": 'class="deletelink"' in page,
    }


@pytest.mark.django_db
def test_runs_splits_and_assignments_have_no_save_or_delete(admin_client, csv_flow):
    run = FlowRunFactory(flow=csv_flow)
    split = SplitFactory(run=run)
    assignment = AssignmentFactory(split=split)

    for url in (
        f"/admin/dataflow/flowrun/{run.pk}/change/",
        f"/admin/dataflow/split/{split.pk}/change/",
        f"/admin/dataflow/assignment/{assignment.pk}/change/",
    ):
        response = admin_client.get(url)
        assert response.status_code == 200, url
        assert _page_buttons(response.content.decode()) == {
            "save": False,
            "continue": False,
            "delete": False,
        }, url
        assert admin_client.get(url.replace("/change/", "/delete/")).status_code == 403, url


@pytest.mark.django_db
def test_a_dead_letter_has_no_save_but_may_be_discarded(admin_client, csv_flow):
    letter = DeadLetterFactory(run=FlowRunFactory(flow=csv_flow))
    url = f"/admin/dataflow/deadletter/{letter.pk}/"

    page = admin_client.get(f"{url}change/").content.decode()
    assert _page_buttons(page) == {"save": False, "continue": False, "delete": True}

    response = admin_client.post(f"{url}delete/", {"post": "yes"})

    assert response.status_code == 302
    assert not DeadLetter.objects.filter(pk=letter.pk).exists()


@pytest.mark.django_db
def test_a_run_cannot_be_added_or_changed_by_a_post(admin_client, csv_flow):
    run = FlowRunFactory(flow=csv_flow, message="as it was")

    response = admin_client.post(f"/admin/dataflow/flowrun/{run.pk}/change/", {"message": "changed"})

    assert response.status_code == 403
    assert FlowRun.objects.get(pk=run.pk).message == "as it was"
    assert admin_client.get("/admin/dataflow/flowrun/add/").status_code == 403


@pytest.mark.django_db
def test_a_file_split_shows_how_much_of_its_byte_range_was_read(admin_client, csv_flow):
    run = FlowRunFactory(flow=csv_flow)
    SplitFactory(run=run, split_id="/d/half.csv@1000", payload={"start": 1000, "end": 3000}, position=2000)
    SplitFactory(run=run, split_id="stream-a", payload={"stream": "a"}, position=5)
    SplitFactory(
        run=run, split_id="/d/g.csv.gz@0", payload={"start": 0, "end": 2**62, "compressed": True}, position=5
    )

    page = admin_client.get(f"/admin/dataflow/split/?run__id__exact={run.pk}").content.decode()

    assert '<progress max="100" value="50" aria-label="50% read"></progress> 50%' in page
    assert page.count('<td class="field-progress">—</td>') == 2


def _list_queries(admin_client) -> tuple[int, str]:
    with CaptureQueriesContext(connection) as queries:
        response = admin_client.get("/admin/dataflow/dataflow/")
    assert response.status_code == 200
    return len(queries), response.content.decode()


@pytest.mark.django_db
@pytest.mark.slow
def test_the_flow_list_shows_the_last_run_in_as_many_queries_for_any_number_of_flows(
    admin_client, dirs, reading_run
):
    few, _ = _list_queries(admin_client)
    for i in range(4):
        FlowRunFactory(
            flow=DataFlowFactory(name=f"more-{i}"),
            failed=True,
            records_read=10 + i,
            errors_count=1,
            took=timedelta(seconds=90),
        )

    many, page = _list_queries(admin_client)

    assert many == few
    assert '<td class="field-last_records">2,000,000</td>' in page  # live, while it reads
    assert '<td class="field-last_records">13</td>' in page
    assert f'<a href="/admin/dataflow/flowrun/{reading_run.pk}/change/">reading</a>' in page
    assert '<td class="field-last_duration">1 min 30 s</td>' in page


@pytest.mark.django_db
@pytest.mark.slow
def test_the_flow_page_lists_its_latest_runs_only(admin_client, csv_flow, dirs):
    runs = [FlowRunFactory(flow=csv_flow) for _ in range(22)]
    FlowRunFactory()  # of another flow

    page = admin_client.get(f"/admin/dataflow/dataflow/{csv_flow.pk}/change/")

    listed = [form.instance.pk for form in page.context["inline_admin_formsets"][0].formset.forms]
    assert listed == [run.pk for run in runs[::-1][:20]]
    all_runs = admin_client.get(f"/admin/dataflow/flowrun/?flow__id__exact={csv_flow.pk}")
    assert f'href="/admin/dataflow/flowrun/?flow__id__exact={csv_flow.pk}"' in page.content.decode()
    assert all_runs.context["cl"].result_count == 22


@pytest.mark.django_db
def test_a_webhook_delivery_is_read_only_and_shows_its_url_masked(admin_client, csv_flow):
    run = FlowRunFactory(flow=csv_flow)
    delivery = WebhookDeliveryFactory(
        run=run,
        event="failed",
        url="https://bot:s3cret@hooks.example.com/x?token=abc",
        attempts=2,
    )
    url = f"/admin/dataflow/webhookdelivery/{delivery.pk}/change/"

    page = admin_client.get(url).content.decode()

    assert "hooks.example.com" in page and "s3cret" not in page and "abc" not in page
    assert _page_buttons(page) == {"save": False, "continue": False, "delete": False}
    assert admin_client.get("/admin/dataflow/webhookdelivery/").status_code == 200


@pytest.mark.django_db
def test_a_run_page_shows_the_settings_it_started_with_secrets_masked(admin_client, csv_flow):
    spec = {
        "name": csv_flow.name,
        "source_type": "redis_streams",
        "source_config": {"streams": "orders:*", "url": "redis://:s3cret@127.0.0.1:6379/0"},
        "sink_type": "redis_stream",
        "sink_config": {"key": "out", "url": "redis://bot:s3cret@127.0.0.1:6379/1"},
        "notify": {"webhook": "https://hooks.example.com/x?token=s3cret", "on": ["failed"]},
    }
    run = FlowRunFactory(flow=csv_flow, spec=spec)

    page = admin_client.get(f"/admin/dataflow/flowrun/{run.pk}/change/").content.decode()

    assert "orders:*" in page and "redis://bot:****@127.0.0.1:6379/1" in page
    assert "s3cret" not in page
