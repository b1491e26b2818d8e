"""The durable side of a run (``source_support.runtime.RunStore``) on the Django ORM.

Every write that moves a checkpoint is fenced by the reader's token: a reader whose lease
lapsed and whose split went to another reader can no longer move that split's position.
"""

from __future__ import annotations

import logging
from typing import Any

from django.db import transaction
from django.db.models import F
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
        self._pks: dict[str, int] = {}

    def record_assignments(
        self,
        assignments: dict[int, list[tuple[str, dict[str, Any], int]]],
        tokens: dict[int, str],
        locations: dict[int, str] | None = None,
    ) -> None:
        """Creates or takes back the splits and records one Assignment each, in bulk.

        Only a new split or one that came back (UNASSIGNED) is assigned: the database's
        checkpoint, never the enumerator's copy of a split, says where reading goes on.
        """
        locations = locations or {}
        wanted = {
            split_id: (subtask, payload, position)
            for subtask, rows in assignments.items()
            for split_id, payload, position in rows
        }
        if not wanted:
            return
        known = Split.objects.select_for_update().filter(run=self.run, split_id__in=list(wanted))
        existing = {split.split_id: split for split in known}
        fresh, returned = [], []
        for split_id, (subtask, payload, position) in wanted.items():
            split = existing.get(split_id)
            if split is None:
                split = Split(run=self.run, split_id=split_id, payload=payload, position=position)
                fresh.append(split)
            elif split.status == SplitStatus.UNASSIGNED:
                returned.append(split)
            else:
                log.error("split %s is %s; not assigned again", split_id, split.status)
                continue
            split.status = SplitStatus.ASSIGNED
            split.owner_subtask, split.owner_token = subtask, tokens[subtask]
        Split.objects.bulk_create(fresh)
        Split.objects.bulk_update(returned, ["status", "owner_subtask", "owner_token"])
        Assignment.objects.bulk_create(
            Assignment(
                split=split,
                subtask=split.owner_subtask,
                reader_token=split.owner_token,
                reader_location=locations.get(split.owner_subtask, ""),
                start_position=split.position,
            )
            for split in fresh + returned
        )

    def owned_splits(self, subtask: int, token: str) -> list[tuple[dict[str, Any], int]]:
        rows = Split.objects.filter(run=self.run, owner_token=token, status=SplitStatus.ASSIGNED).values_list(
            "pk", "split_id", "payload", "position"
        )
        owned = []
        for pk, split_id, payload, position in rows:
            self._pks[split_id] = pk  # commit_batch needs it; saves a lookup per split
            owned.append((payload, position))
        return owned

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
            # One fenced UPDATE is the whole check: the token still owns the split, and
            # the batch starts where the checkpoint is (a replayed batch does not).
            moved = Split.objects.filter(
                run=self.run,
                split_id=split_id,
                owner_token=token,
                status=SplitStatus.ASSIGNED,
                position=start,
            ).update(
                position=end,
                records_read=F("records_read") + records,
                errors_count=F("errors_count") + len(bad_records),
                status=SplitStatus.FINISHED if finished else SplitStatus.ASSIGNED,
                updated_at=timezone.now(),
            )
            if not moved:
                return False
            split_pk = self._split_pk(split_id)
            if landed_path:
                LandedBatch.objects.create(
                    split_id=split_pk,
                    start_position=start,
                    end_position=end,
                    path=landed_path,
                    records=records,
                )
            if bad_records:
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
            if finished:
                Assignment.objects.filter(split_id=split_pk, reader_token=token).update(
                    outcome=AssignmentOutcome.FINISHED, end_position=end, ended_at=timezone.now()
                )
        return True

    def _split_pk(self, split_id: str) -> int:
        pk = self._pks.get(split_id)
        if pk is None:
            pk = self._pks[split_id] = Split.objects.get(run=self.run, split_id=split_id).pk
        return pk

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
