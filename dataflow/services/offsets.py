"""A stopped flow's split positions, as Kafka Connect's offsets API has them: read, set,
reset."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from dataflow.models import (
    ACTIVE_RUN_STATUSES,
    DataFlow,
    FlowRun,
    LandedBatch,
    RunStatus,
    Split,
    SplitStatus,
)
from dataflow.services.context import landing_zone, source_for
from dataflow.services.errors import FlowStateError
from source_support.errors import ConfigError


def _stopped_run(flow: DataFlow) -> FlowRun:
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
    # Every landed batch still kept reaches the sink some day (a planned epoch, an open
    # window): all of them past the new position would be read twice.
    doomed = LandedBatch.objects.filter(split=split, end_position__gt=beyond)
    for path in doomed.values_list("path", flat=True):
        landing_zone().remove(path)
    doomed.delete()


def _source(run: FlowRun):
    return source_for(run)
