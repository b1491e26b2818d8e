import threading
import time

from celery.contrib.testing.worker import start_worker
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import close_old_connections
from tqdm import tqdm

from dataflow.celery import app
from dataflow.management.lookup import flow_named
from dataflow.models import ACTIVE_RUN_STATUSES
from dataflow.selectors import run_progress
from dataflow.services.flows import FlowStateError, flow_start
from dataflow.services.runs import flow_tick, request_tick
from dataflow.spark import warm_up
from source_support.errors import ConfigError


class Command(BaseCommand):
    help = (
        "Runs one flow in the foreground: an in-process Celery worker and beat, the same "
        "tasks and services as a fleet."
    )

    def add_arguments(self, parser):
        parser.add_argument("name")
        parser.add_argument("--until-done", action="store_true", help="exit when the run has ended")
        parser.add_argument("--no-progress", action="store_true", help="no progress bar")

    def handle(self, *args, name, until_done, no_progress, **options):
        flow = flow_named(name)
        warm_up()  # the JVM starts while the readers read
        stop = threading.Event()
        beat = threading.Thread(target=_beat, args=(flow.pk, stop), name="beat", daemon=True)
        concurrency = flow.parallelism + 2
        with start_worker(
            app,
            pool="threads",
            concurrency=concurrency,
            perform_ping_check=False,
            loglevel="WARNING",
            shutdown_timeout=60,
        ):
            run = flow.runs.filter(status__in=ACTIVE_RUN_STATUSES).first()
            if run is not None:
                self.stdout.write(f"resuming run {run.pk} from its checkpoints")
                request_tick(run_id=run.pk)
            else:
                try:
                    run = flow_start(flow=flow)
                except (ConfigError, FlowStateError) as exc:
                    raise CommandError(str(exc)) from None
            beat.start()
            try:
                progress = self._follow(run.pk, until_done=until_done, show=not no_progress)
            finally:
                stop.set()
                beat.join()
        self.stdout.write(
            f"run {run.pk} {progress.status}: {progress.records_read} records read, "
            f"{progress.errors_count} errors, {progress.rows_written if progress.rows_written is not None else '-'} rows written"
        )
        if progress.message:
            self.stdout.write(progress.message)
        if progress.status != "succeeded":
            raise CommandError(f"flow {name} {progress.status}")

    def _follow(self, run_id, *, until_done, show):
        bar = tqdm(total=0, unit="split", disable=not show, desc="reading", leave=True)
        shown = None
        try:
            while True:
                progress = run_progress(run_id=run_id)
                now = (
                    progress.status,
                    progress.splits_total,
                    progress.splits_finished,
                    progress.records_read,
                )
                if now != shown:  # redraw only on change, so a log file gets few lines
                    shown = now
                    bar.total = max(progress.splits_total, 1)
                    bar.n = progress.splits_finished
                    bar.set_description(progress.status)
                    bar.set_postfix_str(f"records={progress.records_read} errors={progress.errors_count}")
                if progress.done and until_done:
                    return progress
                time.sleep(0.2)
        finally:
            bar.close()


def _beat(flow_id: int, stop: threading.Event) -> None:
    """The periodic tick that celery beat would send, run in this process."""
    while not stop.wait(settings.DATAFLOW_TICK_SECONDS):
        try:
            flow_tick(flow_id=flow_id)
        finally:
            close_old_connections()
