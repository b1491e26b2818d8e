"""The durable side of a run (``source_support.runtime.RunStore``) on the Django ORM.

Every write that moves a checkpoint is fenced by the reader's token: a reader whose lease
lapsed and whose split went to another reader can no longer move that split's position.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Max, Min, OuterRef, Subquery, Sum
from django.utils import timezone

from dataflow.limits import Limit, SplitCeilingReached, user_limit
from dataflow.models import (
    Assignment,
    AssignmentOutcome,
    DataFlow,
    DeadLetter,
    FlowRun,
    LandedBatch,
    PendingSplit,
    RunStatus,
    SchemaChangeRecord,
    Split,
    SplitStatus,
)
from source_support.api import SchemaChange
from source_support.coordination import AssignedSplit
from source_support.runtime import BatchCommit

log = logging.getLogger(__name__)


class DjangoRunStore:
    def __init__(self, run: FlowRun) -> None:
        self.run = run
        self._split_ceiling: Limit | None = None

    def split_ceiling(self) -> Limit:
        """The most splits the run may have: its owner's ``max_splits_per_flow``."""
        if self._split_ceiling is None:
            owner_id = DataFlow.objects.filter(pk=self.run.flow_id).values_list("owner_id", flat=True).first()
            self._split_ceiling = user_limit(user_id=owner_id, name="max_splits_per_flow")
        return self._split_ceiling

    def _check_split_ceiling(self, adding: int) -> None:
        """Raises ``SplitCeilingReached`` (the tick's transaction then keeps none of the
        pass) if the run's splits, held and pending, with ``adding`` more, pass the ceiling."""
        ceiling = self.split_ceiling()
        known = Split.objects.filter(run=self.run).count() + PendingSplit.objects.filter(run=self.run).count()
        if known + adding > ceiling.value:
            raise SplitCeilingReached(
                f"the source has more than {ceiling.value:,} splits ({known + adding:,} found so far), "
                f"the most one flow may have ({ceiling.source}); discovery stopped. Narrow the source "
                "(fewer streams or files, a larger split_size_mb) or ask an operator to raise the limit"
            )

    def record_assignments(
        self,
        assignments: dict[int, list[AssignedSplit]],
        tokens: dict[int, str],
        locations: dict[int, str],
    ) -> dict[int, list[AssignedSplit]]:
        """Creates or takes back the splits and records one Assignment each, in bulk.

        Only a new split or one that came back (UNASSIGNED) is assigned: the database's
        checkpoint, never the enumerator's copy of a split, says where reading goes on.
        """
        wanted = {row[0]: (subtask, row) for subtask, rows in assignments.items() for row in rows}
        if not wanted:
            return {}
        # Rows as JSON arrays in the order of _ASSIGNED_COLUMNS: no dict per split.
        rows = json.dumps(
            [
                (split_id, payload, position, subtask, tokens[subtask])
                for subtask, (split_id, payload, position) in wanted.values()
            ]
        )
        table, now = Split._meta.db_table, _now()
        with connection.cursor() as cursor:
            # New splits are inserted; a split that exists is skipped here...
            cursor.execute(
                f"INSERT INTO {table} (run_id, split_id, payload, position, status, owner_subtask,"
                " owner_token, records_read, errors_count, error, updated_at)"
                f" SELECT %s, v.split_id, v.payload, v.position, '{SplitStatus.ASSIGNED}', v.subtask,"
                f" v.token, 0, 0, '', %s FROM {_json_rows(_ASSIGNED_COLUMNS, len(wanted))} AS v WHERE true"
                " ON CONFLICT (run_id, split_id) DO NOTHING RETURNING id, split_id, position",
                [self.run.pk, now, rows],
            )
            assigned = cursor.fetchall()
            if assigned:
                self._check_split_ceiling(0)  # the new rows are counted already
            # ... and taken back only if it came back from a reader (UNASSIGNED).
            if len(assigned) < len(wanted):
                cursor.execute(
                    f"UPDATE {table} SET status = '{SplitStatus.ASSIGNED}', owner_subtask = v.subtask,"
                    f" owner_token = v.token, updated_at = %s FROM {_json_rows(_ASSIGNED_COLUMNS, len(wanted))} AS v"
                    f" WHERE run_id = %s AND {table}.split_id = v.split_id"
                    f" AND status = '{SplitStatus.UNASSIGNED}' RETURNING id, {table}.split_id, {table}.position",
                    [now, rows, self.run.pk],
                )
                assigned += cursor.fetchall()
            if len(assigned) < len(wanted):
                refused = set(wanted) - {split_id for _, split_id, _ in assigned}
                log.error("splits out with a reader or ended, not assigned again: %s", sorted(refused)[:10])
            out: dict[int, list[AssignedSplit]] = {}
            journal = []
            for pk, split_id, position in assigned:
                subtask, (_, payload, _) = wanted[split_id]
                out.setdefault(subtask, []).append((split_id, payload, position))
                journal.append((pk, subtask, tokens[subtask], locations.get(subtask, ""), position))
            if not journal:
                return {}
            cursor.execute(
                f"INSERT INTO {Assignment._meta.db_table} (split_id, subtask, reader_token,"
                " reader_location, start_position, outcome, assigned_at)"
                f" SELECT v.split, v.subtask, v.token, v.location, v.position, '{AssignmentOutcome.ACTIVE}', %s"
                f" FROM {_json_rows(_JOURNAL_COLUMNS, len(journal))} AS v",
                [now, json.dumps(journal)],
            )
        return out

    def owned_splits(self, subtask: int, token: str) -> list[AssignedSplit]:
        rows = Split.objects.filter(run=self.run, owner_token=token, status=SplitStatus.ASSIGNED)
        return list(rows.values_list("split_id", "payload", "position"))

    def reclaim_expired(self, live: dict[int, str]) -> dict[int, list[AssignedSplit]]:
        """Takes back, in three statements, every split held by a token that is not live."""
        stale = list(
            Split.objects.select_for_update()
            .filter(run=self.run, status=SplitStatus.ASSIGNED)
            .exclude(owner_token__in=list(live.values()))
            .values_list("pk", "owner_subtask", "split_id", "payload", "position")
        )
        if not stale:
            return {}
        _take_back([row[0] for row in stale], AssignmentOutcome.EXPIRED)
        reclaimed: dict[int, list[AssignedSplit]] = {}
        for _, subtask, split_id, payload, position in stale:
            reclaimed.setdefault(subtask, []).append((split_id, payload, position))
        return reclaimed

    def revoke_splits(self, split_ids: Sequence[str]) -> list[tuple[int, AssignedSplit]]:
        """Takes assigned splits back from their owners (their commits are refused from now
        on); returns (old owner, split at its checkpoint) for each. Part of the tick's
        transaction, so the split is assigned again before anyone sees it unowned."""
        rows = list(
            Split.objects.select_for_update()
            .filter(run=self.run, split_id__in=list(split_ids), status=SplitStatus.ASSIGNED)
            .values_list("pk", "owner_subtask", "split_id", "payload", "position")
        )
        if not rows:
            return []
        _take_back([row[0] for row in rows], AssignmentOutcome.REVOKED)
        return [(owner, (split_id, payload, position)) for _, owner, split_id, payload, position in rows]

    def backlog_add(self, payloads: Sequence[dict[str, Any]], *, front: bool) -> None:
        if not payloads:
            return
        if not front:  # new splits (at the head: splits given back, counted already)
            self._check_split_ceiling(len(payloads))
        ends = PendingSplit.objects.filter(run=self.run).aggregate(first=Min("seq"), last=Max("seq"))
        if front:
            start = (ends["first"] if ends["first"] is not None else 0) - len(payloads)
        else:
            start = ends["last"] + 1 if ends["last"] is not None else 0
        rows = json.dumps([(start + i, payload) for i, payload in enumerate(payloads)])
        with connection.cursor() as cursor:
            cursor.execute(
                f"INSERT INTO {PendingSplit._meta.db_table} (run_id, seq, payload) SELECT %s, v.seq,"
                f" v.payload FROM {_json_rows(_BACKLOG_COLUMNS, len(payloads))} AS v",
                [self.run.pk, rows],
            )

    def backlog_head(self, count: int) -> list[tuple[int, dict[str, Any]]]:
        return list(
            PendingSplit.objects.filter(run=self.run).order_by("seq").values_list("pk", "payload")[:count]
        )

    def backlog_remove(self, keys: Sequence[int]) -> None:
        PendingSplit.objects.filter(pk__in=keys).delete()

    def load_enumerator_state(self) -> dict[str, Any] | None:
        """The state, with the run's row locked until the transaction ends: two ticks that
        both believe they hold the Redis lock (one lost Redis) still run one at a time."""
        _end_session_if_frozen()
        runs = FlowRun.objects.select_for_update().filter(pk=self.run.pk)
        return runs.values_list("enumerator_state", flat=True).first()

    def save_enumerator_state(self, state: dict[str, Any], *, pending: int, exhausted: bool) -> None:
        FlowRun.objects.filter(pk=self.run.pk).update(
            enumerator_state=state, splits_pending=pending, enumeration_done=exhausted
        )

    def commit_batches(self, token: str, commits: Sequence[BatchCommit]) -> set[str]:
        """One transaction for any number of batches: one fenced UPDATE moves every split
        whose token and checkpoint match, then the landed files, dead letters and finished
        assignments of the splits that moved are written in bulk."""
        moves = _merge_per_split(commits)
        with transaction.atomic():
            _end_session_if_frozen()
            moved = self._advance(token, moves)
            if not moved:
                return set()
            LandedBatch.objects.bulk_create(
                LandedBatch(
                    split_id=moved[c.split_id],
                    start_position=c.start,
                    end_position=c.end,
                    path=c.landed_path,
                    records=c.records,
                )
                for c in commits
                if c.landed_path and c.split_id in moved
            )
            DeadLetter.objects.bulk_create(
                [
                    DeadLetter(
                        flow_id=self.run.flow_id,
                        run=self.run,
                        split_id=c.split_id,
                        position=bad.position,
                        offset=bad.offset[:64],
                        line=bad.line,
                        raw=bad.raw,
                        error=bad.reason,
                    )
                    for c in commits
                    if c.split_id in moved
                    for bad in c.bad_records
                ],
                ignore_conflicts=True,
            )
            self._say_notes([m.note for m in moves if m.note and m.split_id in moved])
            self._record_schema_changes(
                [ch for c in commits if c.split_id in moved for ch in c.schema_changes]
            )
            finished = [(moved[m.split_id], m.end_at) for m in moves if m.finished and m.split_id in moved]
            if finished:
                self._finish_assignments(token, finished)
            over = self._over_max_errors(token, [c for c in commits if c.split_id in moved and c.bad_records])
        return set(moved) - over

    def _say_notes(self, notes: list[str]) -> None:
        """A connector's note on a split (its stream was deleted, replaced, or lost with
        its server) is also the run's message while it reads, so the operator sees it
        where the run's state is shown, not only on the split's row."""
        if notes:
            FlowRun.objects.filter(pk=self.run.pk, status=RunStatus.READING).update(message=notes[-1][:4000])

    def _over_max_errors(self, token: str, with_errors: list[BatchCommit]) -> set[str]:
        """Once the run has skipped more bad records than ``max_errors``, fails the split
        that went past it (its run then fails at the next tick) and returns it, so the
        reader drops it: a wrong schema costs ``max_errors`` dead letters, not one per row."""
        if not with_errors:
            return set()
        limit = self.run.spec.get("max_errors", 1000)
        total = Split.objects.filter(run=self.run).aggregate(n=Sum("errors_count", default=0))["n"]
        if total <= limit:
            return set()
        last = with_errors[-1]
        bad = last.bad_records[-1]
        where = f"{last.split_id} line {bad.line}" if bad.line else f"{last.split_id} at {bad.position}"
        message = f"more than {limit} bad records (flow.max_errors); the last, {where}: {bad.reason}"
        self._fail(last.split_id, token, message, finished_too=True)  # its last batch may end it
        return {last.split_id}

    def _advance(self, token: str, moves: list[_Move]) -> dict[str, int]:
        """The fenced UPDATE: split_id -> pk of each split that moved."""
        table = Split._meta.db_table
        sql = (
            f"UPDATE {table} SET position = v.end_at, records_read = records_read + v.records,"
            " errors_count = errors_count + v.errors,"
            f" batches = {table}.batches + v.batches, bytes_read = {table}.bytes_read + v.bytes,"
            f" error = CASE WHEN v.note <> '' THEN v.note ELSE {table}.error END,"
            f" status = CASE WHEN v.finished THEN '{SplitStatus.FINISHED}' ELSE '{SplitStatus.ASSIGNED}' END,"
            f" updated_at = %s FROM {_json_rows(_MOVE_COLUMNS, len(moves))} AS v"
            f" WHERE run_id = %s AND owner_token = %s AND status = '{SplitStatus.ASSIGNED}'"
            f" AND {table}.split_id = v.split_id AND position = v.start_at RETURNING id, {table}.split_id"
        )
        rows = json.dumps([m.row() for m in moves])
        with connection.cursor() as cursor:
            cursor.execute(sql, [_now(), rows, self.run.pk, token])
            return {split_id: pk for pk, split_id in cursor.fetchall()}

    def _finish_assignments(self, token: str, finished: list[tuple[int, int]]) -> None:
        sql = (
            f"UPDATE {Assignment._meta.db_table} SET outcome = '{AssignmentOutcome.FINISHED}',"
            f" end_position = v.end_at, ended_at = %s FROM {_json_rows(_FINISH_COLUMNS, len(finished))} AS v"
            f" WHERE split_id = v.split AND reader_token = %s AND outcome = '{AssignmentOutcome.ACTIVE}'"
        )
        rows = json.dumps(finished)
        with connection.cursor() as cursor:
            cursor.execute(sql, [_now(), rows, token])

    def fail_split(
        self, split_id: str, token: str, message: str, schema_changes: Sequence[SchemaChange] = ()
    ) -> None:
        with transaction.atomic():
            self._fail(split_id, token, message)
            self._record_schema_changes(schema_changes)

    def _record_schema_changes(self, changes: Sequence[SchemaChange]) -> None:
        """Adds the changes to the run's: one row per column and kind (the first position
        seen is kept), its records counted over every batch. Bounded: a batch's changes
        are the columns of its records."""
        if not changes:
            return
        merged: dict[tuple[str, str], SchemaChange] = {}
        for c in changes:
            seen = merged.get((c.column, c.kind))
            merged[(c.column, c.kind)] = (
                c if seen is None else replace(seen, records=seen.records + c.records)
            )
        table = SchemaChangeRecord._meta.db_table
        rows = [
            (
                self.run.pk,
                c.column[:300],
                c.kind,
                c.old_type[:200],
                c.new_type[:200],
                c.policy,
                c.where[:1200],
                c.records,
            )
            for c in merged.values()
        ]
        sql = (
            f"INSERT INTO {table} (run_id, column_name, kind, old_type, new_type, policy, first_position,"
            f" records, seen_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)"
            f" ON CONFLICT (run_id, column_name, kind) DO UPDATE SET records = {table}.records + excluded.records"
        )
        with connection.cursor() as cursor:
            cursor.executemany(sql, [(*row, _now()) for row in rows])

    def _fail(self, split_id: str, token: str, message: str, *, finished_too: bool = False) -> None:
        statuses = [SplitStatus.ASSIGNED, SplitStatus.FINISHED] if finished_too else [SplitStatus.ASSIGNED]
        updated = Split.objects.filter(
            run=self.run,
            split_id=split_id,
            owner_token=token,
            status__in=statuses,
        ).update(status=SplitStatus.FAILED, error=message)
        if updated:
            Assignment.objects.filter(
                split__run=self.run, split__split_id=split_id, reader_token=token
            ).update(outcome=AssignmentOutcome.FAILED, ended_at=timezone.now())


