import logging
import os
import signal
import threading
import time
from contextlib import ExitStack, contextmanager

import psutil
from celery import Celery, current_app
from celery.bootsteps import RUN  # pyright: ignore[reportAttributeAccessIssue] - not in celery-types
from celery.contrib.testing.worker import start_worker
from celery.worker import state
from django.conf import settings
from django.core.management.base import CommandError
from django.db import Error as DatabaseError
from django.db import close_old_connections, connection
from kombu.transport.virtual.base import QoS
from tqdm import tqdm

from dataflow.management.base import DataflowCommand
from dataflow.management.lookup import flow_named
from dataflow.management.reader_processes import ReaderProcesses, reader_processes_wanted
from dataflow.models import ACTIVE_RUN_STATUSES, RunStatus
from dataflow.redis_client import get_redis
from dataflow.selectors.runs import RunProgress, run_progress, stream_progress
from dataflow.services.errors import FlowStateError
from dataflow.services.flows import flow_resume, flow_start, flow_stop
from dataflow.services.queues import runflow_claim, runflow_reader_queue, runflow_release
from dataflow.services.runs.landed import flow_needs_spark
from dataflow.services.runs.tick import flow_tick, request_tick, run_is_unbounded
from dataflow.spark.session import cancel_jobs, milestone, milestones, session_started, warm_up_for_runflow
from source_support.errors import ConfigError
from source_support.registry import source_is_unbounded


def _celery_app() -> Celery:
    """The project's Celery app (its own, or the checkout's ``dataflow.celery``), which the
    in-process worker runs: the one the app's tasks are sent with."""
    return current_app._get_current_object()  # pyright: ignore[reportAttributeAccessIssue]


#: How long runflow rides out a database it cannot reach before it gives up.
DATABASE_PATIENCE_S = 120


class Terminated(KeyboardInterrupt):
    """SIGTERM (``docker stop``, systemd, Kubernetes) arrived: runflow stops as on Ctrl-C."""


#: The exit status after each signal: 128 + its number, as a shell reports a process it ended.
EXIT_STATUS = {signal.SIGINT: 130, signal.SIGTERM: 143}


def _raise_terminated(signum, frame) -> None:
    raise Terminated()


