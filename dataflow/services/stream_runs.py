"""What a run of an unbounded flow does besides reading: backpressure, checkpoints,
metrics, and the flow's offsets (read, set, reset) and restores.

``runs.run_tick`` calls ``stream_run_tick`` on each tick of a reading unbounded run.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Max, Min, Sum
from django.utils import timezone

from dataflow.models import (
    ACTIVE_RUN_STATUSES,
    Checkpoint,
    DataFlow,
    EpochStatus,
    FlowRun,
    LandedBatch,
    MetricSample,
    RunStatus,
    Split,
    SplitStatus,
    TransformEpoch,
)
from source_support.coordination import RunCoordinator
from source_support.runtime import TickResult

log = logging.getLogger(__name__)

PAUSE_NOTE = "paused: "
WAITING_NOTE = "waiting: "


def stream_run_tick(*, run: FlowRun, coordinator: RunCoordinator, result: TickResult) -> None:
    """The periodic work of a reading unbounded run, each step at its own pace."""
    from dataflow.services.streaming import ensure_stream_transform

    ensure_stream_transform(run)
    run_backpressure(run=run, coordinator=coordinator)
    if coordinator.mark_once("checkpoint-due", int(settings.DATAFLOW_CHECKPOINT_SECONDS * 1000)):
        checkpoint_take(run=run)
    if coordinator.mark_once("metrics-due", int(settings.DATAFLOW_METRICS_SECONDS * 1000)):
        metrics_sample(run=run)
    _say_waiting(run, pending=result.pending)


def untransformed_records(run: FlowRun) -> int:
    """Records landed and committed but not yet taken by a transform epoch."""
    rows = LandedBatch.objects.filter(split__run=run, epoch__isnull=True)
    return rows.aggregate(n=Sum("records", default=0))["n"]


def run_backpressure(*, run: FlowRun, coordinator: RunCoordinator) -> bool:
    """Pauses the run's readers while more than ``backpressure_records`` records wait for
    the transform, and lets them go on below half of it (so they do not flap); returns
    whether they are paused. Readers that pause read nothing, so memory stays bounded
    whatever the input rate."""
    limit = run.spec.get("backpressure_records", 1_000_000)
    waiting = untransformed_records(run)
    paused = coordinator.is_set("paused")
    if not paused and waiting > limit:
        coordinator.pause(True)
        _set_note(
            run, f"{PAUSE_NOTE}{waiting:,} records wait for the transform (backpressure_records {limit:,})"
        )
        return True
    if paused and waiting <= limit // 2:
        coordinator.pause(False)
        _clear_note(run, PAUSE_NOTE)
        return False
    return paused


def _say_waiting(run: FlowRun, *, pending: int) -> None:
    """An unbounded source that has found nothing to read yet waits, and says so."""
    if Split.objects.filter(run=run).exists() or pending:
        _clear_note(run, WAITING_NOTE)
        return
    config = run.spec["source_config"]
    what = next((f"source.{k} {config[k]!r}" for k in ("streams", "path") if k in config), "the source")
    _set_note(run, f"{WAITING_NOTE}nothing matches {what} yet; new matches are picked up as they appear")


def _set_note(run: FlowRun, note: str) -> None:
    FlowRun.objects.filter(pk=run.pk, status=RunStatus.READING).exclude(message=note).update(message=note)


def _clear_note(run: FlowRun, prefix: str) -> None:
    FlowRun.objects.filter(pk=run.pk, message__startswith=prefix).update(message="")


# Checkpoints.


def checkpoint_take(*, run: FlowRun) -> Checkpoint:
    """Records, for every split, the position up to which the sink holds what was read, and
    the enumerator's state, read in one transaction (so they agree); keeps the newest
    ``DATAFLOW_CHECKPOINTS_KEPT``.

    That position is the split's committed one, or, while some of what it landed is still
    in the landing zone (not yet transformed, or kept for a window not yet emitted), where
    the first such batch starts: a run restored from the checkpoint reads that again. The
    landed batches belong to the run that read them, so a position past them would lose
    them."""
    with transaction.atomic():
        state = FlowRun.objects.filter(pk=run.pk).values_list("enumerator_state", flat=True).first()
        rows = list(
            Split.objects.filter(run=run).values_list(
                "split_id", "payload", "position", "status", "records_read"
            )
        )
        # Read after the positions: a batch committed since starts at or after them.
        kept = dict(
            LandedBatch.objects.filter(split__run=run)
            .values_list("split__split_id")
            .annotate(first=Min("start_position"))
        )
        splits = {
            split_id: {
                "payload": payload,
                "position": min(position, kept.get(split_id, position)),
                "finished": status == SplitStatus.FINISHED and split_id not in kept,
            }
            for split_id, payload, position, status, _ in rows
        }
        records = sum(row[4] for row in rows)
        checkpoint = Checkpoint.objects.create(
            run=run, splits=splits, enumerator_state=state, records_read=records
        )
    old = Checkpoint.objects.filter(run=run).order_by("-id")[settings.DATAFLOW_CHECKPOINTS_KEPT :]
    Checkpoint.objects.filter(pk__in=list(old.values_list("pk", flat=True))).delete()
    return checkpoint


def checkpoints_of(*, flow: DataFlow) -> list[Checkpoint]:
    """The flow's checkpoints, newest first."""
    return list(Checkpoint.objects.filter(run__flow=flow).select_related("run").order_by("-id"))


