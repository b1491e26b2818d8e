"""Removing what ended runs leave behind: landed files, old runs and their rows.

A run's landed files are removed as it succeeds, and as it fails unless it can still go on;
they are kept while a run can be resumed (``run_resumable``), so nothing read is lost, and
this module lets what is left go after ``DATAFLOW_RETENTION_DAYS``. What a user may still
need is never touched: an active run, and a run that can be resumed (going on reads its
landed files and checkpoints); ``cleanup`` says how much those hold. A flow's latest run
keeps its row (and its dead letters), so the admin still shows how the flow last ended;
only its landed files go.
"""

from __future__ import annotations

import logging
import os
import shutil
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.db.models import Exists, Max, OuterRef
from django.utils import timezone

from dataflow.models import (
    Assignment,
    DeadLetter,
    FlowRun,
    LandedBatch,
    PendingSplit,
    RunStatus,
    Split,
    SplitStatus,
)
from dataflow.services.context import landing_zone, run_key

log = logging.getLogger(__name__)

ENDED_RUN_STATUSES = (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.STOPPED)


def run_resumable(*, run: FlowRun) -> bool:
    """Whether an ended run can still go on from its checkpoints and so needs its landed
    files: it is its flow's latest run and either stopped (``resume``; not a replay of dead
    letters, which is replayed again instead) or failed with failed splits (``restart
    --failed`` reads those again within the run). A run that failed as a whole (its
    transform, its landing zone full) cannot: a new run reads the source again."""
    latest = FlowRun.objects.filter(flow_id=run.flow_id).order_by("-id").values_list("id", flat=True).first()
    if latest != run.pk:
        return False
    status, spec = FlowRun.objects.filter(pk=run.pk).values_list("status", "spec").get()
    if status == RunStatus.STOPPED:
        return not spec.get("replay")
    if status == RunStatus.FAILED:
        return Split.objects.filter(run_id=run.pk, status=SplitStatus.FAILED).exists()
    return False


def run_landing_dir(run: FlowRun) -> Path:
    """Where the readers of ``run`` land its batches (the one place that says so here)."""
    return landing_zone().run_dir(run_key(run))


class UnsafeLandingDir(RuntimeError):
    """A directory to remove does not resolve to a place strictly under the landing root."""


def _checked_landing_dir(run: FlowRun) -> Path:
    """The run's landing directory, resolved; refuses one that a symlink or a setting leads
    outside the landing root (``realpath`` of both, checked right before removing)."""
    root = Path(os.path.realpath(settings.DATAFLOW_LANDING_ROOT))
    target = Path(os.path.realpath(run_landing_dir(run)))
    if target == root or root not in target.parents:
        raise UnsafeLandingDir(f"{target} is not under the landing root {root}; not removed")
    return target


@dataclass
class DirUsage:
    files: int = 0
    bytes: int = 0

    def add(self, other: DirUsage) -> None:
        self.files += other.files
        self.bytes += other.bytes


def _usage(path: Path) -> DirUsage:
    usage = DirUsage()
    for parent, _, names in os.walk(path):
        for name in names:
            try:
                usage.bytes += os.lstat(os.path.join(parent, name)).st_size
            except FileNotFoundError:
                continue
            usage.files += 1
    return usage


def run_landing_dir_remove(*, run: FlowRun) -> DirUsage:
    """Removes the landed files of ``run`` (which must not be active); returns what they held."""
    target = _checked_landing_dir(run)
    usage = _usage(target)
    shutil.rmtree(target, ignore_errors=True)
    return usage


@dataclass
class CleanupPlan:
    """What a cleanup removes: the landed files of ``landed_runs`` and the rows of
    ``deleted_runs`` (with their splits, assignments, landed batches and dead letters)."""

    cutoff: datetime
    landed_runs: list[FlowRun] = field(default_factory=list)
    deleted_runs: list[FlowRun] = field(default_factory=list)
    landed: DirUsage = field(default_factory=DirUsage)
    rows: dict[str, int] = field(default_factory=dict)
    #: Runs that can still be resumed, whatever their age, with what their landed files
    #: hold: never removed here (stop or delete the flow, or start a new run, to let go).
    kept: list[tuple[FlowRun, DirUsage]] = field(default_factory=list)

    def summary(self) -> str:
        rows = ", ".join(f"{count} {name}" for name, count in self.rows.items())
        return (
            f"landed files of {len(self.landed_runs)} runs: {self.landed.files} files, "
            f"{self.landed.bytes} bytes; {len(self.deleted_runs)} runs ({rows or 'no rows'})"
        )

    def kept_lines(self) -> list[str]:
        """One line per run kept because it can be resumed, saying what it holds and why."""
        return [
            f"kept: run {run.pk} of {run.flow.name} ({run.status}, can be resumed) holds "
            f"{usage.files} landed files, {usage.bytes} bytes"
            for run, usage in self.kept
        ]