class Command(DataflowCommand):
    help = (
        "Runs one flow in the foreground: an in-process Celery worker and beat, the same "
        "tasks and services as a fleet. A stopped run of the flow is resumed from its "
        "checkpoints (--new starts a new run instead); Ctrl-C stops the run, keeping them."
    )

    def add_arguments(self, parser):
        parser.add_argument("name")
        parser.add_argument("--until-done", action="store_true", help="exit when the run has ended")
        parser.add_argument("--no-progress", action="store_true", help="no progress bar")
        parser.add_argument("--new", action="store_true", help="start a new run, even if one was stopped")

    def handle(self, *args, name, until_done, no_progress, new, **options):
        milestone("handle")
        # Python turns SIGINT into KeyboardInterrupt; SIGTERM must do the same, not end the
        # process at once with the run left reading and no reader.
        signal.signal(signal.SIGTERM, _raise_terminated)
        flow = flow_named(name)
        needs_spark = flow_needs_spark(
            source_type=flow.source_type,
            source_config=flow.source_config,
            transform_sql=flow.transform_sql,
            sink_type=flow.sink_type,
            sink_config=flow.sink_config,
        )
        try:
            processes = reader_processes_wanted(
                settings.DATAFLOW_RUNFLOW_READER_PROCESSES,
                parallelism=flow.parallelism,
                unbounded=source_is_unbounded(flow.source_type, flow.source_config),
            )
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        stop = threading.Event()
        beat = threading.Thread(target=_beat, args=(flow, stop, processes), name="beat", daemon=True)
        interrupted = None
        # This flow's tasks, and no other flow's: a queue of its own (dataflow/services/queues.py),
        # claimed before the run's first task is sent; its readers' slices go to the queues of
        # its reader processes, if it has any.
        queue = runflow_claim(flow, reader_queues=processes)
        reader_queues = [runflow_reader_queue(queue, index) for index in range(processes)]
        with _own_queue(flow, [queue, *reader_queues]), ExitStack() as started:
            run = readers = None
            try:
                # The run starts (its source checked) before Spark or the worker does: a run
                # that cannot start (a missing file, a server that is not there) says why at
                # once, with no JVM to wait for. Its first tasks wait in the queue meanwhile.
                run = self._run_to_follow(flow, new=new)
                if reader_queues:
                    # Spawned (never forked: the JVM below may start at once), before the
                    # worker: a child takes a second or two to import what it needs.
                    readers = started.enter_context(
                        ReaderProcesses(reader_queues, parallelism=flow.parallelism)
                    )
                if needs_spark:
                    warm_up_for_runflow()  # the JVM starts while the readers read
                worker = started.enter_context(
                    start_worker(
                        _celery_app(),
                        pool="threads",
                        queues=[queue],
                        # readers, the transform check, the Spark job (an unbounded flow's
                        # streaming transform holds a slot for good), and a tick
                        concurrency=flow.parallelism + 3,
                        perform_ping_check=False,
                        loglevel="WARNING",
                        shutdown_timeout=60,
                    )
                )
                milestone("worker")
                if until_done and run_is_unbounded(run) and not run.spec.get("stop_rule"):
                    self.stdout.write(
                        f"{name} reads a stream and has no [stop] rule: it runs until stopped (Ctrl-C)"
                    )
                beat.start()
                progress = self._follow(
                    run.pk,
                    until_done=until_done,
                    show=not no_progress,
                    unbounded=run_is_unbounded(run),
                    spark=needs_spark,
                )
                milestone("followed")
                _stop_now(worker)
            except KeyboardInterrupt as exc:
                interrupted = signal.SIGTERM if isinstance(exc, Terminated) else signal.SIGINT
                if readers is not None:
                    readers.hold()  # a signal to the process group may have stopped them too
                # A second Ctrl-C or SIGTERM while the worker shuts down leaves at once.
                for signum in EXIT_STATUS:
                    signal.signal(signum, lambda *_, code=EXIT_STATUS[interrupted]: os._exit(code))
                why = "terminated (SIGTERM)" if interrupted == signal.SIGTERM else "interrupted"
                self.stderr.write(f"\n{why}: stopping the run of {name}...")
                # The signal may have come in the middle of a query of this thread, whose
                # connection then refuses the next one ("another command is already in
                # progress"): stop the run on a new connection.
                connection.close()
                # The run that _run_to_follow was starting when the signal came, if any.
                run = flow_stop(flow=flow, message=f"stopped: runflow was {why}") or run
                cancel_jobs()
            finally:
                stop.set()
                if beat.ident is not None:
                    beat.join()
        milestone("stopped")
        if interrupted is not None:
            if run is None:
                self.stderr.write(f"no run of {name} was started")
                raise SystemExit(EXIT_STATUS[interrupted])
            run.refresh_from_db(fields=["status"])
            if run.status != RunStatus.STOPPED:  # it had ended before the signal: nothing stopped
                self.stderr.write(f"run {run.pk} had already {run.status}; nothing was stopped.")
            else:
                self.stderr.write(
                    f"run {run.pk} stopped; its checkpoints and landed data are kept. Resume it with "
                    f"'python manage.py runflow {name}' (or 'startflow {name} --resume' on a fleet)."
                )
            raise SystemExit(EXIT_STATUS[interrupted])
        assert run is not None  # not interrupted: _run_to_follow returned it, and it was followed
        written = progress.rows_written if progress.rows_written is not None else "-"
        self.stdout.write(
            f"run {run.pk} {progress.status}: {progress.records_read} records read, "
            f"{progress.errors_count} errors, {written} rows written"
        )
        if progress.message:
            self.stdout.write(progress.message)
        if options["verbosity"] >= 2:
            self.stdout.write("timings: " + " ".join(f"{k}={v:.3f}" for k, v in milestones.items()))
        if progress.status != RunStatus.SUCCEEDED:
            raise CommandError(f"flow {name} {progress.status}")

    def _run_to_follow(self, flow, *, new: bool):
        """The active run, else the latest run if it was stopped (unless ``new``), else a new one."""
        run = flow.runs.filter(status__in=ACTIVE_RUN_STATUSES).first()
        if run is not None:
            self.stdout.write(f"following run {run.pk}, already active, from its checkpoints")
            request_tick(run_id=run.pk)
            return run
        latest = flow.runs.order_by("-id").first()
        try:
            if latest is not None and latest.status == RunStatus.STOPPED and not new:
                self.stdout.write(
                    f"resuming stopped run {latest.pk} from its checkpoints (--new starts anew)"
                )
                return flow_resume(flow=flow)
            return flow_start(flow=flow)
        except (ConfigError, FlowStateError) as exc:
            raise CommandError(str(exc)) from None

    def _follow(
        self, run_id: int, *, until_done: bool, show: bool, unbounded: bool, spark: bool
    ) -> RunProgress:
        """Draws the run's progress until it is done (with ``until_done``) or forever. Only a
        bounded run's reading has a percentage (of its splits); a stream's reading shows its
        rate, lag and last epoch, and later phases show only where they are. ``spark``: the
        run's transform runs on Spark (its start is a phase of its own)."""
        bar = tqdm(
            total=0,
            unit="split",
            disable=not show,
            desc="reading (stream): " if unbounded else "reading",  # as set_description draws it
            bar_format=PHASE_FORMAT if unbounded else None,
            leave=True,
        )
        shown = None
        try:
            while True:
                progress = _progress_riding_out_outages(run_id, bar)
                phase = progress.status
                if phase == RunStatus.TRANSFORMING and spark and not session_started():
                    phase = "starting Spark"
                stream = ""
                if unbounded and not progress.done:
                    # Rate and lag are of the latest sample: true only while the run reads.
                    stream = stream_progress(run_id=run_id).describe(reading=phase == RunStatus.READING)
                now = (phase, progress.splits_total, progress.splits_finished, progress.records_read)
                now += (progress.message, progress.rows_written, stream)
                if now != shown:  # redraw only on change, so a log file gets few lines
                    shown = now
                    counted = phase == RunStatus.READING and not unbounded
                    bar.bar_format = None if counted else PHASE_FORMAT
                    bar.total = max(progress.splits_total, 1)
                    bar.n = progress.splits_finished
                    # One redraw per change (set_postfix_str's): the new phase with the old
                    # postfix would be a line that was never true (a run that succeeded, with
                    # the lag and epoch of a moment before).
                    bar.set_description(
                        phase if counted or not unbounded else f"{phase} (stream)", refresh=False
                    )
                    postfix = f"records={progress.records_read} errors={progress.errors_count}"
                    if progress.rows_written is not None and not progress.done:
                        postfix += f" rows={progress.rows_written}"
                    if stream:
                        postfix += f" {stream}"
                    if progress.message and not progress.done:
                        postfix += f" | {progress.message[:200]}"
                    bar.set_postfix_str(postfix)
                if progress.done and until_done:
                    return progress
                # Nothing drawn and no end to wait for: its queries would only take the
                # database and the cores from the run.
                time.sleep(0.2 if show or until_done else QUIET_POLL_S)
        finally:
            bar.close()


