"""What a transform does with a Spark session: its jobs in a group of their own (cancelled
together), the rows a frame's action wrote, and PySpark's error log kept quiet."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from pyspark.logger import PySparkLogger
from pyspark.sql import Observation
from pyspark.sql import functions as F
from pyspark.sql import types as T

log = logging.getLogger("dataflow.spark")

_quiet = threading.local()


class _DropInThisThread(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not getattr(_quiet, "on", False) or record.thread != threading.get_ident()


_filter = _DropInThisThread()


@contextmanager
def quiet_query_errors() -> Iterator[None]:
    """Drops PySpark's log of a failed query in this thread while the block runs.

    PySpark logs every failed query with the whole Java stack trace (11 KB) at ERROR; the
    caller reports the error's first line where the user looks (the run's message).
    """
    # PySpark's own class: a plain Logger of that name would break its error logging.
    PySparkLogger.getLogger("SQLQueryContextLogger").addFilter(_filter)  # once: filters are a set
    _quiet.on = True
    try:
        yield
    finally:
        _quiet.on = False


#: Spark types that Spark's Parquet writer and pyarrow (given Spark's Arrow form of them)
#: write alike: the same physical and logical Parquet types, read back the same. Not
#: timestamps (Spark writes INT96), decimals or nested types.
_ARROW_ALIKE = (
    T.BooleanType,
    T.ByteType,
    T.ShortType,
    T.IntegerType,
    T.LongType,
    T.FloatType,
    T.DoubleType,
    T.StringType,
    T.BinaryType,
    T.DateType,
)


def writes_alike_with_arrow(schema) -> bool:
    """Whether rows of the Spark ``schema`` collected as Arrow (``DataFrame.toArrow``) and
    written by pyarrow make the Parquet file Spark's writer would (see ``_ARROW_ALIKE``)."""
    return all(isinstance(field.dataType, _ARROW_ALIKE) for field in schema.fields)


def observe_rows(frame, name: str):
    """``frame`` with a count of the rows that flow through it, taken by the action that
    runs it (no second pass), and a function that returns the count afterwards."""
    if type(frame).__module__.startswith("pyspark.sql.connect"):
        # Spark Connect's client costs 2 s and 130 MB to import: only its frames load it.
        from pyspark.sql.connect import functions as connect_f  # noqa: PLC0415 - 2 s, 130 MB
        from pyspark.sql.connect import observation as connect_o  # noqa: PLC0415 - as above

        observation, functions = connect_o.Observation(name), connect_f
    else:
        observation, functions = Observation(name), F
    observed = frame.observe(observation, functions.count(functions.lit(1)).alias("rows"))
    return observed, lambda: observation.get["rows"]


class JobGroup:
    """The Spark jobs of one transform attempt: a job group in classic Spark (its tasks are
    interrupted on cancel), a tag of the attempt's own session with Spark Connect. Made in
    the thread that runs the jobs (``job_group``); ``cancel`` may be called from any thread."""

    def __init__(self, session, name: str) -> None:
        self.session = session
        self.name = name
        self.remote = type(session).__module__.startswith("pyspark.sql.connect")

    def cancel(self) -> None:
        """Cancels the group's running jobs (their tasks interrupted); jobs it starts later
        run unless cancelled again."""
        try:
            if self.remote:
                self.session.interruptTag(self.name)
            else:
                self.session.sparkContext.cancelJobGroup(self.name)
        except Exception as exc:  # noqa: BLE001 - a session already gone has nothing running
            log.warning("cancelling Spark job group %s failed: %s", self.name, exc)

    def running_tasks(self) -> int:
        """Tasks of the group's jobs still running: a cancelled job's tasks run on until
        they look at their interrupt flag, which a tight loop (a cross join in one
        generated loop) may not do for minutes (classic Spark; 0 with Connect)."""
        if self.remote:
            return 0
        tracker = self.session.sparkContext.statusTracker()
        total = 0
        for job in tracker.getJobIdsForGroup(self.name):
            info = tracker.getJobInfo(job)
            for stage in info.stageIds if info else ():
                stage_info = tracker.getStageInfo(stage)
                total += stage_info.numActiveTasks if stage_info else 0
        return total

    def active_job_ids(self) -> list[int]:
        """The ids of the group's jobs Spark still runs (classic Spark; [] with Connect, whose
        client cannot see the server's jobs)."""
        if self.remote:
            return []
        tracker = self.session.sparkContext.statusTracker()
        active = set(tracker.getActiveJobsIds())
        return [job for job in tracker.getJobIdsForGroup(self.name) if job in active]


@contextmanager
def job_group(session, name: str, description: str) -> Iterator[JobGroup]:
    """Runs the Spark jobs this thread starts in the block in group ``name``; the thread
    leaves the group when the block ends (a pool thread runs other work next)."""
    group = JobGroup(session, name)
    if group.remote:
        session.addTag(name)
    else:
        session.sparkContext.setJobGroup(name, description[:200], interruptOnCancel=True)
    try:
        yield group
    finally:
        try:
            if group.remote:
                session.removeTag(name)
            else:
                for key in ("spark.jobGroup.id", "spark.job.description", "spark.job.interruptOnCancel"):
                    session.sparkContext.setLocalProperty(key, None)
        except Exception as exc:  # noqa: BLE001 - a dead session has no group to leave
            log.debug("leaving Spark job group %s failed: %s", name, exc)