def flow_restore(*, flow: DataFlow, checkpoint_id: int | None = None) -> FlowRun:
    """Starts a new run of a stopped unbounded flow from a checkpoint (the newest if none is
    named): each split goes on from the position the checkpoint holds. What the sink got
    after that checkpoint is read again, as the user asked (Flink's restore from a
    savepoint). Refused with FlowStateError while a run is active."""
    from dataflow.services.flows import FlowStateError, flow_start

    checkpoints = Checkpoint.objects.filter(run__flow=flow).order_by("-id")
    checkpoint = checkpoints.filter(pk=checkpoint_id).first() if checkpoint_id else checkpoints.first()
    if checkpoint is None:
        which = f"checkpoint {checkpoint_id}" if checkpoint_id else "checkpoint"
        raise FlowStateError(f"flow {flow.name!r} has no {which} to restore")
    return flow_start(flow=flow, restore=checkpoint)


def seed_run_from_checkpoint(*, run: FlowRun, checkpoint: Checkpoint) -> None:
    """Gives a new run the checkpoint's splits and enumerator state. Unfinished splits are
    stored as owned by no live reader, so the first tick hands them back to the enumerator
    (``add_splits_back``), which assigns them again from their positions."""
    run.enumerator_state = checkpoint.enumerator_state
    run.save(update_fields=["enumerator_state"])
    Split.objects.bulk_create(
        Split(
            run=run,
            split_id=split_id,
            payload=entry["payload"],
            position=entry["position"],
            status=SplitStatus.FINISHED if entry["finished"] else SplitStatus.ASSIGNED,
            owner_token="restored",
        )
        for split_id, entry in checkpoint.splits.items()
    )


# Offsets (Kafka Connect's offsets API): a stopped flow's split positions.


def _stopped_run(flow: DataFlow) -> FlowRun:
    from dataflow.services.flows import FlowStateError

    if flow.runs.filter(status__in=ACTIVE_RUN_STATUSES).exists():
        raise FlowStateError(f"flow {flow.name!r} is running: stop it before changing its offsets")
    run = flow.runs.order_by("-id").first()
    if run is None:
        raise FlowStateError(f"flow {flow.name!r} has no run, so no offsets")
    return run


def offsets_of(*, flow: DataFlow) -> list[dict[str, Any]]:
    """Each split of the flow's latest run: where it is, in the connector's words too."""
    run = flow.runs.order_by("-id").first()
    if run is None:
        return []
    source = _source(run)
    return [
        {
            "split": split.split_id,
            "position": split.position,
            "offset": source.format_position(split.position),
            "status": split.status,
            "records_read": split.records_read,
        }
        for split in run.splits.order_by("split_id")
    ]


def offsets_set(*, flow: DataFlow, positions: dict[str, str]) -> list[dict[str, Any]]:
    """Moves splits of a stopped flow's latest run to new positions (the connector's
    offset syntax, e.g. an entry id), so resuming reads from there. Landed data not yet
    transformed past a new position is dropped (it would be read again). Unknown splits and
    bad offsets are refused with ConfigError naming them."""
    from source_support.errors import ConfigError

    run = _stopped_run(flow)
    source = _source(run)
    splits = {s.split_id: s for s in run.splits.all()}
    moves: dict[str, int] = {}
    for split_id, text in positions.items():
        if split_id not in splits:
            raise ConfigError(
                f"offsets.{split_id}", f"is not a split of run {run.pk} ({', '.join(sorted(splits))})"
            )
        try:
            moves[split_id] = source.parse_position(str(text))
        except ValueError as exc:
            raise ConfigError(f"offsets.{split_id}", str(exc)) from None
    with transaction.atomic():
        for split_id, position in moves.items():
            split = splits[split_id]
            _drop_untransformed(split, beyond=position)
            Split.objects.filter(pk=split.pk).update(
                position=position, status=SplitStatus.ASSIGNED, owner_token="offsets-set", owner_subtask=None
            )
    return offsets_of(flow=flow)


