"""Creating, editing, starting and stopping flows.

``flow_create``, ``flow_replace`` and ``flow_merge`` take the REST API's edits: a spec in the
TOML shape (the API's views turn its flattened body into it), with secrets sent back masked
keeping the stored ones.
"""

from __future__ import annotations

import glob
import logging
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from django.db import transaction
from django.utils import timezone

from dataflow.encryption import SecretUndecryptable, secrets_check
from dataflow.models import (
    ACTIVE_RUN_STATUSES,
    Checkpoint,
    DataFlow,
    FlowRun,
    FlowStatus,
    RunStatus,
    Split,
    SplitStatus,
)
from dataflow.services.checkpoints import run_splits_check, seed_run_from_checkpoint
from dataflow.services.cleanup import UnsafeLandingDir, run_landing_dir_remove
from dataflow.services.connections import flow_connections_check
from dataflow.services.context import coordinator_for, source_for
from dataflow.services.environment import environment
from dataflow.services.errors import FlowExistsError, FlowStateError, QuotaExceeded
from dataflow.services.lineage import run_lineage_again, run_lineage_emit
from dataflow.services.notify import notify_unmasked, run_notify
from dataflow.services.queues import TRANSFORM_CHECK, run_task_send
from dataflow.services.quotas import quota_check_flow_apply, quota_check_run_start
from dataflow.services.runs.finish import run_finish
from dataflow.services.runs.start import run_prepare, run_schema_resolve
from dataflow.services.runs.tick import request_tick
from dataflow.services.schedules import schedule_remove, schedule_remove_orphan, schedule_sync
from dataflow.services.specs import (
    PARALLELISM_BOUNDS,
    flow_format_file_check,
    flow_paths_check,
    flow_secrets_check,
    flow_spec_of,
    flow_spec_validate,
    flow_values_of,
    sink_path_claim,
)
from dataflow.services.ticks import flow_ticks_remove, flow_ticks_set
from source_support.errors import ConfigError
from source_support.registry import unmask_section

log = logging.getLogger(__name__)
#: Scheduled starts log where operators look for their schedules.
schedule_log = logging.getLogger("dataflow.services.schedules")


def flow_apply(*, spec: dict[str, Any], owner=None) -> tuple[DataFlow, bool]:
    """Creates the flow named in ``spec`` or updates it; returns (flow, created). ``owner``
    (a user) owns a flow it creates; an update keeps the flow's owner, and the spec is
    held to that owner's connection and path rules, whoever applies it;
    given an ``owner``, those rules are checked before anything else in the spec.

    A running flow keeps the settings its run started with; the change applies from the
    next run.
    """
    # A secret kept as stored (sent back masked) that no key decrypts: said as such, not
    # as the option it fails to be.
    secrets_check(spec, what=f"flow {_flow_name_in(spec)!r}")
    if owner is not None:
        flow_connections_check(spec, owner=owner)  # a user hears of the connection rules first
        flow_format_file_check(spec, owner=owner)  # before the format reads a file
    values = flow_spec_validate(spec)  # then as the operator's: a bad spec is refused without a query
    existing = _flow_named_in(spec)
    rules_owner = existing.owner if existing is not None else owner
    flow_connections_check(spec, owner=rules_owner)
    if rules_owner is not None:
        flow_paths_check(
            source_config=values["source_config"],
            sink_config=values["sink_config"],
            owner=rules_owner,
            format_options=values["format_options"],
        )
    name = values.pop("name")
    with transaction.atomic():
        quota_check_flow_apply(owner=rules_owner, flow=existing, schedule=values["schedule"])
        flow, created = DataFlow.objects.select_for_update().get_or_create(
            name=name, defaults={**values, "owner": owner}
        )
        if not created:
            for field, value in values.items():
                setattr(flow, field, value)
            flow.schedule_paused_message = ""  # saved again: the schedule goes on (services.health)
            flow.save()
        schedule_sync(flow=flow)  # beat's entry follows [schedule], in the same transaction
    return flow, created


