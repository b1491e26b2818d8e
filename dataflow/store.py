"""The durable side of a run (``source_support.runtime.RunStore``) on the Django ORM.

Every write that moves a checkpoint is fenced by the reader's token: a reader whose lease
lapsed and whose split went to another reader can no longer move that split's position.
"""

from __future__ import annotations

import logging
from typing import Any

from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from dataflow.models import (
    Assignment,
    AssignmentOutcome,
    DeadLetter,
    FlowRun,
    LandedBatch,
    Split,
    SplitStatus,
)
from source_support.api import BadRecord

log = logging.getLogger(__name__)


class DjangoRunStore:
    def __init__(self, run: FlowRun) -> None:
        self.run = run

    def record_assignments(
        self,
        assignments: dict[int, list[tuple[str, dict[str, Any], int]]],
        tokens: dict[int, str],
    ) -> None:
        for subtask, rows in assignments.items():
            token = tokens[subtask]
            for split_id, payload, position in rows:
                split, _ = Split.objects.update_or_create(
                    run=self.run,
                    split_id=split_id,
                    defaults={
                        "payload": payload,
                        "position": position,
                        "status": SplitStatus.ASSIGNED,
                        "owner_subtask": subtask,
                        "owner_token": token,
                    },
                )
                Assignment.objects.create(
                    split=split,
                    subtask=subtask,
                    reader_token=token,
                    start_position=position,
                )

    def owned_splits(self, subtask: int, token: str) -> list[tuple[dict[str, Any], int]]:
        rows = Split.objects.filter(run=self.run, owner_token=token, status=SplitStatus.ASSIGNED).values_list(
            "payload", "position"
        )
        return list(rows)

    def reclaim_expired(self, live: dict[int, str]) -> dict[int, list[tuple[dict[str, Any], int]]]:
        stale = Split.objects.filter(run=self.run, status=SplitStatus.ASSIGNED).exclude(
            owner_token__in=list(live.values())
        )
        reclaimed: dict[int, list[tuple[dict[str, Any], int]]] = {}
        for split in stale.select_for_update():
            reclaimed.setdefault(split.owner_subtask, []).append((split.payload, split.position))
            Assignment.objects.filter(
                split=split,
                reader_token=split.owner_token,
                outcome=AssignmentOutcome.ACTIVE,
            ).update(
                outcome=AssignmentOutcome.EXPIRED,
                end_position=split.position,
                ended_at=timezone.now(),
            )
            split.status, split.owner_token, split.owner_subtask = (
                SplitStatus.UNASSIGNED,
                "",
                None,
            )
            split.save(update_fields=["status", "owner_token", "owner_subtask", "updated_at"])
        return reclaimed

    def load_enumerator_state(self) -> dict[str, Any] | None:
        return FlowRun.objects.filter(pk=self.run.pk).values_list("enumerator_state", flat=True).first()

    def save_enumerator_state(self, state: dict[str, Any], *, pending: int, exhausted: bool) -> None:
        FlowRun.objects.filter(pk=self.run.pk).update(
            enumerator_state=state, splits_pending=pending, enumeration_done=exhausted
        )

    def commit_batch(
        self,
        split_id: str,
        token: str,
        *,
        start: int,
        end: int,
        landed_path: str | None,
        records: int,
        bad_records: list[BadRecord],
        finished: bool,
    ) -> bool:
        with transaction.atomic():
            owned = Q(
                run=self.run,
                split_id=split_id,
                owner_token=token,
                status=SplitStatus.ASSIGNED,
            )
            split = Split.objects.select_for_update().filter(owned).first()
            if split is None or split.position != start:
                return False
            if landed_path:
                LandedBatch.objects.update_or_create(
                    split=split,
                    start_position=start,
                    defaults={
                        "end_position": end,
                        "path": landed_path,
                        "records": records,
                    },
                )
            DeadLetter.objects.bulk_create(
                [
                    DeadLetter(
                        flow_id=self.run.flow_id,
                        run=self.run,
                        split_id=split_id,
                        position=bad.position,
                        raw=bad.raw,
                        error=bad.reason,
                    )
                    for bad in bad_records
                ],
                ignore_conflicts=True,
            )
            split.position = end
            split.records_read = F("records_read") + records
            split.errors_count = F("errors_count") + len(bad_records)
            if finished:
                split.status = SplitStatus.FINISHED
                Assignment.objects.filter(split=split, reader_token=token).update(
                    outcome=AssignmentOutcome.FINISHED,
                    end_position=end,
                    ended_at=timezone.now(),
                )
            split.save()
            FlowRun.objects.filter(pk=self.run.pk).update(
                records_read=F("records_read") + records,
                errors_count=F("errors_count") + len(bad_records),
            )
        return True

    def fail_split(self, split_id: str, token: str, message: str) -> None:
        with transaction.atomic():
            updated = Split.objects.filter(
                run=self.run,
                split_id=split_id,
                owner_token=token,
                status=SplitStatus.ASSIGNED,
            ).update(status=SplitStatus.FAILED, error=message)
            if updated:
                Assignment.objects.filter(
                    split__run=self.run, split__split_id=split_id, reader_token=token
                ).update(outcome=AssignmentOutcome.FAILED, ended_at=timezone.now())
