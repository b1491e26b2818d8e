"""A run goes on (resumed, restored, restarted) only as far as its connection allows now:
staff narrowed alice's connection from ``alice:orders:*`` to ``alice:orders:1``, and
nothing of ``alice:orders:2`` is read again."""

from __future__ import annotations

import pytest

from dataflow.models import Connection, FlowRun, RunStatus, Split, SplitStatus
from dataflow.services.checkpoints import checkpoint_take
from dataflow.services.connections import connection_save
from dataflow.services.flows import (
    flow_merge,
    flow_restart,
    flow_restore,
    flow_resume,
    flow_start,
    flow_stop,
)
from source_support.errors import ConfigError
from tests.factories import DataFlowFactory, UserFactory
from tests.helpers import Beat, live, wait_for_run, wait_until

# Each test runs a flow on the in-process worker: over 5 s on 2 cores, not in the fast lane.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def narrow(flow, prefix: str) -> None:
    """Staff narrows the connection of alice's flow to her first stream."""
    connection = Connection.objects.get(name=f"{flow.name}-redis")
    connection_save(
        connection=connection,
        name=connection.name,
        type=connection.type,
        url=connection.url,
        key_patterns=[f"{prefix}alice:orders:1"],
    )


@pytest.fixture()
def alice_flow(worker, rds, prefix, dirs, settings):
    """Alice's stream flow over her two order streams, through a connection granted to her
    that allows ``alice:orders:*``."""
    settings.DATAFLOW_ALLOWED_INTERNAL_ADDRESSES = ["127.0.0.1"]
    for stream in (1, 2):
        rds.xadd(f"{prefix}alice:orders:{stream}", {"id": stream})
    return DataFlowFactory(
        name="alice-orders",
        owner=UserFactory(username="alice"),
        stream=True,
        streams=f"{prefix}alice:orders:*",
        schema="id BIGINT",
        parallelism=1,
        sql="SELECT id FROM source",
    )


@pytest.fixture()
def stopped_run(alice_flow, prefix):
    """Her run, having read both streams, checkpointed and stopped; then her connection
    is narrowed to the first stream."""
    with Beat():
        run = flow_start(flow=alice_flow)
        wait_until(lambda: live(run) == 2, 60, lambda: f"run {run.pk}: {live(run)} records read")
    checkpoint_take(run=run)
    flow_stop(flow=alice_flow)
    assert sorted(Split.objects.filter(run=run).values_list("split_id", flat=True)) == [
        f"{prefix}alice:orders:1",
        f"{prefix}alice:orders:2",
    ]
    narrow(alice_flow, prefix)
    return run


def refusal(call) -> str:
    with pytest.raises(ConfigError) as refused:
        call()
    assert refused.value.field == "source.connection", refused.value
    return str(refused.value)


def test_resume_refuses_a_split_its_narrowed_connection_no_longer_allows(stopped_run, prefix):
    message = refusal(lambda: flow_resume(flow=stopped_run.flow))

    assert f"{prefix}alice:orders:2" in message and "outside the keys" in message
    assert FlowRun.objects.get(pk=stopped_run.pk).status == RunStatus.STOPPED


def test_restore_refuses_a_checkpoint_whose_split_its_connection_no_longer_allows(stopped_run, prefix):
    with pytest.raises(ConfigError) as refused:  # the flow's own glob is outside the patterns now
        flow_restore(flow=stopped_run.flow)
    assert refused.value.field == "source.streams"
    # Alice narrows her flow to fit; the checkpoint still holds her second stream.
    flow = flow_merge(flow=stopped_run.flow, changes={"source": {"streams": f"{prefix}alice:orders:1"}})

    message = refusal(lambda: flow_restore(flow=flow))

    assert f"{prefix}alice:orders:2" in message
    assert list(FlowRun.objects.filter(flow=stopped_run.flow)) == [stopped_run]


def test_restarting_failed_splits_refuses_a_split_its_connection_no_longer_allows(stopped_run, prefix):
    Split.objects.filter(run=stopped_run, split_id=f"{prefix}alice:orders:2").update(
        status=SplitStatus.FAILED
    )

    message = refusal(lambda: flow_restart(flow=stopped_run.flow, only_failed=True))

    assert f"{prefix}alice:orders:2" in message
    assert FlowRun.objects.get(pk=stopped_run.pk).status == RunStatus.STOPPED


def test_a_running_reader_stops_reading_a_split_its_connection_no_longer_allows(alice_flow, rds, prefix):
    with Beat():
        run = flow_start(flow=alice_flow)
        wait_until(lambda: live(run) == 2, 60, lambda: f"run {run.pk}: {live(run)} records read")
        narrow(alice_flow, prefix)  # a reader's next slice (seconds away) takes its splits anew
        run = wait_for_run(run, timeout=60)

    assert run.status == RunStatus.FAILED
    failed = Split.objects.get(run=run, status=SplitStatus.FAILED)
    assert failed.split_id == f"{prefix}alice:orders:2"
    assert "outside the keys" in failed.error