def flow_create(*, spec: dict[str, Any], owner=None) -> DataFlow:
    """Creates the flow ``spec`` (TOML shape) describes, owned by ``owner``. Refuses with
    FlowExistsError if its name is taken (also by a flow created meanwhile: that insert
    makes ``flow_apply`` update instead, and the update is rolled back), and with
    ConfigError naming the field if the spec is not valid."""
    name = (spec.get("flow") or {}).get("name")
    if isinstance(name, str) and DataFlow.objects.filter(name=name).exists():
        raise FlowExistsError(_name_taken(name, owner=owner))
    with transaction.atomic():
        flow, created = flow_apply(spec=spec, owner=owner)
        if not created:
            raise FlowExistsError(_name_taken(name, owner=owner))
    return flow


def _name_taken(name: Any, *, owner) -> str:
    """Why ``name`` cannot be a new flow's, saying only what ``owner`` may know: that a
    flow of theirs has it, or (another's, which they cannot see) that it is unavailable."""
    flow = DataFlow.objects.filter(name=name).only("owner_id").first()
    if (
        owner is None
        or owner.is_staff
        or owner.is_superuser
        or (flow is not None and flow.owner_id == owner.pk)
    ):
        return f"a flow named {name!r} exists already"
    return f"the name {name!r} is unavailable; choose another"


def flow_replace(*, flow: DataFlow, spec: dict[str, Any]) -> DataFlow:
    """Replaces the flow's whole spec (a section or key left out takes its default or is
    removed). A secret sent back exactly as the API showed it keeps the stored secret.
    The flow keeps its name and owner; a running run keeps the settings it started with."""
    with transaction.atomic():
        flow = DataFlow.objects.select_for_update().get(pk=flow.pk)  # gone meanwhile: 404
        stored = flow_spec_of(flow)
        new = {
            section: _unmasked(section, table, stored.get(section))
            for section, table in spec.items()
            if section != "flow" and table is not None
        }
        new["flow"] = {**(spec.get("flow") or {}), "name": flow.name}
        flow, _ = flow_apply(spec=new, owner=flow.owner)
    return flow


def flow_merge(*, flow: DataFlow, changes: dict[str, Any]) -> DataFlow:
    """Merges ``changes`` (TOML shape, partial) into the flow's spec: a given ``[flow]`` key
    replaces the stored one (None: back to its default); a given section's keys are
    merged into the stored section (a key set to None is removed), unless it names another
    ``type``, which replaces the section; an array of tables (``expect``) is replaced; a
    section set to None is removed. Secrets sent
    back masked keep the stored ones."""
    with transaction.atomic():
        flow = DataFlow.objects.select_for_update().get(pk=flow.pk)
        spec = flow_spec_of(flow)
        flow_keys = {**spec["flow"], **(changes.get("flow") or {}), "name": flow.name}
        spec["flow"] = {k: v for k, v in flow_keys.items() if v is not None}
        for section, table in changes.items():
            if section == "flow":
                continue
            if table is None:
                spec.pop(section, None)
                continue
            if isinstance(table, list):  # an array of tables ([[expect]]) is replaced whole
                spec[section] = table
                continue
            stored = spec.get(section) or {}
            merged = (
                dict(table)
                if "type" in table and table["type"] != stored.get("type")
                else {**stored, **table}
            )
            spec[section] = _unmasked(section, {k: v for k, v in merged.items() if v is not None}, stored)
        flow, _ = flow_apply(spec=spec, owner=flow.owner)
    return flow


def _unmasked(section: str, table: Any, stored: dict[str, Any] | None) -> Any:
    if not isinstance(table, dict) or not stored:
        return table
    if section == "notify":
        return notify_unmasked(table, stored)
    return unmask_section(section, table, stored)


def _flow_name_in(spec: Any) -> Any:
    flow_table = spec.get("flow") if isinstance(spec, dict) else None
    return flow_table.get("name") if isinstance(flow_table, dict) else None


