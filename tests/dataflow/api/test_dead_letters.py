"""Dead letters through the API: listed, read, discarded, replayed (the replay's run is
created; no worker runs it here: tests/dataflow/services/test_dead_letters.py runs them)."""

from __future__ import annotations

import pytest

from dataflow.models import DeadLetter, FlowRun, RunStatus, SplitStatus
from dataflow.services.flows import flow_start
from tests.factories import DeadLetterFactory, FlowRunFactory, SplitFactory

pytestmark = pytest.mark.django_db


@pytest.fixture()
def letters(flow, csv_path):
    """A succeeded run of ``flow`` over ``csv_path`` with two dead letters, and an older
    run with one."""
    older = FlowRunFactory(flow=flow)
    run = FlowRunFactory(flow=flow)
    split_id = SplitFactory(run=run, path=str(csv_path), status=SplitStatus.FINISHED).split_id
    return {
        "run": run,
        "older": older,
        "letters": [DeadLetterFactory(run=run, split_id=split_id, raw=f"{i},s{i},{i}.5") for i in (3, 4)],
        "old_letter": DeadLetterFactory(run=older, split_id=split_id),
    }


def test_a_flows_dead_letters_are_listed_and_filtered_by_run(api, flow, letters):
    everything = api.get(f"/api/flows/{flow.name}/dead-letters/").json()
    of_run = api.get(f"/api/flows/{flow.name}/dead-letters/", {"run": letters["run"].pk}).json()

    assert everything["count"] == 3
    assert [d["id"] for d in of_run["results"]] == [d.pk for d in letters["letters"]]
    first = of_run["results"][0]
    assert first["raw"] == "3,s3,3.5"
    assert first["flow"] == flow.name
    assert first["run"] == letters["run"].pk
    assert first["url"] == f"http://testserver/api/dead-letters/{first['id']}/"
    assert api.get(first["url"]).json() == first


def test_a_dead_letter_is_discarded_by_delete(api, letters):
    letter = letters["letters"][0]

    response = api.delete(f"/api/dead-letters/{letter.pk}/")

    assert response.status_code == 204
    assert not DeadLetter.objects.filter(pk=letter.pk).exists()
    assert api.get(f"/api/dead-letters/{letter.pk}/").status_code == 404


def test_dead_letters_are_discarded_by_ids_or_by_run(api, flow, letters):
    by_ids = api.post(
        f"/api/flows/{flow.name}/dead-letters/discard/", {"ids": [letters["old_letter"].pk]}, format="json"
    )
    by_run = api.post(
        f"/api/flows/{flow.name}/dead-letters/discard/", {"run": letters["run"].pk}, format="json"
    )

    assert by_ids.json() == {"discarded": 1}
    assert by_run.json() == {"discarded": 2}
    assert not DeadLetter.objects.exists()


def test_discarding_what_is_not_the_flows_is_refused(api, flow, letters, make_flow):
    other = make_flow("other")
    foreign = DeadLetterFactory(run=FlowRunFactory(flow=other))

    unknown = api.post(f"/api/flows/{flow.name}/dead-letters/discard/", {"ids": [foreign.pk]}, format="json")
    nothing = api.post(f"/api/flows/{flow.name}/dead-letters/discard/", {}, format="json")

    assert unknown.status_code == 400
    assert "are not dead letters of flow 'orders'" in unknown.json()["ids"][0]
    assert nothing.status_code == 400
    assert DeadLetter.objects.count() == 4


def test_a_replay_starts_a_run_of_the_dead_letters(api, flow, letters):
    response = api.post(
        f"/api/flows/{flow.name}/dead-letters/replay/", {"run": letters["run"].pk}, format="json"
    )

    assert response.status_code == 202, response.json()
    replay = FlowRun.objects.get(pk=response.json()["id"])
    assert (replay.trigger, replay.status) == ("replay", RunStatus.TRANSFORMING)
    assert response.json()["trigger"] == "replay"
    assert response.json()["flow"] == flow.name
    assert DeadLetter.objects.count() == 3  # settled only when the replay's rows are published


@pytest.mark.slow
def test_a_replay_while_the_flow_runs_is_a_conflict(api, flow, letters):
    flow_start(flow=flow)

    response = api.post(
        f"/api/flows/{flow.name}/dead-letters/replay/", {"run": letters["run"].pk}, format="json"
    )

    assert response.status_code == 409
    assert "is running" in response.json()["detail"]


def test_dead_letters_of_an_older_run_are_not_replayed(api, flow, letters):
    response = api.post(
        f"/api/flows/{flow.name}/dead-letters/replay/", {"run": letters["older"].pk}, format="json"
    )

    assert response.status_code == 400
    assert "do not belong with the rows the sink holds" in response.json()["run"][0]
