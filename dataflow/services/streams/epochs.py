"""The plan of a stream's transform: what each epoch takes and emits.

An epoch is planned in one transaction holding the run's row, once the previous epoch has
committed: it takes the committed landed batches that no epoch has taken (a stateless
query), or fixes the event-time range of the windows the watermark closed (a tumbling
window query: Flink's per-split watermarks, idle splits left out), or, once the input has
ended, takes everything (a query that needs the whole input). A PLANNED epoch whose driver
died is planned again as it was. ``streaming.StreamDriver`` runs and commits the epochs.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field, fields
from functools import lru_cache

from django.db import transaction
from django.db.models import Q, Sum
from django.utils import timezone

from dataflow.models import (
    ACTIVE_RUN_STATUSES,
    EpochStatus,
    FlowRun,
    LandedBatch,
    RunStatus,
    Split,
    SplitStatus,
    TransformEpoch,
)
from dataflow.services.streams.event_time import (
    BatchTimes,
    SplitClock,
    batch_times,
    rows_before,
    watermark_ms,
    window_floor,
)
from dataflow.services.streams.query import QueryKind, StreamQuery, stream_query_classify

log = logging.getLogger(__name__)

#: A stateless epoch takes at most this many batches: a backlog (the transform was down)
#: is worked off in epochs of bounded size, one right after the other.
MAX_BATCHES_PER_EPOCH = 1000
#: A split that landed nothing for max(10 triggers, this) is idle: it does not hold the
#: watermark back.
IDLE_SPLIT_MIN_MS = 10_000
ENDED_SPLITS = (SplitStatus.FINISHED, SplitStatus.FAILED)


def epoch_key(run: FlowRun, number: int) -> str:
    """What names epoch ``number``'s files in the sink (``part-<key>.snappy.parquet``)."""
    return f"{run.uid.hex[:12]}-{number:08d}"


@lru_cache(maxsize=256)
def classify_query(sql: str) -> StreamQuery:
    return stream_query_classify(sql)