#: How often ``--no-progress`` without ``--until-done`` looks at the run (to end with it).
QUIET_POLL_S = 2.0

#: A phase with no percentage to show: a stream's reading, starting Spark, transforming, the end.
PHASE_FORMAT = "{desc}[{elapsed}{postfix}]"


def _progress_riding_out_outages(run_id: int, bar: tqdm) -> RunProgress:
    """The run's progress; while the database does not answer, retries (as the fleet's
    tasks do) and says so, for up to ``DATABASE_PATIENCE_S``."""
    since = None
    while True:
        try:
            return run_progress(run_id=run_id)
        except DatabaseError as exc:
            close_old_connections()
            since = since or time.monotonic()
            if time.monotonic() - since > DATABASE_PATIENCE_S:
                raise CommandError(
                    f"the database did not answer for {DATABASE_PATIENCE_S} s: {exc}"
                ) from None
            first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            bar.set_postfix_str(f"database unavailable, retrying: {first_line[:120]}")
            time.sleep(1)


def _stop_now(worker) -> None:
    """Stops the in-process worker without the 0.8-1.1 s its stop otherwise takes at the end
    of every run: its event loop sees the request (which ``start_worker`` makes as it leaves)
    only after its next poll of the broker, and closing its channel waits for its pending
    BRPOP to time out. So: the request, a control message that wakes the loop, then, once
    the worker is stopping, CLIENT UNBLOCK of this process's blocked BRPOPs (they return as
    if timed out). Should any of it fail, the worker stops all the same, as slowly as before."""
    state.should_terminate = 0
    try:
        _celery_app().control.broadcast("ping", destination=[worker.hostname], reply=False)
    except Exception as exc:  # noqa: BLE001 - see above
        logging.getLogger("dataflow.runflow").debug("waking the worker failed: %s", exc)
        return
    threading.Thread(target=_unblock_when_stopping, args=(worker,), name="unblock", daemon=True).start()