def _flow_named_in(spec: Any) -> DataFlow | None:
    flow_table = spec.get("flow") if isinstance(spec, dict) else None
    name = flow_table.get("name") if isinstance(flow_table, dict) else None
    return (
        DataFlow.objects.select_related("owner").filter(name=name).first() if isinstance(name, str) else None
    )


def flow_start(*, flow: DataFlow, restore: Checkpoint | None = None, trigger: str = "manual") -> FlowRun:
    """Starts a run: validates the flow again, fixes its schema, and schedules its ticks;
    with ``restore``, the run goes on from that checkpoint's positions (see
    ``checkpoints.flow_restore``). ``trigger`` says on the run what started it ("manual",
    "schedule").

    Refuses with ConfigError (naming the field) if the flow's config is no longer valid,
    and with FlowStateError if a run is already active. A secret of the flow or of its
    connections that no key of ``DATAFLOW_SECRET_KEYS`` decrypts is ``SecretUndecryptable``
    (a ConfigError naming it and the setting), recorded on a failed run as well.
    """
    spec = flow_spec_of(flow)
    try:
        flow_secrets_check(flow)
        values = flow_spec_validate(spec, owner=flow.owner)  # its connections' secrets too
    except SecretUndecryptable as exc:
        # A deployment without the key: said on a run, as a source that cannot be read is.
        _run_failed_at_start(flow=flow, values=flow_values_of(flow), trigger=trigger, error=exc)
        raise
    try:
        schema_ddl = run_schema_resolve(values, owner=flow.owner)
    except ConfigError as exc:
        _run_failed_at_start(flow=flow, values=values, trigger=trigger, error=exc)
        raise
    discovering = False
    try:
        with transaction.atomic():
            flow = DataFlow.objects.select_for_update().get(pk=flow.pk)
            if flow.runs.filter(status__in=ACTIVE_RUN_STATUSES).exists():
                raise FlowStateError(f"flow {flow.name!r} is already running")
            quota_check_run_start(owner=flow.owner)
            run = FlowRun.objects.create(flow=flow, spec=values, schema_ddl=schema_ddl, trigger=trigger)
            if restore is not None:
                seed_run_from_checkpoint(run=run, checkpoint=restore)
                # The checkpoint's splits, against the connection as it is now: a refusal
                # leaves no run behind (the flow stays as it was, as for any refused start).
                run_splits_check(run=run)
            discovering = True
            run_prepare(run)
            flow.status = FlowStatus.RUNNING
            flow.save(update_fields=["status", "updated_at"])
            flow_ticks_set(flow=flow, enabled=True)
    except ConfigError as exc:
        if discovering:  # what discovery found as the run started (too many splits): said on a run
            _run_failed_at_start(flow=flow, values=values, trigger=trigger, error=exc)
        raise
    transaction.on_commit(coordinator_for(run).note_reader_alive)  # a reader is due from now on
    transaction.on_commit(lambda: request_tick(run_id=run.pk))
    transaction.on_commit(lambda: _queue_transform_check(run.pk))
    transaction.on_commit(lambda: run_lineage_emit(run=run, event_type="START"), robust=True)
    return run


def _run_failed_at_start(
    *, flow: DataFlow, values: dict[str, Any], trigger: str, error: ConfigError | QuotaExceeded
) -> FlowRun:
    """Records a run that could not start because of what the source holds (a schema that
    cannot be inferred from it, a header without a schema column): failed, with the
    reason, so the dashboard, ``flows`` and the API show it and the flow's webhook is told
    (also a scheduled run its owner's quota refused).
    FlowStateError instead if a run is active (starting again changed nothing)."""
    with transaction.atomic():
        flow = DataFlow.objects.select_for_update().get(pk=flow.pk)
        if flow.runs.filter(status__in=ACTIVE_RUN_STATUSES).exists():
            raise FlowStateError(f"flow {flow.name!r} is already running")
        run = FlowRun.objects.create(
            flow=flow,
            spec=values,
            trigger=trigger,
            status=RunStatus.FAILED,
            message=f"the run could not start: {error}",
            finished_at=timezone.now(),
        )
        flow.status = FlowStatus.FAILED
        flow.save(update_fields=["status", "updated_at"])
        run_notify(run=run, status=RunStatus.FAILED)
        transaction.on_commit(lambda: run_lineage_emit(run=run, event_type="START"), robust=True)
        transaction.on_commit(lambda: run_lineage_emit(run=run, event_type="FAIL"), robust=True)
    log.info("run %s of %s: failed at start: %s", run.pk, flow.name, error)
    return run


