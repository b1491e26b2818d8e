"""Dead letters are discarded and replayed through the dead-letter services."""

from __future__ import annotations

import pytest

from dataflow.models import DeadLetter
from dataflow.services.flows import flow_start
from tests.factories import DeadLetterFactory, FlowRunFactory

LIST_URL = "/admin/dataflow/deadletter/"


def _messages(response) -> list[str]:
    return [str(m) for m in response.context["messages"]]


@pytest.mark.django_db
def test_the_discard_action_deletes_the_selected_dead_letters(admin_client, csv_flow):
    run = FlowRunFactory(flow=csv_flow)
    chosen, kept = DeadLetterFactory(run=run), DeadLetterFactory(run=run)

    response = admin_client.post(
        LIST_URL, {"action": "discard_selected", "_selected_action": [chosen.pk]}, follow=True
    )

    assert "csv-flow: 1 dead letter(s) discarded" in _messages(response)
    assert list(DeadLetter.objects.values_list("pk", flat=True)) == [kept.pk]


@pytest.mark.django_db
def test_the_list_offers_discard_and_replay_not_a_plain_delete(admin_client, csv_flow):
    DeadLetterFactory(run=FlowRunFactory(flow=csv_flow))

    page = admin_client.get(LIST_URL).content.decode()

    assert 'value="discard_selected"' in page
    assert 'value="replay_selected"' in page
    assert 'value="delete_selected"' not in page


@pytest.mark.django_db
@pytest.mark.slow
def test_a_replay_of_a_running_flow_is_refused_with_a_message(admin_client, csv_flow):
    letter = DeadLetterFactory(run=FlowRunFactory(flow=csv_flow))
    flow_start(flow=csv_flow)

    response = admin_client.post(
        LIST_URL, {"action": "replay_selected", "_selected_action": [letter.pk]}, follow=True
    )

    assert response.status_code == 200
    assert any(m.startswith("csv-flow: ") and "is running" in m for m in _messages(response))
    assert DeadLetter.objects.filter(pk=letter.pk).exists()