def _unblock_when_stopping(worker, timeout_s: float = 2.0) -> None:
    deadline = time.monotonic() + timeout_s
    while worker.blueprint.state == RUN and time.monotonic() < deadline:
        time.sleep(0.01)
    try:
        redis = get_redis()
        mine = {f"{c.laddr.ip}:{c.laddr.port}" for c in psutil.Process().net_connections("inet") if c.laddr}
        clients = redis.client_list()
        assert isinstance(clients, list)  # redis-py types a reply as possibly awaitable
        for client in clients:
            # Over a Unix socket (the embedded server) every address reads "path:0".
            if client.get("cmd") == "brpop" and (client["addr"] in mine or client["addr"].startswith("/")):
                redis.client_unblock(int(client["id"]))
    except Exception as exc:  # noqa: BLE001 - see _stop_now
        logging.getLogger("dataflow.runflow").debug("unblocking the worker failed: %s", exc)


@contextmanager
def _own_queue(flow, queues: list[str]):
    """While the block runs, the flow's tasks go to ``queues`` (runflow's own, then its
    reader processes'); then they go to the shared queue again, and what is left in
    ``queues`` is dropped: the run has ended or stopped by then (runflow follows it to its
    end or stops it), so those tasks are stale, and kombu's "Requeuing undeliverable
    message ... No consumers" for them as the worker stops says nothing an operator can
    act on."""
    undeliverable = _DropRequeueNotice(queues)
    logging.getLogger("kombu.transport.virtual.base").addFilter(undeliverable)
    # kombu prints "Restoring N unacknowledged message(s)" to stderr (a print, not a log
    # record) when the worker stops holding tasks it had prefetched: they go back to these
    # queues, purged below. Said in the log at debug instead, with nothing else changed.
    restore = QoS.restore_unacked_once
    QoS.restore_unacked_once = lambda self, stderr=None: restore(self, stderr=_DebugLines())
    try:
        yield
    finally:
        QoS.restore_unacked_once = restore
        try:
            runflow_release(flow)
            with _celery_app().connection_for_write() as connection:
                for queue in queues:
                    # A Redis transport's channel (kombu's virtual Channel) purges; the stubs'
                    # StdChannel, the base of every transport's, does not declare it.
                    connection.default_channel.queue_purge(queue)  # pyright: ignore[reportAttributeAccessIssue]
        except Exception as exc:  # noqa: BLE001 - the claim lapses by itself, the tasks are stale
            logging.getLogger("dataflow.runflow").warning("could not release queue %s: %s", queues[0], exc)
        logging.getLogger("kombu.transport.virtual.base").removeFilter(undeliverable)


class _DropRequeueNotice(logging.Filter):
    """Drops kombu's notice that a message of runflow's own queues was put back as its
    consumer stopped (the queues are purged right after)."""

    def __init__(self, queues: list[str]) -> None:
        super().__init__()
        self.queues = queues

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not (
            message.startswith("Requeuing undeliverable") and any(repr(q) in message for q in self.queues)
        )


class _DebugLines:
    """A file that sends what is printed to it to runflow's log, at debug."""

    def write(self, text: str) -> int:
        if text.strip():
            logging.getLogger("dataflow.runflow").debug("%s", text.strip())
        return len(text)

    def flush(self) -> None:
        pass


def _beat(flow, stop: threading.Event, reader_queues: int) -> None:
    """The periodic tick that celery beat would send, run in this process; it renews the
    claim on runflow's queue (and its ``reader_queues``). A failed tick (the database or
    Redis away for a moment) is retried at the next one, as beat would."""
    log = logging.getLogger("dataflow.runflow")
    while not stop.wait(settings.DATAFLOW_TICK_SECONDS):
        try:
            runflow_claim(flow, reader_queues=reader_queues)
            flow_tick(flow_id=flow.pk)
        except Exception as exc:  # noqa: BLE001 - the next tick tries again
            log.warning("tick failed, retrying: %s", str(exc).strip().splitlines()[0] if str(exc) else exc)
        finally:
            close_old_connections()