def _take_back(pks: list[int], outcome: str) -> None:
    """Ends the active assignments of splits ``pks`` with ``outcome`` at their checkpoints,
    and leaves the splits unowned (UNASSIGNED) for the enumerator to assign again."""
    Assignment.objects.filter(split_id__in=pks, outcome=AssignmentOutcome.ACTIVE).update(
        outcome=outcome,
        end_position=Subquery(Split.objects.filter(pk=OuterRef("split_id")).values("position")[:1]),
        ended_at=timezone.now(),
    )
    Split.objects.filter(pk__in=pks).update(
        status=SplitStatus.UNASSIGNED, owner_token="", owner_subtask=None, updated_at=timezone.now()
    )


def _end_session_if_frozen() -> None:
    """Bounds how long the current transaction may sit idle (PostgreSQL). A reader or tick
    whose process freezes mid-transaction (a long GC pause, a stopped VM) would otherwise
    hold its row locks until it woke: its expired splits could not be reclaimed, nor the
    run enumerated. After two reader leases (by then its splits belong to others) the
    server ends its session and the transaction rolls back; what it read is read again.
    Only for a transaction of its own: inside a caller's (an atomic block within another, as
    a flow started from an admin view's transaction), ``SET LOCAL`` would bound the caller's
    whole transaction, whose idle time is the caller's to decide."""
    if connection.vendor == "postgresql" and len(connection.atomic_blocks) <= 1:
        idle_ms = int(settings.DATAFLOW_READER_LEASE_SECONDS * 2000)
        with connection.cursor() as cursor:
            cursor.execute(f"SET LOCAL idle_in_transaction_session_timeout = {idle_ms}")