def flow_input_check(*, values: dict[str, Any], owner=None) -> str:
    """What a run of the validated spec ``values`` would start with, checked against the
    input as it is now: the schema's DDL (inferred from the first file or entries when
    the spec gives none; empty when there is nothing to read yet), reached with the
    connections of ``owner``. ConfigError naming the field when the input does not fit (an
    inference that fails, a header without a column)."""
    return run_schema_resolve(values, owner=owner)


def _queue_transform_check(run_id: int) -> None:
    run_task_send(TRANSFORM_CHECK, run_id)


def flow_stop(*, flow: DataFlow, message: str = "stopped by request") -> FlowRun | None:
    """Stops the active run, if any (paused or not); landed data and checkpoints are kept."""
    run = flow.runs.filter(status__in=ACTIVE_RUN_STATUSES).first()
    if run is None:
        return None
    run_finish(run=run, status=RunStatus.STOPPED, message=message)
    return run


def flow_stop_active(*, flow: DataFlow) -> FlowRun:
    """Stops the flow's active run (``flow_stop``); refuses with FlowStateError if it has none."""
    run = flow_stop(flow=flow)
    if run is None:
        raise FlowStateError(f"flow {flow.name!r} has no active run to stop")
    return run


def flow_pause(*, flow: DataFlow) -> FlowRun:
    """Holds the readers of the active run: they keep their splits and leases and read
    nothing until ``flow_resume``; what they read is committed first. The run stays active;
    a stream's transform holds too: its running epoch's Spark job is cancelled (by the
    epoch's ``TransformWatch``) and runs again once resumed. Refuses with FlowStateError if no run
    is active or it is paused already."""
    with transaction.atomic():
        flow = DataFlow.objects.select_for_update().get(pk=flow.pk)
        run = flow.runs.select_for_update().filter(status__in=ACTIVE_RUN_STATUSES).first()
        if run is None:
            raise FlowStateError(f"flow {flow.name!r} has no active run to pause")
        if run.paused_at is not None:
            raise FlowStateError(f"flow {flow.name!r} is paused already")
        if run.status != RunStatus.READING:
            raise FlowStateError(f"run {run.pk} of {flow.name!r} has read its input: nothing to pause")
        run.paused_at = timezone.now()
        run.save(update_fields=["paused_at"])
        flow.status = FlowStatus.PAUSED
        flow.save(update_fields=["status", "updated_at"])
        coordinator = coordinator_for(run)
        transaction.on_commit(lambda: coordinator.user_hold_set(True))
    return run