def cleanup_plan(*, older_than_days: float | None = None, now: datetime | None = None) -> CleanupPlan:
    """What ``cleanup_apply`` would remove for runs that ended more than ``older_than_days``
    (default ``DATAFLOW_RETENTION_DAYS``) ago. Removes nothing."""
    days = settings.DATAFLOW_RETENTION_DAYS if older_than_days is None else older_than_days
    plan = CleanupPlan(cutoff=(now or timezone.now()) - timedelta(days=days))
    latest_run = dict(
        FlowRun.objects.values("flow_id").annotate(last=Max("id")).values_list("flow_id", "last")
    )
    resumable = {run.pk for run in _resumable_runs(latest_run)}
    for run in FlowRun.objects.filter(pk__in=resumable).select_related("flow").order_by("id"):
        if run_landing_dir(run).exists():
            try:
                plan.kept.append((run, _usage(_checked_landing_dir(run))))
            except UnsafeLandingDir as exc:
                log.warning("cleanup: %s", exc)
    ended = FlowRun.objects.filter(status__in=ENDED_RUN_STATUSES, finished_at__lt=plan.cutoff).order_by("id")
    for run in ended.only("id", "uid", "flow_id", "status"):
        if run.pk in resumable:
            continue
        if run_landing_dir(run).exists():
            try:
                plan.landed.add(_usage(_checked_landing_dir(run)))
            except UnsafeLandingDir as exc:
                log.warning("cleanup: %s", exc)
            else:
                plan.landed_runs.append(run)
        if latest_run.get(run.flow_id) != run.pk:
            plan.deleted_runs.append(run)
    ids = [run.pk for run in plan.deleted_runs]
    plan.rows = {
        "splits": Split.objects.filter(run_id__in=ids).count(),
        "assignments": Assignment.objects.filter(split__run_id__in=ids).count(),
        "dead letters": DeadLetter.objects.filter(run_id__in=ids).count(),
    }
    return plan


def _resumable_runs(latest_run: dict[int, int]) -> list[FlowRun]:
    """Each flow's latest run where it can be resumed (``run_resumable``, in two queries)."""
    latest = FlowRun.objects.filter(pk__in=latest_run.values())
    failed_splits = Split.objects.filter(run_id=OuterRef("pk"), status=SplitStatus.FAILED)
    return list(latest.filter(status=RunStatus.STOPPED).exclude(spec__has_key="replay").only("id")) + list(
        latest.filter(status=RunStatus.FAILED).filter(Exists(failed_splits)).only("id")
    )


def cleanup_apply(*, plan: CleanupPlan) -> CleanupPlan:
    """Removes what ``plan`` lists; returns what was removed (counted again as it goes, so a
    run that became the latest or was resumed meanwhile is left alone)."""
    done = CleanupPlan(cutoff=plan.cutoff)
    for run in plan.landed_runs:
        if not FlowRun.objects.filter(pk=run.pk, status__in=ENDED_RUN_STATUSES).exists():
            continue  # resumed since the plan was made
        try:
            done.landed.add(run_landing_dir_remove(run=run))
        except UnsafeLandingDir as exc:
            log.warning("cleanup: %s", exc)
            continue
        done.landed_runs.append(run)
    ids = [run.pk for run in plan.deleted_runs]
    with transaction.atomic():
        # Rows in dependency order, each in one statement (a cascade from the runs would
        # load every split of every run first).
        still_ended = list(
            FlowRun.objects.select_for_update()
            .filter(pk__in=ids, status__in=ENDED_RUN_STATUSES)
            .values_list("pk", flat=True)
        )
        done.rows = {
            "assignments": Assignment.objects.filter(split__run_id__in=still_ended).delete()[0],
            "landed batches": LandedBatch.objects.filter(split__run_id__in=still_ended).delete()[0],
            "dead letters": DeadLetter.objects.filter(run_id__in=still_ended).delete()[0],
            "pending splits": PendingSplit.objects.filter(run_id__in=still_ended).delete()[0],
            "splits": Split.objects.filter(run_id__in=still_ended).only("id").delete()[0],
        }
        FlowRun.objects.filter(pk__in=still_ended).delete()
    done.deleted_runs = [run for run in plan.deleted_runs if run.pk in set(still_ended)]
    return done
