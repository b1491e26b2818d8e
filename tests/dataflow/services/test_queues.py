"""Owners share the fleet fairly, and the queued work of a deleted flow is dropped (a real
Celery worker of the project's app, real Redis and PostgreSQL)."""

from __future__ import annotations

import logging
import threading

import pytest

from dataflow.celery import app as celery_app
from dataflow.models import FlowRun
from dataflow.services import flows
from dataflow.services.flows import flow_delete, flow_start
from dataflow.services.runs import slices, tick
from tests.factories import DataFlowFactory, UserFactory
from tests.helpers import logs_of, wait_until, waiting_in_shared_queue

pytestmark = pytest.mark.django_db(transaction=True)


class Executed(list):
    """The owner (user name) of each reader slice and tick, in the order workers start them;
    ``queued[owner]``: how many had started when the owner's first tick was queued."""

    def __init__(self) -> None:
        super().__init__()
        self.queued: dict[str, int] = {}


@pytest.fixture()
def executed(monkeypatch) -> Executed:
    """What ``Executed`` holds, from spies around the real services the tasks call."""
    order = Executed()
    lock = threading.Lock()
    read_slice, run_tick, request_tick = slices.read_slice, tick.run_tick, tick.request_tick

    def owner_of(run_id: int) -> str:
        name = FlowRun.objects.filter(pk=run_id).values_list("flow__owner__username", flat=True).first()
        return name or "?"

    def owner(run_id: int) -> None:
        name = owner_of(run_id)
        with lock:
            order.append(name)

    def spied_request(*, run_id):
        name = owner_of(run_id)
        with lock:
            order.queued.setdefault(name, len(order))
        return request_tick(run_id=run_id)

    def spied_slice(*, run_id, subtask, token):
        owner(run_id)
        return read_slice(run_id=run_id, subtask=subtask, token=token)

    def spied_tick(*, run_id):
        owner(run_id)
        return run_tick(run_id=run_id)

    monkeypatch.setattr(slices, "read_slice", spied_slice)
    monkeypatch.setattr(tick, "run_tick", spied_tick)
    monkeypatch.setattr(tick, "request_tick", spied_request)
    monkeypatch.setattr(flows, "request_tick", spied_request)
    return order


@pytest.mark.slow
def test_one_owners_backlog_delays_anothers_first_work_by_a_few_slices_and_is_dropped_when_deleted(
    worker, dirs, settings, executed, prefix, caplog
):
    settings.DATAFLOW_ALLOWED_INTERNAL_ADDRESSES = [
        "127.0.0.1"
    ]  # the owners' connections to the tests' Redis
    bob, alice = UserFactory(username="bob"), UserFactory(username="alice")
    # Bob's 10 streams of 4 readers each: every reader slice waits for splits its whole
    # slice (its pattern matches nothing), and queues the next: 40 readers for 8 threads.
    bobs = [
        DataFlowFactory(name=f"bob-{i}", owner=bob, stream=True, streams=f"{prefix}bob{i}:*", parallelism=4)
        for i in range(10)
    ]
    for flow in bobs:
        flow_start(flow=flow)
    wait_until(lambda: waiting_in_shared_queue() >= 16, 120, lambda: "bob's backlog did not build up")

    flow_start(flow=DataFlowFactory(name="alice-1", owner=alice, stream=True, streams=f"{prefix}alice:*"))
    wait_until(lambda: "alice" in executed, 120, lambda: f"alice's work never ran: {executed}")

    since_queued = executed[executed.queued["alice"] :]
    ahead = since_queued.index("alice")
    assert ahead <= 3, (
        f"{ahead} of bob's slices started after alice's first tick was queued, before it: {since_queued}"
    )

    # Bob deletes his flows while their slices and ticks still wait: each is dropped when
    # its turn comes, with a debug line, and nothing fails.
    with logs_of(caplog, "dataflow"), caplog.at_level(logging.DEBUG, logger="dataflow.services.queues"):
        for flow in bobs:
            flow_delete(flow=flow)
        wait_until(lambda: waiting_in_shared_queue() == 0, 120, lambda: "bob's queued work was not drained")
        dropped = [r for r in caplog.records if r.getMessage().startswith("dropped queued")]
        errors = [r for r in caplog.records if r.levelno >= logging.ERROR]

    assert dropped, "no queued work of bob's deleted flows was dropped"
    assert errors == [], [(r.getMessage(), r.exc_text) for r in errors]
    for flow in FlowRun.objects.filter(flow__owner=alice):
        flow_delete(flow=flow.flow)
    celery_app.control.purge()
