"""The services of unbounded runs: checkpoints, restore, offsets, backpressure, metrics.

Runs are made with the real services (``flow_apply`` through the factory, ``flow_start``)
over a real Redis stream; splits are moved by hand where a test needs a reader's commits.
"""

from __future__ import annotations

import io
import json
import uuid
from datetime import timedelta

import pyarrow as pa
import pytest
from django.core.management import call_command
from django.utils import timezone

from connectors.redis_streams.split import encode_id
from dataflow.models import (
    Checkpoint,
    DataFlow,
    FlowRun,
    LandedBatch,
    MetricSample,
    RunStatus,
    Split,
    SplitStatus,
)
from dataflow.services.checkpoints import checkpoint_take
from dataflow.services.context import coordinator_for, landing_zone, run_key, source_for
from dataflow.services.errors import FlowStateError
from dataflow.services.flows import flow_rescale, flow_restore, flow_start, flow_stop
from dataflow.services.metrics import metrics_sample
from dataflow.services.offsets import offsets_of, offsets_reset, offsets_set
from dataflow.services.streams.tick import run_backpressure
from source_support.errors import ConfigError
from tests.factories import DataFlowFactory, LandedBatchFactory

FIELDS = "id BIGINT, amount DOUBLE"


@pytest.fixture()
def topic(rds):
    """Two streams with 5 entries each, ids 1000-0 .. 1004-0; deleted after the test."""
    prefix = f"t{uuid.uuid4().hex[:10]}"
    for stream in (0, 1):
        for i in range(5):
            rds.xadd(f"{prefix}:{stream}", {"id": stream * 10 + i, "amount": i / 2}, id=f"{1000 + i}-0")
    yield prefix
    for key in rds.scan_iter(match=f"{prefix}*"):
        rds.delete(key)


@pytest.fixture()
def flow(topic, dirs) -> DataFlow:
    """An unbounded flow over the topic's streams."""
    return DataFlowFactory(stream=True, streams=f"{topic}:*", schema=FIELDS, parallelism=2)


def _read(run: FlowRun, split_id: str, entry_id: str) -> Split:
    """A split of ``run`` committed up to ``entry_id``, as a reader's commit leaves it."""
    source = source_for(run)
    split = source.split_serializer.deserialize({"key": split_id, "position": 0, "stop_position": None}).at(
        encode_id(entry_id)
    )
    row, _ = Split.objects.update_or_create(
        run=run,
        split_id=split_id,
        defaults={
            "payload": source.split_serializer.serialize(split),
            "position": split.offset.position,
            "records_read": 3,
            "owner_token": "reader-token",
        },
    )
    return row


@pytest.fixture()
def stopped_run(topic, dirs, flow):
    run = flow_start(flow=flow)
    _read(run, f"{topic}:0", "1002-0")
    _read(run, f"{topic}:1", "1001-0")
    flow_stop(flow=flow)
    return flow, FlowRun.objects.get(pk=run.pk)


@pytest.mark.django_db
def test_a_checkpoint_holds_every_split_position_and_the_enumerator_state(topic, dirs, settings, flow):
    settings.DATAFLOW_CHECKPOINTS_KEPT = 2
    run = flow_start(flow=flow)
    _read(run, f"{topic}:0", "1002-0")

    first = checkpoint_take(run=run)
    _read(run, f"{topic}:0", "1004-0")
    checkpoint_take(run=run)
    newest = checkpoint_take(run=run)

    assert first.splits[f"{topic}:0"]["position"] == encode_id("1002-0")
    assert newest.splits[f"{topic}:0"]["position"] == encode_id("1004-0")
    assert newest.enumerator_state == FlowRun.objects.get(pk=run.pk).enumerator_state
    assert list(Checkpoint.objects.filter(run=run).values_list("pk", flat=True)) == [newest.pk, newest.pk - 1]


@pytest.mark.django_db
def test_restore_starts_a_new_run_from_the_chosen_checkpoint(topic, dirs, flow):
    run = flow_start(flow=flow)
    _read(run, f"{topic}:0", "1001-0")
    older = checkpoint_take(run=run)
    _read(run, f"{topic}:0", "1004-0")
    checkpoint_take(run=run)
    flow_stop(flow=flow)

    restored = flow_restore(flow=flow, checkpoint_id=older.pk)

    assert restored.pk != run.pk and restored.status == RunStatus.READING
    split = Split.objects.get(run=restored, split_id=f"{topic}:0")
    # Owned by no live reader: the first tick hands it back to the enumerator at its position.
    assert (split.position, split.status, split.owner_token) == (
        encode_id("1001-0"),
        SplitStatus.ASSIGNED,
        "restored",
    )


@pytest.mark.django_db
def test_restore_is_refused_while_the_flow_runs_or_without_a_checkpoint(topic, dirs, flow):
    with pytest.raises(FlowStateError, match="no a checkpoint|no checkpoint|has no"):
        flow_restore(flow=flow)
    run = flow_start(flow=flow)
    checkpoint_take(run=run)
    with pytest.raises(FlowStateError, match="already running"):
        flow_restore(flow=flow)


