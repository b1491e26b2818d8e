"""A fair-share token lost with a worker is replaced (dataflow/services/queues.py).

In a module of its own: no Celery worker may run here (tests/dataflow/services/test_queues.py
runs one for its module), so that the tokens this test counts stay in the shared queue."""

from __future__ import annotations

import pytest

from dataflow.celery import app as celery_app
from dataflow.services import queues
from dataflow.services.flows import flow_start
from tests.factories import DataFlowFactory, UserFactory
from tests.helpers import waiting_in_shared_queue

pytestmark = pytest.mark.django_db(transaction=True)


def test_work_whose_token_was_lost_with_a_worker_gets_one_when_it_is_sent_again(dirs):
    # A worker SIGKILLed with tokens prefetched (acked on receipt) loses them; the work they
    # stood for still waits in its owner's line, and sending that work again is a duplicate.
    # Without a token for the duplicate, every reader and tick of the run could end up
    # waiting with no token at all: the fleet would stall (tests/e2e/test_fleet.py).
    run = flow_start(flow=DataFlowFactory(name="lost-token", owner=UserFactory(username="lea")))
    while queues.fair_work_take() is not None:  # what flow_start queued (its first tick)
        pass
    celery_app.control.purge()
    assert waiting_in_shared_queue() == 0
    assert queues.fair_work_send(queues.TICK_RUN, run.pk, owner_id=run.flow.owner_id)
    celery_app.control.purge()  # its token is lost

    again = queues.fair_work_send(queues.TICK_RUN, run.pk, owner_id=run.flow.owner_id)

    assert again is False  # the same work waits once
    assert waiting_in_shared_queue() == 1  # and a token goes for it
    work = queues.fair_work_take()
    assert work is not None and (work.task, work.run_id) == (queues.TICK_RUN, run.pk)
    celery_app.control.purge()
