"""A flow's status costs the same however many splits its run has (issue 25, 2.2: a status
over 10,000 splits took 77 s and 157 KB): splits counted by state in the database, listed a
page at a time."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from dataflow.models import Split, SplitStatus
from tests.factories import FlowRunFactory, splits_bulk

pytestmark = pytest.mark.django_db


@pytest.fixture()
def run(flow):
    return FlowRunFactory(flow=flow, running=True)


def _status(api, flow, query: str = ""):
    response = api.get(f"/api/flows/{flow.name}/status/{query}")
    assert response.status_code == 200, response.content
    return response


@pytest.mark.slow
def test_a_status_makes_as_many_queries_and_as_large_an_answer_for_3000_splits_as_for_100(
    api, flow, run, django_assert_max_num_queries
):
    splits_bulk(run, 100)
    with CaptureQueriesContext(connection) as few:
        small = _status(api, flow)
    splits_bulk(run, 2_900, start=100)

    with django_assert_max_num_queries(len(few.captured_queries)):
        large = _status(api, flow)

    body = large.json()
    assert body["splits_listed"] == 100 and body["splits_pages"] == 30
    assert body["splits_by_state"] == {"assigned": 3_000}
    assert body["run"]["splits_total"] == 3_000
    # The same 100 splits listed: only the counts differ.
    assert len(large.content) - len(small.content) < 50


@pytest.mark.slow
def test_splits_are_listed_a_page_at_a_time(api, flow, run):
    splits_bulk(run, 120)

    body = _status(api, flow, "?splits_page=3&splits_page_size=50").json()

    assert body["splits_page"] == 3 and body["splits_pages"] == 3
    assert [s["split_id"] for s in body["splits"]] == [
        f"/srv/data/orders/part-{i:05d}.csv@0" for i in range(100, 120)
    ]
    assert body["splits"][0]["lag"] == 10


@pytest.mark.parametrize(
    ("query", "field"), [("?splits_page_size=100000", "splits_page_size"), ("?splits_page=0", "splits_page")]
)
def test_a_page_out_of_bounds_is_a_400_naming_the_parameter(api, flow, run, query, field):
    response = api.get(f"/api/flows/{flow.name}/status/{query}")

    assert response.status_code == 400
    assert list(response.json()) == [field]


@pytest.mark.slow
def test_the_last_error_is_found_on_a_split_not_listed(api, flow, run):
    splits = splits_bulk(run, 300)
    Split.objects.filter(pk=splits[-1].pk).update(status=SplitStatus.FAILED, error="line 9: bad record")

    body = _status(api, flow).json()

    assert body["last_error"] == "line 9: bad record"
    assert body["splits_by_state"] == {"assigned": 299, "failed": 1}
