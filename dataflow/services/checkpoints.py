"""Checkpoints of unbounded runs: taken while a run reads, listed, and restored into a new
run (Flink's savepoints)."""

from __future__ import annotations

from django.conf import settings
from django.db import transaction
from django.db.models import Min

from dataflow.models import (
    Checkpoint,
    DataFlow,
    FlowRun,
    LandedBatch,
    Split,
    SplitStatus,
)
from dataflow.services.context import source_for
from source_support.api import Source
from source_support.errors import ConfigError


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


def run_splits_check(*, run: FlowRun) -> None:
    """Refuses to let ``run`` go on (resumed, restored, restarted) if its owner may no
    longer use its connections (a revoked grant, a deleted connection: ConfigError from
    resolving them now) or if one of its unfinished splits reads what its connection no
    longer allows (a stream, topic, subject or object outside the patterns as they are
    now, or a key the deployment uses): ConfigError naming ``source.connection``."""
    source = source_for(run)  # resolves the connections as they are now
    if type(source).split_refusal is Source.split_refusal:
        return  # a source whose connection limits no split (files): nothing to read back
    serializer = source.split_serializer
    rows = (
        Split.objects.filter(run=run)
        .exclude(status=SplitStatus.FINISHED)
        .values_list("split_id", "payload", "position")
        .order_by("pk")
    )
    for split_id, payload, position in rows.iterator():
        why = source.split_refusal(serializer.deserialize(payload).at(position))
        if why:
            raise ConfigError(
                "source.connection",
                f"split {split_id} cannot go on: {why}; start the flow anew to read what it allows",
            )