def _now() -> Any:
    """The current time as the database takes it in raw SQL."""
    return connection.ops.adapt_datetimefield_value(timezone.now())


_ASSIGNED_COLUMNS = {
    "split_id": "text",
    "payload": "json",
    "position": "bigint",
    "subtask": "integer",
    "token": "text",
}
_JOURNAL_COLUMNS = {
    "split": "bigint",
    "subtask": "integer",
    "token": "text",
    "location": "text",
    "position": "bigint",
}
_MOVE_COLUMNS = {"split_id": "text", "start_at": "bigint", "end_at": "bigint", "records": "bigint"} | {
    "errors": "bigint",
    "finished": "boolean",
    "batches": "bigint",
    "bytes": "bigint",
    "note": "text",
}
_FINISH_COLUMNS = {"split": "bigint", "end_at": "bigint"}
_BACKLOG_COLUMNS = {"seq": "bigint", "payload": "json"}


def _json_rows(columns: dict[str, str], count: int) -> str:
    """A subquery with one row per element of a JSON array passed as one parameter; each
    element is an array of the row's values in the order of ``columns`` (no key names to
    write and parse per row).

    The coordination hot path writes rows per split; one JSON parameter keeps each
    statement's text short whatever the number of rows (psycopg re-parses a statement
    with many placeholders every time) and works on PostgreSQL and on SQLite >= 3.38.
    ``LIMIT count`` tells PostgreSQL's planner how many rows come (it assumes 100 for a
    set-returning function), so it joins through the indexes even before the tables have
    statistics, instead of scanning a table for a few rows.
    """
    elements = "jsonb_array_elements(%s::jsonb)" if connection.vendor == "postgresql" else "json_each(%s)"
    values = ", ".join(
        f"value->{i} AS {name}" if kind == "json" else f"CAST(value->>{i} AS {kind}) AS {name}"
        for i, (name, kind) in enumerate(columns.items())
    )
    return f"(SELECT {values} FROM {elements} LIMIT {int(count)})"