def flow_resume(*, flow: DataFlow) -> FlowRun:
    """Lets a paused run's readers go on; or resumes the flow's latest run if it was
    stopped: its splits go on from their checkpoints and what it landed is kept. Refuses
    with FlowStateError if the active run is not paused, or if no run is active and the
    latest was not stopped; with QuotaExceeded (said on the run too) if the owner's quotas
    do not allow the stopped run to become active again."""
    with _refusal_said(flow, "not resumed"), transaction.atomic():
        flow = DataFlow.objects.select_for_update().get(pk=flow.pk)
        active = flow.runs.select_for_update().filter(status__in=ACTIVE_RUN_STATUSES).first()
        if active is not None and active.paused_at is not None:
            run_splits_check(run=active)
            active.paused_at = None
            active.save(update_fields=["paused_at"])
            flow.status = FlowStatus.RUNNING
            flow.save(update_fields=["status", "updated_at"])
            coordinator = coordinator_for(active)
            transaction.on_commit(lambda: coordinator.user_hold_set(False))
            return active
        if active is not None:
            raise FlowStateError(f"flow {flow.name!r} is running, not paused")
        run = flow.runs.order_by("-id").first()
        if run is None or run.status != RunStatus.STOPPED:
            latest = f"its latest run {run.pk} {run.status}" if run else "it has no run"
            raise FlowStateError(f"flow {flow.name!r} has no stopped run to resume ({latest})")
        if run.spec.get("replay"):  # it reads no source: resumed, it would read the whole of it
            raise FlowStateError(f"run {run.pk} of {flow.name!r} replayed dead letters: replay them again")
        run_splits_check(run=run)
        quota_check_run_start(owner=flow.owner, run=run)
        run.status, run.finished_at, run.paused_at = RunStatus.READING, None, None
        run.message = "resumed from its checkpoints"
        run.save(update_fields=["status", "finished_at", "paused_at", "message"])
        run_lineage_again(run=run)  # its ABORT ended the last OpenLineage run
        flow.status = FlowStatus.RUNNING
        flow.save(update_fields=["status", "updated_at"])
        flow_ticks_set(flow=flow, enabled=True)
        coordinator = coordinator_for(run)
        # The stop mark and every lease of the stopped run go: readers start afresh and
        # take the splits back from their checkpoints.
        transaction.on_commit(coordinator.purge)
        transaction.on_commit(coordinator.note_reader_alive)  # a reader is due from now on
    transaction.on_commit(lambda: request_tick(run_id=run.pk))
    return run


def flow_restart(*, flow: DataFlow, only_failed: bool = False) -> FlowRun:
    """Restarts the flow. By default the active run, if any, is stopped and a new run
    starts (``flow_start``). With ``only_failed``, the latest run's failed splits are read
    again from their checkpoints within that run, which becomes active again; its other
    splits and what it landed are kept. Refuses with FlowStateError if there is no failed
    split to restart."""
    if not only_failed:
        flow_stop(flow=flow, message="stopped to restart")
        return flow_start(flow=flow)
    with _refusal_said(flow, "failed splits not restarted"), transaction.atomic():
        flow = DataFlow.objects.select_for_update().get(pk=flow.pk)
        run = flow.runs.select_for_update().order_by("-id").first()
        failed = Split.objects.filter(run=run, status=SplitStatus.FAILED) if run else Split.objects.none()
        if run is None or not failed.exists():
            raise FlowStateError(f"flow {flow.name!r} has no failed split to restart")
        if run.status == RunStatus.TRANSFORMING:
            raise FlowStateError(f"run {run.pk} of {flow.name!r} is transforming: its splits are done")
        quota_check_run_start(owner=flow.owner, run=run)
        restarted = _splits_retried(run, list(failed))
        run_splits_check(run=run)
        was_active = run.status == RunStatus.READING
        run.status, run.finished_at = RunStatus.READING, None
        run.message = f"restarted {restarted} failed split(s)"
        run.save(update_fields=["status", "finished_at", "message"])
        flow.status = FlowStatus.PAUSED if run.paused_at else FlowStatus.RUNNING
        flow.save(update_fields=["status", "updated_at"])
        flow_ticks_set(flow=flow, enabled=True)
        if not was_active:
            run_lineage_again(run=run)  # its FAIL ended the last OpenLineage run
            coordinator = coordinator_for(run)
            transaction.on_commit(coordinator.purge)
            transaction.on_commit(coordinator.note_reader_alive)  # a reader is due from now on
    transaction.on_commit(lambda: request_tick(run_id=run.pk))
    return run


@contextmanager
def _refusal_said(flow: DataFlow, what: str) -> Iterator[None]:
    """A quota refusal of the block (which it rolls back) is also said on the flow's latest
    run, where its owner looks: ``<what>: <the refusal>``."""
    try:
        yield
    except QuotaExceeded as exc:
        latest = flow.runs.order_by("-id").values_list("pk", flat=True).first()
        if latest is not None:
            FlowRun.objects.filter(pk=latest).update(message=f"{what}: {exc}"[:4000])
        raise


