"""Removing what ended runs leave behind: landed files, old runs and their rows.

A run's landed files are kept when it fails or is stopped, so nothing read is lost; this
module lets them go after ``DATAFLOW_RETENTION_DAYS``. What a user may still need is never
touched: an active run, and a flow's latest stopped run (resuming it reads its landed files
and checkpoints). A flow's latest run keeps its row (and its dead letters), so the admin still
shows how the flow last ended; only its landed files go.
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
from django.db.models import Max
from django.utils import timezone

from dataflow.models import (
    Assignment,
    DeadLetter,
    FlowRun,
    LandedBatch,
    PendingSplit,
    RunStatus,
    Split,
)

log = logging.getLogger(__name__)

ENDED_RUN_STATUSES = (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.STOPPED)


def run_landing_dir(run: FlowRun) -> Path:
    """Where the readers of ``run`` land its batches (the one place that says so here)."""
    from dataflow.services.runs import landing_zone, run_key

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

    def summary(self) -> str:
        rows = ", ".join(f"{count} {name}" for name, count in self.rows.items())
        return (
            f"landed files of {len(self.landed_runs)} runs: {self.landed.files} files, "
            f"{self.landed.bytes} bytes; {len(self.deleted_runs)} runs ({rows or 'no rows'})"
        )


def cleanup_plan(*, older_than_days: float | None = None, now: datetime | None = None) -> CleanupPlan:
    """What ``cleanup_apply`` would remove for runs that ended more than ``older_than_days``
    (default ``DATAFLOW_RETENTION_DAYS``) ago. Removes nothing."""
    days = settings.DATAFLOW_RETENTION_DAYS if older_than_days is None else older_than_days
    plan = CleanupPlan(cutoff=(now or timezone.now()) - timedelta(days=days))
    latest_run = dict(
        FlowRun.objects.values("flow_id").annotate(last=Max("id")).values_list("flow_id", "last")
    )
    latest_stopped = set(
        FlowRun.objects.filter(status=RunStatus.STOPPED)
        .values("flow_id")
        .annotate(last=Max("id"))
        .values_list("last", flat=True)
    )
    ended = FlowRun.objects.filter(status__in=ENDED_RUN_STATUSES, finished_at__lt=plan.cutoff).order_by("id")
    for run in ended.only("id", "uid", "flow_id", "status"):
        if run.pk in latest_stopped:
            continue  # it can be resumed
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
