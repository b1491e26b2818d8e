"""The streaming transform of an unbounded run: its Spark SQL over what lands, in epochs.

An epoch (a ``TransformEpoch`` of the run) starts once a reader commits and the previous
epoch is done, or ``[transform] trigger_ms`` after the previous one started at the latest.
Each runs in steps:

plan    one transaction holding the run's row, and only once the previous epoch has
        committed: the epoch takes the committed batches that no epoch has taken and, for
        a window query, fixes the event-time range of the windows it emits. If the last
        epoch is still PLANNED (its driver died), that epoch runs again instead, with what
        it took and the range it fixed (``epochs.EpochPlanner``).
run     Spark runs the query over the epoch's files, on a session of the run's own, and
        writes the result to a staging directory beside the sink (a small epoch's result
        collected as Arrow and written by the sink itself, where it writes it alike). The identity
        (``SELECT * FROM source``) into a sink that takes landed files as they are
        (``runs.landed.stream_copy_applies``) stages the epoch's landed files instead,
        without Spark: an epoch costs a few links, not a Spark job.
commit  one transaction holding the run's row, only while the run is active and the epoch
        PLANNED: the staged files move into the sink under names fixed by (run, epoch),
        the epoch is marked COMMITTED, and the landed batches no later epoch needs go.

A retry of epoch N reads the same input (nothing is removed before N commits) and replaces
the same file names, so the sink, as a plain reader (pyarrow, pandas) lists it, holds every
row once whatever process is killed when. Our own epochs rather than Structured Streaming:
what a retry rewrites, and when the input ends (a ``[stop]`` rule), are ours to decide.

A query's kind (``streams.query``) says what an epoch runs over: a stateless query
its new batches; a tumbling window query the rows of the windows that the watermark closed
(Flink's per-split watermarks, idle splits left out); a query that needs the whole input
one final epoch over everything, once the input ended.

Each Celery task runs one time slice (``DATAFLOW_STREAM_SLICE_SECONDS``) and queues the
next, so no task outlives the broker's visibility timeout and a worker can stop between
slices; the run's transform lease keeps a second driver out, and the database fences
whatever a stale one might still try.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from contextlib import ExitStack
from enum import Enum
from typing import Literal

import pyarrow as pa
import pyarrow.parquet as pq
import redis
from django.conf import settings
from django.db import transaction
from django.db.models import Min, Sum
from django.utils import timezone

from dataflow.models import (
    ACTIVE_RUN_STATUSES,
    EpochStatus,
    FlowRun,
    LandedBatch,
    RunStatus,
    TransformEpoch,
)
from dataflow.services.context import coordinator_for, landing_zone, run_environment, run_key, source_for
from dataflow.services.expectations import ExpectationVerdict, expectations_apply, expectations_record
from dataflow.services.runs.finish import run_finish
from dataflow.services.runs.landed import stream_copy_applies
from dataflow.services.schema_changes import run_landed_ddl, schema_changes_notify
from dataflow.services.specs import transform_limits
from dataflow.services.streams.arrow_query import ArrowPlan, arrow_plan
from dataflow.services.streams.epochs import (
    IDLE_SPLIT_MIN_MS,
    EpochPlanner,
    StreamState,
    classify_query,
    epoch_key,
)
from dataflow.services.streams.query import (
    QueryKind,
    plan_contradiction,
    schema_field,
    time_column_problem,
)
from dataflow.services.streams.tick import QUEUED_TTL_MS
from dataflow.services.transform_watch import (
    CancelReason,
    SinkRowsMismatch,
    TransformCancelled,
    TransformWatch,
    check_output_rows,
    transform_is_deterministic,
    transforms_running_here,
    worker_leaving,
)
from dataflow.spark.errors import driver_lost_message, is_out_of_memory, spark_error_message
from dataflow.spark.jobs import observe_rows, quiet_query_errors, writes_alike_with_arrow
from dataflow.spark.session import application_id, session_recover, spark_job
from dataflow.transform_policy import FIELD, SOURCE_VIEW
from source_support.api import Source
from source_support.coordination import Mark, RedisRunCoordinator
from source_support.durations import parse_duration_ms
from source_support.errors import ConfigError
from source_support.registry import SINKS
from source_support.schema import parse_ddl

log = logging.getLogger(__name__)

MAX_BACKOFF_S = 60
RETRY_NOTE = "transform retrying: "
#: Spark lists more paths than this with a job of its own; an epoch lists its few files
#: on the driver.
LISTING_THRESHOLD = "100000"
#: The longest single wait for a reader's commit between two epochs.
COMMIT_WAIT_STEP_S = 1.0
#: The longest wait for the other readers' commits once one came (``_gather_commits``).
MAX_GATHER_S = 0.2
#: A stateless epoch of at most this many records is collected from Spark as Arrow and
#: written by the sink without Spark's file writer (``SinkConnector.append_table``): that
#: writer's commit protocol (task and job commits, renames) costs more than the job of a
#: small epoch, and every epoch's cost is latency.
ARROW_EPOCH_MAX_RECORDS = 50_000


def stream_transform(*, run_id: int) -> bool:
    """One time slice of the streaming transform of an unbounded run: epochs as readers
    commit (``trigger_ms`` apart at most) for ``DATAFLOW_STREAM_SLICE_SECONDS``, while this
    process holds the run's transform lease. Once the input ended (the run is TRANSFORMING)
    the last epoch runs and the run ends. Returns True when the caller should queue the
    next slice (the run goes on and no other slice is queued); False when the run is over
    or another process drives it."""
    run = FlowRun.objects.select_related("flow").filter(pk=run_id).first()
    if run is None or run.status not in ACTIVE_RUN_STATUSES:
        return False
    coordinator = coordinator_for(run)
    coordinator.clear_mark(Mark.TRANSFORM_QUEUED)
    lease_ms = int(settings.DATAFLOW_TRANSFORM_LEASE_SECONDS * 1000)
    with coordinator.held_lease(Mark.TRANSFORM_LEASE, lease_ms) as held:
        if not held:
            return False
        deadline = time.monotonic() + settings.DATAFLOW_STREAM_SLICE_SECONDS
        more = StreamDriver(run).run_slice(deadline=deadline, lease_lost=held.lost)
        if held.lost.is_set():
            return False  # another driver took over (a resume purged the lease): it goes on
        # Marked before the lease goes, so a tick in between does not queue a second slice.
        return more and coordinator.mark_once(Mark.TRANSFORM_QUEUED, QUEUED_TTL_MS)


class Step(Enum):
    IDLE = "idle"  # nothing to do at this trigger
    DONE = "done"  # an epoch ran
    BACKLOG = "backlog"  # an epoch ran and more waits: the next one starts at once
    ENDED = "ended"  # the run is over, or waits for the end of its input


class StreamDriver:
    """Runs the epochs of one unbounded run for one time slice, each as soon as a reader
    has committed and the previous one is done (``run_slice``)."""

    def __init__(self, run: FlowRun) -> None:
        self.run = run
        self.trigger_ms = (run.spec.get("transform_options") or {}).get("trigger_ms", 1000)
        self.planner: EpochPlanner | None = None
        #: Whether epochs publish their landed files without Spark (set by ``_prepare``).
        self.copies_landed = False
        #: The query as pyarrow computes it, where it computes it as Spark would (``arrow_query``).
        self.arrow: ArrowPlan | None = None
        self.plan_checked = False
        self._spark = None
        self._spark_context = ExitStack()
        #: The run's source, for entry times; False once it could not be built.
        self._source: Source | Literal[False] | None = None
        self.lease_lost: threading.Event | None = None

    def run_slice(self, *, deadline: float, lease_lost: threading.Event | None = None) -> bool:
        """Triggers epochs until ``deadline`` (time.monotonic()), or until ``lease_lost`` is
        set (another driver took the run over); True if the run goes on.

        An epoch starts as soon as the previous one is done and a reader has committed
        since it was planned (at once while a backlog waits), and ``trigger_ms`` after the
        previous one started at the latest: the trigger is the longest wait, not the
        cadence, so what lands reaches the sink within about two epochs' time at any rate
        (Spark's default trigger: the next micro-batch once the last is done)."""
        self.lease_lost = lease_lost
        coordinator = coordinator_for(self.run)
        try:
            while lease_lost is None or not lease_lost.is_set():
                if worker_leaving():
                    return True  # the next slice goes to another worker, the lease freed at once
                started = time.monotonic()
                # A commit before this look is in the epoch planned next; one after it
                # ends the wait below.
                _redis_blip_harmless(lambda _: coordinator.take_committed(), 0.0)
                step = self.trigger()
                if step == Step.ENDED:
                    return False
                if step != Step.BACKLOG:
                    # Readers land what they hold once asked: the next epoch takes it.
                    _redis_blip_harmless(lambda _: coordinator.want_input() or False, 0.0)
                    until = min(started + self.trigger_ms / 1000, deadline)
                    if self._await_commit(coordinator, until=until):
                        self._gather_commits(
                            coordinator, until=min(time.monotonic() + self._gather_s(), until)
                        )
                if time.monotonic() >= deadline:
                    return True
            return True
        finally:
            self._drop_spark()

    def _await_commit(self, coordinator: RedisRunCoordinator, *, until: float) -> bool:
        """Waits until a reader commits (True), or until ``until`` (time.monotonic()); in
        waits of at most ``COMMIT_WAIT_STEP_S``, so a lost lease or a leaving worker is
        seen soon."""
        while (left := until - time.monotonic()) > 0:
            step = min(left, COMMIT_WAIT_STEP_S)
            if _redis_blip_harmless(coordinator.wait_committed, step):
                return True
            if (self.lease_lost is not None and self.lease_lost.is_set()) or worker_leaving():
                return False
        return False

    def _gather_s(self) -> float:
        """How long the other readers' answers to ``want_input`` are waited for once the
        first came: a reader sees the request at its next step, a poll interval at most."""
        return min(self.run.spec.get("poll_interval_ms", 500) / 1000, MAX_GATHER_S)

    def _gather_commits(self, coordinator: RedisRunCoordinator, *, until: float) -> None:
        """Takes the commits that come until ``until``: each reader lands what it held
        when asked, and the epoch planned next takes all of it rather than the first
        reader's alone (the others' would wait a whole epoch more)."""
        while until - time.monotonic() > 0:
            _redis_blip_harmless(coordinator.wait_committed, until - time.monotonic())

    def trigger(self) -> Step:
        """One trigger: the run's next epoch planned, run and committed, if there is one."""
        run = FlowRun.objects.select_related("flow").filter(pk=self.run.pk).first()
        if run is None or run.status not in ACTIVE_RUN_STATUSES:
            return Step.ENDED
        self.run = run
        if run.paused_at is not None:
            return Step.IDLE  # a user's pause holds the transform too; its epoch reruns on resume
        epoch: TransformEpoch | None = None  # None until planned: a refusal comes before that
        try:
            planner = self._prepare()
            if self._in_backoff():
                return Step.IDLE
            epoch = self.plan()
            if epoch is None:
                if run.status == RunStatus.TRANSFORMING:
                    self._finish()
                    return Step.ENDED
                return Step.IDLE
            with transforms_running_here():
                committed = self.run_epoch(epoch)
        except TransformCancelled as exc:
            return self._cancelled(exc)
        except Exception as exc:  # noqa: BLE001 - every failure is reported on the run
            if worker_leaving():
                # Its worker shuts down and cancelled the epoch's job: not a failure; the
                # epoch stays planned and the next driver runs it again from its inputs.
                self._drop_spark()
                log.warning("run %s: epoch given back: its worker is shutting down", run.pk)
                return Step.DONE
            if epoch is not None and _committed_by_another_driver(epoch):
                # A second driver (e.g. after a quick stop and resume) committed this epoch
                # and removed its input while this one ran it: not a failure; it goes on.
                log.info("run %s: epoch %s was committed by another driver", self.run.pk, epoch.number)
                return Step.ENDED
            return self._failed(exc)
        if committed and epoch.final:
            return Step.ENDED
        return Step.BACKLOG if planner.backlog else Step.DONE

    def _prepare(self) -> EpochPlanner:
        """The run's planner, made on first use; ConfigError if the run cannot stream."""
        if self.planner is not None:
            return self.planner
        spec = self.run.spec
        query = classify_query(spec["transform_sql"])
        sink = SINKS.get(spec["sink_type"])
        if sink is None or sink.append is None:
            raise ConfigError("sink.type", f"a {spec['sink_type']!r} sink cannot take the rows of a stream")
        time_column = ""
        if query.kind == QueryKind.WINDOW:
            if not self.run.schema_ddl:
                raise ConfigError(FIELD, "a window over a stream needs the run's schema (format.schema)")
            schema = parse_ddl(self.run.schema_ddl)
            problem = time_column_problem(schema, query.time_column)
            if problem:
                raise ConfigError(FIELD, problem)
            field = schema_field(schema, query.time_column)
            assert field is not None  # time_column_problem found it
            time_column = field.name
        options = spec.get("transform_options") or {}
        self.planner = EpochPlanner(
            query,
            time_column=time_column,
            delay_ms=parse_duration_ms(options.get("watermark_delay", "0 seconds")),
            idle_ms=max(10 * self.trigger_ms, IDLE_SPLIT_MIN_MS),
        )
        self.copies_landed = (
            query.kind == QueryKind.STATELESS and bool(self.run.schema_ddl) and stream_copy_applies(spec)
        )
        self.arrow = None
        if (
            query.kind == QueryKind.STATELESS
            and self.run.schema_ddl
            and not self.copies_landed
            and not spec.get("replay")
            and not spec.get("expectations")  # Spark checks them
            and sink.append_table is not None
            and sink.takes_landed(spec["sink_config"])
        ):
            self.arrow = arrow_plan(spec["transform_sql"], parse_ddl(run_landed_ddl(self.run)))
        return self.planner

    # PLAN, RUN

    def plan(self) -> TransformEpoch | None:
        """The epoch to run now: the last one if it never committed, else a new one if there
        is something to do (``EpochPlanner.next_epoch``); ConfigError if the run cannot stream."""
        return self._prepare().next_epoch(self.run)

    def run_epoch(self, epoch: TransformEpoch) -> bool:
        """Runs ``epoch`` with Spark and commits it; False if it was not this driver's to
        commit (the run ended, or another driver committed it)."""
        planner = self._prepare()
        paths = planner.inputs(self.run, epoch)
        if not paths and planner.query.kind != QueryKind.WHOLE_INPUT:
            return self._commit(epoch, rows=0, move=None)
        if self.copies_landed:
            return self._append_landed(epoch, paths)
        if self.arrow is not None and epoch.records_in <= ARROW_EPOCH_MAX_RECORDS:
            # A projection and filter pyarrow computes as Spark would: no Spark job.
            return self._append_table(epoch, self.arrow.read(paths))
        try:
            return self._run_watched(epoch, paths)
        except TransformCancelled as exc:
            if exc.reason in (CancelReason.TIMEOUT, CancelReason.PAUSED, CancelReason.WORKER_LEAVING):
                raise
            log.info("run %s: epoch %s cancelled: %s", self.run.pk, epoch.number, exc.reason.value)
            return False  # the run ended, or another driver has it

    def _run_watched(self, epoch: TransformEpoch, paths: list[str]) -> bool:
        """``run_epoch``'s Spark job, in a job group of the epoch's own, watched."""
        spark = self._session()
        spec = self.run.spec
        watch = TransformWatch(run_id=self.run.pk, limits=transform_limits(spec), lease_lost=self.lease_lost)
        name = f"adf-{run_key(self.run)}-epoch-{epoch.number}"
        with watch.watching(
            spark, name=name, description=f"run {self.run.pk} of {spec['name']}, epoch {epoch.number}"
        ):
            self._source_frame(spark, paths, epoch).createOrReplaceTempView(SOURCE_VIEW)
            result = spark.sql(spec["transform_sql"])
            self._check_plan(result)
            result, verdict = expectations_apply(result, spec.get("expectations") or [])
            if self._collects_as_arrow(epoch, result):
                return self._append_table(epoch, result.toArrow(), verdict=verdict)
            observed, job_rows = observe_rows(result, f"epoch_rows_{epoch.number}")

            def publish(staged_rows: int, move) -> bool:
                written = job_rows()
                if staged_rows != written:
                    raise SinkRowsMismatch(
                        f"epoch {epoch.number} staged {staged_rows} rows but the job wrote {written}; "
                        "nothing was published"
                    )
                check_output_rows(watch.limits, staged_rows, what=f"epoch {epoch.number}")
                return self._commit(epoch, rows=staged_rows, move=move, verdict=verdict)

            append = SINKS[spec["sink_type"]].append
            assert append is not None  # _prepare refused a sink without one
            return append(
                observed,
                spec["sink_config"],
                epoch_key=epoch_key(self.run, epoch.number),
                publish=publish,
                env=run_environment(self.run),
            )

    def _collects_as_arrow(self, epoch: TransformEpoch, result) -> bool:
        """Whether the epoch's result is small enough to collect, and the sink writes it
        as Spark's writer would (``SinkConnector.append_table``)."""
        spec = self.run.spec
        sink = SINKS[spec["sink_type"]]
        return (
            sink.append_table is not None
            and self._prepare().query.kind == QueryKind.STATELESS
            and epoch.records_in <= ARROW_EPOCH_MAX_RECORDS
            and sink.takes_landed(spec["sink_config"])
            and writes_alike_with_arrow(result.schema)
        )

    def _append_table(
        self, epoch: TransformEpoch, table: pa.Table, *, verdict: ExpectationVerdict | None = None
    ) -> bool:
        """``_run_watched`` for a small epoch: its rows, collected, added by the sink."""
        spec = self.run.spec

        def publish(staged_rows: int, move) -> bool:
            if staged_rows != table.num_rows:
                raise SinkRowsMismatch(
                    f"epoch {epoch.number} staged {staged_rows} rows but the job gave {table.num_rows}; "
                    "nothing was published"
                )
            check_output_rows(transform_limits(spec), staged_rows, what=f"epoch {epoch.number}")
            return self._commit(epoch, rows=staged_rows, move=move, verdict=verdict)

        append_table = SINKS[spec["sink_type"]].append_table
        assert append_table is not None  # _collects_as_arrow checked it
        return append_table(
            table,
            spec["sink_config"],
            epoch_key=epoch_key(self.run, epoch.number),
            publish=publish,
            env=run_environment(self.run),
        )

    def _append_landed(self, epoch: TransformEpoch, paths: list[str]) -> bool:
        """``run_epoch`` of the identity without Spark: the sink adds the epoch's landed
        files as they are (``SinkConnector.append_landed``), through the same commit as a
        Spark epoch, if what it staged holds exactly the landed rows."""
        spec = self.run.spec
        landed_rows = sum(pq.read_metadata(path).num_rows for path in paths)
        check_output_rows(transform_limits(spec), landed_rows, what=f"epoch {epoch.number}")

        def publish(staged_rows: int, move) -> bool:
            if staged_rows != landed_rows:
                raise SinkRowsMismatch(
                    f"epoch {epoch.number} staged {staged_rows} rows but {landed_rows} were landed; "
                    "nothing was published"
                )
            return self._commit(epoch, rows=staged_rows, move=move)

        append_landed = SINKS[spec["sink_type"]].append_landed
        assert append_landed is not None  # stream_copy_applies checked it
        return append_landed(
            paths,
            parse_ddl(run_landed_ddl(self.run)),
            spec["sink_config"],
            epoch_key=epoch_key(self.run, epoch.number),
            publish=publish,
            env=run_environment(self.run),
        )

    def _source_frame(self, spark, paths: list[str], epoch: TransformEpoch):
        ddl = run_landed_ddl(self.run)
        if not paths:
            return spark.createDataFrame([], ddl)
        frame = (spark.read.schema(ddl) if ddl else spark.read).parquet(*paths)
        planner = self._prepare()
        if planner.query.kind != QueryKind.WINDOW:
            return frame
        column = "`" + planner.time_column.replace("`", "``") + "`"
        bounds = [f"{column} IS NOT NULL"]
        if epoch.window_from_ms is not None:
            bounds.append(f"{column} >= timestamp_millis({int(epoch.window_from_ms)})")
        if epoch.window_to_ms is not None:
            bounds.append(f"{column} < timestamp_millis({int(epoch.window_to_ms)})")
        return frame.where(" AND ".join(bounds))

    def _check_plan(self, result) -> None:
        """Once a slice: Spark's plan must agree with the kind the query was given."""
        if self.plan_checked:
            return
        problem = plan_contradiction(result, self._prepare().query.kind)
        if problem:
            raise ConfigError(FIELD, problem)
        self.plan_checked = True

    def _session(self):
        """The slice's Spark session: its own temp views, on the process's warm JVM."""
        if self._spark is None:
            spark = self._spark_context.enter_context(spark_job())
            self._spark_context.enter_context(quiet_query_errors())
            spark.conf.set("spark.sql.sources.parallelPartitionDiscovery.threshold", LISTING_THRESHOLD)
            FlowRun.objects.filter(pk=self.run.pk).update(spark_app_id=application_id(spark)[:100])
            self._spark = spark
        return self._spark

    def _drop_spark(self) -> None:
        self._spark_context.close()
        self._spark_context = ExitStack()
        self._spark = None

    # COMMIT

    def _commit(
        self, epoch: TransformEpoch, *, rows: int, move, verdict: ExpectationVerdict | None = None
    ) -> bool:
        """Publishes the staged files (``move``) and marks the epoch COMMITTED in one
        transaction holding the run's row, only while the run is active and the epoch is
        PLANNED; then the landed batches no later epoch reads go. The final epoch ends the
        run in the same transaction; the expectations' ``verdict`` is kept in it too."""
        with transaction.atomic():
            run = (
                FlowRun.objects.select_for_update()
                .filter(pk=self.run.pk, status__in=ACTIVE_RUN_STATUSES)
                .first()
            )
            if (
                run is None
                or not TransformEpoch.objects.filter(pk=epoch.pk, status=EpochStatus.PLANNED).exists()
            ):
                log.warning("run %s: epoch %s is not this driver's to commit", self.run.pk, epoch.number)
                return False
            if move is not None:
                move()
            now = timezone.now()
            TransformEpoch.objects.filter(pk=epoch.pk).update(
                status=EpochStatus.COMMITTED,
                rows_written=rows,
                committed_at=now,
                latency_ms=self._latency_ms(epoch, now),
                output=f"{self.run.spec['sink_config'].get('path', '')}/part-{epoch_key(self.run, epoch.number)}*"[
                    :2048
                ],
            )
            schema_changes_notify(run=run)  # once per run, as soon as an epoch with changes lands
            expectations_record(run=run, verdict=verdict, epoch=epoch)
            retired = self._prepare().retire(run, epoch)
            state = StreamState.of(run)
            state.epoch, state.failures = epoch.number, 0
            state.rows_written = TransformEpoch.objects.filter(
                run=run, status=EpochStatus.COMMITTED
            ).aggregate(n=Sum("rows_written", default=0))["n"]
            message = "" if run.message.startswith(RETRY_NOTE) else run.message
            FlowRun.objects.filter(pk=run.pk).update(stream_state=state.as_json(), message=message)
            if epoch.final:
                self._end(state)
            transaction.on_commit(lambda: self._remove_landed(retired))
        log.debug("run %s: epoch %s committed, %s rows", self.run.pk, epoch.number, rows)
        return True

    def _latency_ms(self, epoch: TransformEpoch, now) -> int | None:
        """From the oldest input of the epoch (its entry time where the source tells it,
        else when it landed) to ``now``."""
        oldest = LandedBatch.objects.filter(split__run=self.run, epoch=epoch.number).aggregate(
            landed=Min("landed_at"), position=Min("end_position")
        )
        if oldest["landed"] is None:
            return None
        oldest_ms = oldest["landed"].timestamp() * 1000
        entry_ms = self._position_time_ms(oldest["position"])
        if entry_ms is not None:
            oldest_ms = min(oldest_ms, entry_ms)
        return max(0, int(now.timestamp() * 1000 - oldest_ms))

    def _position_time_ms(self, position: int) -> int | None:
        if self._source is None:
            try:
                self._source = source_for(self.run)
            except Exception as exc:  # noqa: BLE001 - latency is a measure, never a failure
                log.debug("run %s: no source for entry times: %s", self.run.pk, exc)
                self._source = False
        return self._source.position_time_ms(position) if self._source else None

    def _remove_landed(self, paths: list[str]) -> None:
        """Removes retired landed files, only below the run's landing directory."""
        zone = landing_zone()
        root = os.path.realpath(zone.run_dir(run_key(self.run)))
        for path in paths:
            real = os.path.realpath(path)
            if not real.startswith(root + os.sep):
                log.warning("run %s: %s is not below %s; not removed", self.run.pk, real, root)
                continue
            zone.remove(real)

    def _finish(self) -> None:
        """The input ended and every epoch committed: the run succeeds."""
        with transaction.atomic():
            run = (
                FlowRun.objects.select_for_update()
                .filter(pk=self.run.pk, status=RunStatus.TRANSFORMING)
                .first()
            )
            if run is None or TransformEpoch.objects.filter(run=run, status=EpochStatus.PLANNED).exists():
                return
            state = StreamState.of(run)
            state.rows_written = TransformEpoch.objects.filter(
                run=run, status=EpochStatus.COMMITTED
            ).aggregate(n=Sum("rows_written", default=0))["n"]
            self._end(state)

    def _end(self, state: StreamState) -> None:
        dropped = state.late_rows + state.untimed_rows
        note = ""
        if dropped:
            note = (
                f"{state.late_rows} rows came after their window was emitted and {state.untimed_rows} "
                "had no event time; they were dropped"
            )
        run_finish(run=self.run, status=RunStatus.SUCCEEDED, rows_written=state.rows_written, message=note)

    # Failures

    def _cancelled(self, exc: TransformCancelled) -> Step:
        """An epoch cancelled past its timeout fails the run; one cancelled because the run
        was paused runs again once it is resumed, and one whose worker leaves runs again in
        the next driver; otherwise the run is over or another driver has it."""
        self._drop_spark()
        if exc.reason == CancelReason.WORKER_LEAVING:
            # Not a failure: the epoch stays planned and the next driver runs it again.
            log.warning("run %s: epoch given back: its worker is shutting down", self.run.pk)
            return Step.DONE
        if exc.reason == CancelReason.TIMEOUT:
            run_finish(run=self.run, status=RunStatus.FAILED, message=str(exc))
            return Step.ENDED
        log.info("run %s: epoch cancelled: %s", self.run.pk, exc.reason.value)
        return Step.IDLE if exc.reason == CancelReason.PAUSED else Step.ENDED

    def _failed(self, exc: Exception) -> Step:
        """A deterministic error fails the run; any other is retried with backoff, at most
        ``DATAFLOW_STREAM_FAILURE_LIMIT`` times in a row. An epoch that ran the Spark driver
        out of memory (or killed it) fails the run: it would again."""
        self._drop_spark()  # a broken session is not reused
        message = spark_error_message(exc)
        out_of_memory = is_out_of_memory(exc)
        refused = isinstance(exc, ConfigError) or transform_is_deterministic(exc)
        broken = session_recover(out_of_memory=out_of_memory) if out_of_memory or not refused else ""
        if broken:
            run_finish(run=self.run, status=RunStatus.FAILED, message=driver_lost_message(message, broken))
            return Step.ENDED
        if isinstance(exc, ConfigError) or transform_is_deterministic(exc):
            run_finish(run=self.run, status=RunStatus.FAILED, message=f"transform failed: {message}")
            return Step.ENDED
        limit = settings.DATAFLOW_STREAM_FAILURE_LIMIT
        with transaction.atomic():
            run = (
                FlowRun.objects.select_for_update()
                .filter(pk=self.run.pk, status__in=ACTIVE_RUN_STATUSES)
                .first()
            )
            if run is None:
                return Step.ENDED
            state = StreamState.of(run)
            state.failures += 1
            state.failed_at = coordinator_for(run).now()  # one clock for every Spark worker: Redis's
            note = (
                f"{RETRY_NOTE}{state.failures} of {limit} tries failed, the next in "
                f"{_backoff_s(state.failures)} s: {message}"
            )
            FlowRun.objects.filter(pk=run.pk).update(stream_state=state.as_json(), message=note[:4000])
        log.warning(
            "run %s: streaming transform failed (%s of %s)", self.run.pk, state.failures, limit, exc_info=exc
        )
        if state.failures >= limit:
            run_finish(
                run=self.run,
                status=RunStatus.FAILED,
                message=f"transform failed {state.failures} times in a row (DATAFLOW_STREAM_FAILURE_LIMIT): {message}",
            )
            return Step.ENDED
        return Step.IDLE

    def _in_backoff(self) -> bool:
        state = StreamState.of(self.run)
        if not state.failures:
            return False
        return coordinator_for(self.run).now() - state.failed_at < _backoff_s(state.failures)


def _redis_blip_harmless(call: Callable[[float], bool], wait_s: float) -> bool:
    """``call(wait_s)``; if Redis is away for a moment, False after ``wait_s``: the
    trigger's timer still starts the next epoch, so an outage costs latency, not the slice."""
    try:
        return call(wait_s)
    except redis.RedisError as exc:
        log.debug("no commit notices from Redis: %s", exc)
        time.sleep(wait_s)
        return False


def _backoff_s(failures: int) -> int:
    return min(MAX_BACKOFF_S, 2**failures)


def _committed_by_another_driver(epoch: TransformEpoch) -> bool:
    return TransformEpoch.objects.filter(pk=epoch.pk, status=EpochStatus.COMMITTED).exists()