def _splits_retried(run: FlowRun, failed: list[Split]) -> int:
    """Leaves each failed split ASSIGNED to a reader that is gone (the next tick takes it
    back from its checkpoint and hands it out again, as after a crash), as its source reads
    it again (``Source.split_to_retry``: a file the user fixed is no longer the one
    discovered); FlowStateError if one cannot be read again safely."""
    source = source_for(run)
    serializer = source.split_serializer
    for split in failed:
        try:
            again = source.split_to_retry(serializer.deserialize(split.payload).at(split.position))
        except ValueError as exc:
            raise FlowStateError(
                f"split {split.split_id} cannot be read again: {exc}; start the flow again"
            ) from None
        split.payload = serializer.serialize(again)
        split.status, split.owner_token, split.error = SplitStatus.ASSIGNED, "", ""
    Split.objects.bulk_update(failed, ["payload", "status", "owner_token", "error"])
    return len(failed)


def flow_rescale(*, flow: DataFlow, parallelism: int) -> FlowRun | None:
    """Changes how many readers the flow runs, also for its active run: readers beyond the
    new count leave and their splits go to the others; new readers take a share of the
    splits (an unbounded source's enumerator moves as few as it can). Returns the active
    run, if any. Refuses a count out of range with ConfigError naming flow.parallelism."""
    low, high = PARALLELISM_BOUNDS
    if isinstance(parallelism, bool) or not isinstance(parallelism, int) or not low <= parallelism <= high:
        raise ConfigError("flow.parallelism", f"must be between {low} and {high}")
    with transaction.atomic():
        flow = DataFlow.objects.select_for_update().get(pk=flow.pk)
        flow.parallelism = parallelism
        flow.save(update_fields=["parallelism", "updated_at"])
        run = flow.runs.select_for_update().filter(status__in=ACTIVE_RUN_STATUSES).first()
        if run is not None:
            run.spec = {**run.spec, "parallelism": parallelism}
            run.save(update_fields=["spec"])
    if run is not None:
        transaction.on_commit(lambda: request_tick(run_id=run.pk))
    return run


def flow_delete(*, flow: DataFlow, delete_output: bool = False) -> None:
    """Deletes the flow with its runs, splits and dead letters: its active run is stopped
    first (readers leave, its Redis keys are purged), its periodic tick and its schedule are
    removed so beat sends nothing more, and the landed files of its runs are removed.

    Its sink directory is removed too with ``delete_output``; else it is kept, and stays its
    owner's (a ``SinkPathClaim``): no other user's flow may read or write it, as while the
    flow existed. ``delete_output`` on a sink that is no directory of this server's file
    system is refused (ConfigError naming ``delete_output``) before anything is deleted."""
    sink_dir = _sink_directory(flow)
    if delete_output and sink_dir is None:
        raise ConfigError(
            "delete_output",
            f"the {flow.sink_type} sink of flow {flow.name!r} is not a directory of this server; "
            "only such an output can be deleted with its flow",
        )
    if delete_output:  # refused before anything is deleted if it left the allowed roots
        environment().check_destructive_target(Path(flow.sink_config["path"]))
    flow_stop(flow=flow)
    runs = list(flow.runs.all())
    _source_release(flow, runs)
    with transaction.atomic():
        flow_ticks_remove(flow=flow)
        schedule_remove(flow=flow)
        if sink_dir is not None and sink_dir.exists() and not delete_output:
            sink_path_claim(owner=flow.owner, path=sink_dir, flow_name=flow.name)
        flow.delete()
    for run in runs:
        try:
            run_landing_dir_remove(run=run)
        except UnsafeLandingDir as exc:
            log.warning("flow %s deleted; the landed files of run %s were kept: %s", flow.name, run.pk, exc)
    if delete_output and sink_dir is not None:
        _output_remove(flow, sink_dir)