def offsets_reset(*, flow: DataFlow) -> None:
    """Forgets a stopped flow's positions: its next run reads from ``source.start`` again
    (the stopped run ends as stopped for good; resuming it is no longer offered)."""
    run = _stopped_run(flow)
    with transaction.atomic():
        for split in run.splits.all():
            _drop_untransformed(split, beyond=-1)
        FlowRun.objects.filter(pk=run.pk).update(
            message="offsets reset: the next run starts from source.start"
        )
        run.splits.all().delete()
        FlowRun.objects.filter(pk=run.pk).update(enumerator_state=None, status=RunStatus.FAILED)


def _drop_untransformed(split: Split, *, beyond: int) -> None:
    from dataflow.services.runs import landing_zone

    # Every landed batch still kept reaches the sink some day (a planned epoch, an open
    # window): all of them past the new position would be read twice.
    doomed = LandedBatch.objects.filter(split=split, end_position__gt=beyond)
    for path in doomed.values_list("path", flat=True):
        landing_zone().remove(path)
    doomed.delete()


def _source(run: FlowRun):
    from dataflow.services.runs import source_for

    return source_for(run)


# Metrics.


def metrics_sample(*, run: FlowRun) -> list[MetricSample]:
    """One sample of the run (``split_id`` empty) and of each of its splits that is open or
    moved since the last sample (a finished file is sampled once, not every time): counters,
    lag where the connector can tell, records/s since the previous sample, and the
    end-to-end latency of the last committed transform epoch."""
    now = timezone.now()
    source = _source(run)
    splits = list(run.splits.all())
    open_splits = {s.split_id: (s.payload, s.position) for s in splits if s.status != SplitStatus.FINISHED}
    lags = source.split_lags(open_splits) if open_splits else {}
    last_at = MetricSample.objects.filter(run=run).aggregate(at=Max("at"))["at"]
    previous = {m.split_id: m for m in MetricSample.objects.filter(run=run, at=last_at)} if last_at else {}
    samples = [
        _sample(
            run,
            now,
            previous.get(split.split_id),
            split_id=split.split_id,
            records_read=split.records_read,
            bytes_read=split.bytes_read,
            batches=split.batches,
            errors=split.errors_count,
            last_offset=source.format_position(split.position)[:64],
            lag=lags.get(split.split_id),
        )
        for split in splits
        if split.split_id in open_splits or _moved(split, previous.get(split.split_id))
    ]
    known = [lag for lag in lags.values() if lag is not None]
    total = _sample(
        run,
        now,
        previous.get(""),
        records_read=sum(s.records_read for s in splits),
        bytes_read=sum(s.bytes_read for s in splits),
        batches=sum(s.batches for s in splits),
        errors=sum(s.errors_count for s in splits),
        lag=sum(known) if known else None,
        latency_ms=_last_epoch_latency_ms(run),
    )
    MetricSample.objects.bulk_create([*samples, total])
    # A run that reads for months keeps samples for DATAFLOW_RETENTION_DAYS, not forever.
    MetricSample.objects.filter(
        run=run, at__lt=now - timedelta(days=settings.DATAFLOW_RETENTION_DAYS)
    ).delete()
    return [*samples, total]


def _moved(split: Split, previous: MetricSample | None) -> bool:
    return previous is None or previous.records_read != split.records_read


def _sample(run: FlowRun, now, previous: MetricSample | None, **counters: Any) -> MetricSample:
    sample = MetricSample(run=run, at=now, **counters)
    if previous is not None:
        seconds = (now - previous.at).total_seconds()
        if seconds > 0:
            sample.records_per_s = max(0.0, (sample.records_read - previous.records_read) / seconds)
    return sample


def _last_epoch_latency_ms(run: FlowRun) -> int | None:
    epoch = TransformEpoch.objects.filter(run=run, status=EpochStatus.COMMITTED).order_by("-number").first()
    return epoch.latency_ms if epoch is not None else None