@pytest.mark.django_db
def test_offsets_are_entry_ids_and_can_be_set_on_a_stopped_flow(stopped_run, topic):
    flow, run = stopped_run
    split = Split.objects.get(run=run, split_id=f"{topic}:0")
    landing = landing_zone()
    beyond = landing.batch_path(run_key(run), split.split_id, encode_id("1003-0"))
    landing.land(beyond, pa.table({"id": [3]}))
    LandedBatch.objects.create(
        split=split,
        start_position=encode_id("1003-0"),
        end_position=encode_id("1004-0"),
        path=beyond,
        records=1,
    )

    before = {o["split"]: o["offset"] for o in offsets_of(flow=flow)}
    after = {o["split"]: o["offset"] for o in offsets_set(flow=flow, positions={f"{topic}:0": "1000-0"})}

    assert before == {f"{topic}:0": "1002-0", f"{topic}:1": "1001-0"}
    assert after == {f"{topic}:0": "1000-0", f"{topic}:1": "1001-0"}
    # What was landed past the new offset would be read again: it is dropped.
    assert not LandedBatch.objects.filter(split=split).exists() and not beyond.exists()


@pytest.mark.django_db
def test_offsets_refuse_a_running_flow_an_unknown_split_and_a_bad_id(stopped_run, topic):
    flow, _ = stopped_run
    with pytest.raises(ConfigError) as unknown:
        offsets_set(flow=flow, positions={"nope": "1-0"})
    with pytest.raises(ConfigError) as bad:
        offsets_set(flow=flow, positions={f"{topic}:0": "yesterday"})
    flow_start(flow=flow)
    with pytest.raises(FlowStateError, match="running"):
        offsets_set(flow=flow, positions={f"{topic}:0": "1000-0"})

    assert unknown.value.field == "offsets.nope"
    assert bad.value.field == f"offsets.{topic}:0" and "entry id" in bad.value.reason


@pytest.mark.django_db
def test_offsets_reset_makes_the_next_run_read_from_the_start(stopped_run):
    flow, run = stopped_run

    offsets_reset(flow=flow)

    run.refresh_from_db()
    assert run.status == RunStatus.FAILED and "offsets reset" in run.message
    assert not run.splits.exists()
    assert flow_start(flow=flow).splits.count() == 0


@pytest.mark.django_db
def test_flowctl_offsets_prints_json_for_scripts(stopped_run, topic):
    flow, _ = stopped_run
    out = io.StringIO()

    call_command("flowctl", "offsets", flow.name, "--json", stdout=out)

    assert [(o["split"], o["offset"]) for o in json.loads(out.getvalue())] == [
        (f"{topic}:0", "1002-0"),
        (f"{topic}:1", "1001-0"),
    ]


@pytest.mark.django_db
def test_readers_pause_while_too_much_waits_for_the_transform(topic, dirs):
    flow = DataFlowFactory(
        stream=True, streams=f"{topic}:*", schema=FIELDS, parallelism=2, backpressure_records=1000
    )
    run = flow_start(flow=flow)
    split = _read(run, f"{topic}:0", "1004-0")
    coordinator = coordinator_for(run)

    batch = LandedBatchFactory(split=split, records=1500)
    paused = run_backpressure(run=run, coordinator=coordinator)
    message = FlowRun.objects.get(pk=run.pk).message
    batch.records = 600  # the transform caught up, but not to half the limit
    batch.save()
    still = run_backpressure(run=run, coordinator=coordinator) and coordinator.backpressure_on()
    batch.records = 400
    batch.save()
    resumed = not run_backpressure(run=run, coordinator=coordinator)

    assert paused and message.startswith("paused: 1,500 records wait")
    assert still
    assert resumed and not coordinator.backpressure_on() and FlowRun.objects.get(pk=run.pk).message == ""


@pytest.mark.django_db
def test_metrics_sample_the_run_and_each_split_with_rates_and_lag(topic, dirs, rds, flow):
    run = flow_start(flow=flow)
    _read(run, f"{topic}:0", "1002-0")
    rds.xgroup_create(f"{topic}:0", run.flow.name, id="1002-0", entries_read=3)

    metrics_sample(run=run)
    Split.objects.filter(run=run, split_id=f"{topic}:0").update(records_read=13)
    samples = {s.split_id: s for s in metrics_sample(run=run)}

    assert samples[f"{topic}:0"].last_offset == "1002-0"
    assert MetricSample.objects.filter(run=run).count() == 2 * 2  # two rounds of a split and the run
    assert samples[f"{topic}:0"].records_per_s > 0 and samples[""].records_read == 13
    if int(rds.info("server")["redis_version"].split(".")[0]) >= 7:
        assert samples[f"{topic}:0"].lag == 2  # entries 1003-0 and 1004-0


@pytest.mark.django_db
def test_metric_samples_older_than_the_retention_go(topic, dirs, settings, flow):
    settings.DATAFLOW_RETENTION_DAYS = 1
    run = flow_start(flow=flow)
    _read(run, f"{topic}:0", "1002-0")
    metrics_sample(run=run)
    MetricSample.objects.filter(run=run).update(at=timezone.now() - timedelta(days=2))

    metrics_sample(run=run)

    assert MetricSample.objects.filter(run=run).count() == 2  # the new split and run samples


@pytest.mark.django_db
def test_rescale_changes_the_running_run_and_refuses_a_bad_count(topic, dirs, flow):
    run = flow_start(flow=flow)

    flow_rescale(flow=flow, parallelism=4)
    with pytest.raises(ConfigError) as refused:
        flow_rescale(flow=flow, parallelism=0)

    assert FlowRun.objects.get(pk=run.pk).spec["parallelism"] == 4
    assert refused.value.field == "flow.parallelism"