def _source_release(flow: DataFlow, runs: list[FlowRun]) -> None:
    """Drops what the source made upstream for the flow (``Source.release``: a cdc slot),
    built as its latest run was; a failure is logged, the flow is deleted all the same."""
    latest = max(runs, key=lambda run: run.pk, default=None)
    if latest is None:
        return
    try:
        source_for(latest).release([run.enumerator_state for run in runs])
    except Exception as exc:  # noqa: BLE001 - a database away must not keep the flow
        log.warning("flow %s deleted; its source could not release what it holds: %s", flow.name, exc)


def _sink_directory(flow: DataFlow) -> Path | None:
    """The flow's sink directory after symlinks, if its sink writes one on this server."""
    path = (flow.sink_config or {}).get("path")
    if not isinstance(path, str) or not os.path.isabs(path):
        return None  # no file-system path (a table, a stream, s3://)
    return Path(os.path.realpath(path))


def _output_remove(flow: DataFlow, sink_dir: Path) -> None:
    """Removes the deleted flow's sink directory and what its attempts left beside it, if
    it is still under an allowed root (``check_destructive_target``)."""
    configured = Path(flow.sink_config["path"])
    environment().check_destructive_target(configured)
    shutil.rmtree(sink_dir, ignore_errors=True)
    for debris in sink_dir.parent.glob(f".{glob.escape(sink_dir.name)}.*"):
        shutil.rmtree(debris, ignore_errors=True)
    log.info("flow %s deleted with its output %s", flow.name, sink_dir)


def flow_restore(*, flow: DataFlow, checkpoint_id: int | None = None) -> FlowRun:
    """Starts a new run of a stopped unbounded flow from a checkpoint (the newest if none is
    named): each split goes on from the position the checkpoint holds. What the sink got
    after that checkpoint is read again, as the user asked (Flink's restore from a
    savepoint). Refused with FlowStateError while a run is active."""
    checkpoints = Checkpoint.objects.filter(run__flow=flow).order_by("-id")
    checkpoint = checkpoints.filter(pk=checkpoint_id).first() if checkpoint_id else checkpoints.first()
    if checkpoint is None:
        which = f"checkpoint {checkpoint_id}" if checkpoint_id else "checkpoint"
        raise FlowStateError(f"flow {flow.name!r} has no {which} to restore")
    return flow_start(flow=flow, restore=checkpoint)


def flow_run_scheduled(*, flow_id: int) -> FlowRun | None:
    """Starts a run of the flow because its schedule says so (trigger "schedule").

    Starts nothing, and logs why, while a run of the flow is active, paused included
    ("skipped: still running": runs never overlap and missed times are not queued), when
    the flow's config is no longer valid, or when the flow has no schedule any more. The
    entry of a flow that no longer exists removes itself from beat's schedule.
    """
    flow = DataFlow.objects.filter(pk=flow_id).first()
    if flow is None:
        schedule_remove_orphan(flow_id=flow_id)
        schedule_log.warning(
            "scheduled run of flow id %s: the flow no longer exists; its schedule was removed", flow_id
        )
        return None
    if not flow.schedule:
        schedule_remove(flow=flow)
        return None
    try:
        run = flow_start(flow=flow, trigger="schedule")
    except QuotaExceeded as exc:  # said where the owner looks: a failed run of the schedule
        schedule_log.warning("flow %s: scheduled run refused: %s", flow.name, exc)
        values = flow_spec_validate(flow_spec_of(flow), owner=flow.owner)  # it was valid just now
        return _run_failed_at_start(flow=flow, values=values, trigger="schedule", error=exc)
    except FlowStateError as exc:
        schedule_log.info("flow %s: scheduled run skipped: still running (%s)", flow.name, exc)
        return None
    except ConfigError as exc:
        schedule_log.warning("flow %s: scheduled run not started: %s", flow.name, exc)
        return None
    schedule_log.info("flow %s: scheduled run %s started", flow.name, run.pk)
    return run