@dataclass
class _Move:
    """A split's batches of one commit, merged: where it starts and where it ends up."""

    split_id: str
    start_at: int
    end_at: int
    records: int
    errors: int
    finished: bool
    batches: int
    bytes: int
    note: str = ""

    def row(self) -> tuple[str, int, int, int, int, bool, int, int, str]:
        """The move in the order of ``_MOVE_COLUMNS``."""
        return (
            self.split_id,
            self.start_at,
            self.end_at,
            self.records,
            self.errors,
            self.finished,
            self.batches,
            self.bytes,
            self.note,
        )


def _merge_per_split(commits: Sequence[BatchCommit]) -> list[_Move]:
    """One move per split (an UPDATE ... FROM changes a row once), from its consecutive
    batches in order."""
    moves: dict[str, _Move] = {}
    for c in commits:
        move = moves.get(c.split_id)
        if move is None:
            moves[c.split_id] = _Move(
                c.split_id, c.start, c.end, c.records, len(c.bad_records), c.finished, 1, c.bytes_read, c.note
            )
            continue
        if c.start != move.end_at:
            raise ValueError(f"split {c.split_id}: batch at {c.start} does not follow {move.end_at}")
        move.end_at, move.finished = c.end, c.finished
        move.records += c.records
        move.errors += len(c.bad_records)
        move.batches += 1
        move.bytes += c.bytes_read
        move.note = c.note or move.note
    return list(moves.values())