@dataclass
class StreamState:
    """``FlowRun.stream_state``: what the streaming transform keeps between epochs."""

    #: the last committed epoch, and the rows all committed epochs wrote
    epoch: int = 0
    rows_written: int = 0
    #: window queries: the watermark when batches were last taken, the earliest and latest
    #: event times taken, and per split that may still land rows (pk as text) the latest
    #: event time it landed
    watermark_ms: int | None = None
    earliest_event_ms: int | None = None
    latest_event_ms: int | None = None
    splits: dict[str, int] = field(default_factory=dict)
    #: rows dropped: their window had been emitted when they were taken, or they had no
    #: event time
    late_rows: int = 0
    untimed_rows: int = 0
    #: consecutive failed epochs, and when the last one failed (on Redis's clock: ``RedisRunCoordinator.now``)
    failures: int = 0
    failed_at: float = 0.0

    @classmethod
    def of(cls, run: FlowRun) -> StreamState:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in (run.stream_state or {}).items() if k in known})

    def as_json(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class WindowProgress:
    """What taking batches for a window query learned of the event time, for ``StreamState``."""

    watermark_ms: int | None
    earliest_event_ms: int | None
    latest_event_ms: int | None
    splits: dict[str, int]
    late_rows: int
    untimed_rows: int

    def apply(self, state: StreamState) -> None:
        state.watermark_ms = self.watermark_ms
        state.earliest_event_ms = self.earliest_event_ms
        state.latest_event_ms = self.latest_event_ms
        state.splits = self.splits
        state.late_rows += self.late_rows
        state.untimed_rows += self.untimed_rows


@dataclass(frozen=True)
class EpochPlan:
    """Batches to give epoch ``number`` (the next), and whether it starts now (False: the
    batches wait in it for its windows to close, or for the end of the input)."""

    batches: list[int]
    starts: bool = True
    window_from_ms: int | None = None
    window_to_ms: int | None = None
    final: bool = False
    #: window queries: batch id -> its latest event time (None: no row has one)
    event_times: dict[int, int | None] = field(default_factory=dict)
    progress: WindowProgress | None = None


class EpochPlanner:
    """Decides what the next epoch of a run takes (the PLAN step), which landed files it
    reads, and which of them no later epoch needs once it commits.

    A window query, and one that needs the whole input, take each trigger's new batches into
    the next epoch at once, before it starts (when windows close, or the input ends): what
    waits is then not "untransformed" for backpressure, and its event times are read once.
    """

    def __init__(self, query: StreamQuery, *, time_column: str, delay_ms: int, idle_ms: int) -> None:
        self.query = query
        self.time_column = time_column
        self.delay_ms = delay_ms
        self.idle_ms = idle_ms
        #: the last plan left batches for the next epoch
        self.backlog = False

    def next_epoch(self, run: FlowRun) -> TransformEpoch | None:
        """The epoch to run now: the last one if it never committed, else a new one if
        there is something to do."""
        last = TransformEpoch.objects.filter(run=run).order_by("-number").first()
        if last is not None and last.status == EpochStatus.PLANNED:
            return last
        if last is not None and last.final:
            return None
        plan = self._plan(run, last)
        return None if plan is None else self._claim(run, last, plan)

    def inputs(self, run: FlowRun, epoch: TransformEpoch) -> list[str]:
        """The landed files epoch ``epoch`` reads: the same ones on every try."""
        batches = LandedBatch.objects.filter(split__run=run)
        if self.query.kind == QueryKind.WINDOW:
            batches = batches.filter(epoch__lte=epoch.number, event_time_max_ms__isnull=False)
            if epoch.window_from_ms is not None:
                batches = batches.filter(event_time_max_ms__gte=epoch.window_from_ms)
        else:
            batches = batches.filter(epoch=epoch.number)
        return list(batches.order_by("split_id", "start_position").values_list("path", flat=True))

    def retire(self, run: FlowRun, epoch: TransformEpoch) -> list[str]:
        """Deletes the rows of the landed batches that no epoch after ``epoch`` reads and
        returns their files (to remove once the transaction commits): all those it took,
        or for a window query those with no row at or after the end of its range."""
        batches = LandedBatch.objects.filter(split__run=run)
        if self.query.kind != QueryKind.WINDOW:
            batches = batches.filter(epoch=epoch.number)
        elif epoch.final:
            batches = batches.filter(epoch__lte=epoch.number)
        else:
            batches = batches.filter(epoch__lte=epoch.number).filter(
                Q(event_time_max_ms__isnull=True) | Q(event_time_max_ms__lt=epoch.window_to_ms)
            )
        retired = list(batches.values_list("pk", "path"))
        LandedBatch.objects.filter(pk__in=[pk for pk, _ in retired]).delete()
        return [path for _, path in retired]

    def _plan(self, run: FlowRun, last: TransformEpoch | None) -> EpochPlan | None:
        ending = run.status == RunStatus.TRANSFORMING
        if self.query.kind == QueryKind.WINDOW:
            return self._window_plan(run, last, ending=ending)
        if self.query.kind == QueryKind.WHOLE_INPUT:
            return self._whole_input_plan(run, ending=ending)
        return self._stateless_plan(run)

    def _unclaimed(self, run: FlowRun):
        # Committed rows only (the readers' transactions commit them whole): planning by
        # what is visible leaves no gap, where an id range could skip a row in flight.
        return (
            LandedBatch.objects.filter(split__run=run, epoch__isnull=True)
            .order_by("id")
            .values_list("id", "split_id", "path", named=True)
        )

    def _stateless_plan(self, run: FlowRun) -> EpochPlan | None:
        batches = list(self._unclaimed(run)[:MAX_BATCHES_PER_EPOCH])
        self.backlog = len(batches) == MAX_BATCHES_PER_EPOCH
        return EpochPlan(batches=[b.id for b in batches]) if batches else None

    def _whole_input_plan(self, run: FlowRun, *, ending: bool) -> EpochPlan | None:
        batches = [b.id for b in self._unclaimed(run)]
        if ending:  # once, even over no input: a global count of nothing is a row with 0
            return EpochPlan(batches=batches, final=True)
        return EpochPlan(batches=batches, starts=False) if batches else None

    def _window_plan(self, run: FlowRun, last: TransformEpoch | None, *, ending: bool) -> EpochPlan | None:
        batches = list(self._unclaimed(run))
        times = {b.id: batch_times(b.path, self.time_column) for b in batches}
        start = last.window_to_ms if last is not None else None
        progress = self._progress(run, batches, times, start)
        end = (
            None
            if ending or progress.watermark_ms is None
            else window_floor(progress.watermark_ms, self.query.window_ms)
        )
        starts = ending or self._closes_a_window(start, end, progress.earliest_event_ms)
        if (
            starts
            and not batches
            and not LandedBatch.objects.filter(split__run=run, epoch__isnull=False).exists()
        ):
            return None  # no row to emit: the range waits for rows to move it
        if not (starts or batches):
            return None
        return EpochPlan(
            batches=[b.id for b in batches],
            starts=starts,
            window_from_ms=start,
            window_to_ms=end,
            final=ending,
            event_times={b.id: times[b.id].max_ms for b in batches},
            progress=progress,
        )

    def _progress(
        self, run: FlowRun, batches, times: dict[int, BatchTimes], start: int | None
    ) -> WindowProgress:
        """The event time once ``batches`` are taken: watermark, extremes, late rows."""
        state = StreamState.of(run)
        latest = self._latest_per_split(state, batches, times)
        lows = [t.min_ms for t in times.values() if t.min_ms is not None]
        earliest = min((t for t in (state.earliest_event_ms, *lows) if t is not None), default=None)
        overall = max((t for t in (state.latest_event_ms, *latest.values()) if t is not None), default=None)
        live = dict(
            Split.objects.filter(run=run).exclude(status__in=ENDED_SPLITS).values_list("pk", "updated_at")
        )
        return WindowProgress(
            watermark_ms=self._watermark(live, latest, overall),
            earliest_event_ms=earliest,
            latest_event_ms=overall,
            splits={pk: ms for pk, ms in latest.items() if int(pk) in live},
            late_rows=self._late_rows(run, batches, times, start),
            untimed_rows=sum(t.nulls for t in times.values()),
        )

    @staticmethod
    def _latest_per_split(state: StreamState, batches, times: dict[int, BatchTimes]) -> dict[str, int]:
        """Split pk (as text) -> the latest event time it landed."""
        latest = dict(state.splits)
        for b in batches:
            high = times[b.id].max_ms
            if high is not None:
                key = str(b.split_id)
                latest[key] = max(latest.get(key, high), high)
        return latest

    @staticmethod
    def _closes_a_window(start: int | None, end: int | None, earliest: int | None) -> bool:
        if end is None:
            return False
        if start is not None:
            return end > start
        return earliest is not None and earliest < end  # the first epoch: a row lies before its end

    def _watermark(self, live: dict, latest: dict[str, int], overall: int | None) -> int | None:
        now = timezone.now()
        clocks = [
            SplitClock(latest.get(str(pk)), idle=(now - updated_at).total_seconds() * 1000 >= self.idle_ms)
            for pk, updated_at in live.items()
        ]
        return watermark_ms(clocks, delay_ms=self.delay_ms, latest_ms=overall)

    def _late_rows(self, run: FlowRun, batches, times: dict[int, BatchTimes], start: int | None) -> int:
        """Rows of the new batches whose window was emitted already: they are dropped."""
        if start is None:
            return 0
        late = sum(
            rows_before(b.path, self.time_column, start)
            for b in batches
            if (earliest := times[b.id].min_ms) is not None and earliest < start
        )
        if late:
            log.info("run %s: %s late rows dropped (event time before %s ms)", run.pk, late, start)
        return late

    def _claim(self, run: FlowRun, last: TransformEpoch | None, plan: EpochPlan) -> TransformEpoch | None:
        """Gives the plan's batches to the next epoch and, if it starts, creates it, in one
        transaction holding the run's row; None if the epoch does not start, the run ended,
        or another driver planned meanwhile."""
        number = (last.number if last is not None else 0) + 1
        with transaction.atomic():
            locked = (
                FlowRun.objects.select_for_update().filter(pk=run.pk, status__in=ACTIVE_RUN_STATUSES).first()
            )
            if locked is None:
                return None
            latest = (
                TransformEpoch.objects.filter(run=run).order_by("-number").values_list("number", flat=True)
            )
            if latest.first() != (last.number if last is not None else None):
                return None
            taken = LandedBatch.objects.filter(pk__in=plan.batches, epoch__isnull=True).update(epoch=number)
            if taken != len(plan.batches):
                transaction.set_rollback(True)
                return None
            timed = [
                LandedBatch(pk=pk, event_time_max_ms=ms)
                for pk, ms in plan.event_times.items()
                if ms is not None
            ]
            LandedBatch.objects.bulk_update(timed, ["event_time_max_ms"], batch_size=500)
            if plan.progress is not None:
                state = StreamState.of(locked)
                plan.progress.apply(state)
                FlowRun.objects.filter(pk=run.pk).update(stream_state=state.as_json())
            if not plan.starts:
                return None
            records = LandedBatch.objects.filter(split__run=run, epoch=number).aggregate(
                n=Sum("records", default=0)
            )
            return TransformEpoch.objects.create(
                run=run,
                number=number,
                window_from_ms=plan.window_from_ms,
                window_to_ms=plan.window_to_ms,
                final=plan.final,
                records_in=records["n"],
            )
