"""Test helpers: write source files, build flow specs, run a flow and read its sink."""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pyarrow.parquet as pq
from django.conf import settings
from django.contrib.auth.hashers import PBKDF2PasswordHasher

from dataflow.celery import app as celery_app
from dataflow.models import DataFlow, FlowRun, LandedBatch, Split
from dataflow.selectors.runs import run_progress
from dataflow.services.flows import flow_apply, flow_start
from dataflow.services.runs.tick import flow_tick

SCHEMA = "id BIGINT, sensor STRING, temperature DOUBLE"


class QuickPBKDF2PasswordHasher(PBKDF2PasswordHasher):
    """Django's PBKDF2 with one iteration, for the tests' users: the default's million take
    ~0.25 s a password here, and the tests make hundreds of users. The count is written in
    each hash, so every process of the deployment (the e2e tests' servers too) still
    checks these passwords with its own hashers."""

    iterations = 1


def write_csv(path: Path, ids: range, *, header: bool = True) -> list[tuple]:
    """A CSV file of rows (id, sensor, temperature); returns the rows written."""
    rows = [(i, f"s{i % 7}", round(i * 0.5, 1)) for i in ids]
    with open(path, "w") as f:
        if header:
            f.write("id,sensor,temperature\n")
        for row in rows:
            f.write(f"{row[0]},{row[1]},{row[2]}\n")
    return rows


def spec(name: str, source_path: str, sink_path: str, **flow_fields) -> dict:
    flow = {"name": name, "parallelism": 4, "batch_size": 1000, "poll_interval_ms": 50, **flow_fields}
    return {
        "flow": flow,
        "source": {"type": "files", "path": source_path},
        "format": {"type": "csv", "schema": SCHEMA},
        "transform": {"sql": "SELECT * FROM source"},
        "sink": {"type": "parquet", "path": sink_path},
    }


class Beat:
    """Stands in for celery beat in tests that run no beat process: ticks every flow often."""

    def __init__(self, interval: float = 0.5) -> None:
        self.interval = interval
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        from django.db import close_old_connections

        while not self.stop.wait(self.interval):
            try:
                for flow_id in DataFlow.objects.values_list("pk", flat=True):
                    flow_tick(flow_id=flow_id)
            except Exception:  # noqa: BLE001 - as celery beat, the next tick tries again
                logging.getLogger(__name__).warning("tick failed", exc_info=True)
            finally:
                close_old_connections()

    def __enter__(self) -> Beat:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join()


def wait_for_run(
    run: FlowRun, *, timeout: float = 120, statuses=("succeeded", "failed", "stopped")
) -> FlowRun:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run.refresh_from_db()
        if run.status in statuses:
            return run
        time.sleep(0.2)
    raise AssertionError(f"run {run.pk} still {run.status} after {timeout}s: {run.message}")


def wait_until(condition, timeout: float, message) -> None:
    """Polls ``condition`` until it is true; after ``timeout`` seconds fails with ``message()``."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(message())
        time.sleep(0.1)


def live(run: FlowRun) -> int:
    """Records read so far by a run that may still be going."""
    return run_progress(run_id=run.pk).records_read


def run_flow(doc: dict, *, timeout: float = 120, owner=None) -> FlowRun:
    flow, _ = flow_apply(spec=doc, owner=owner)
    return run_to_end(flow, timeout=timeout)


def run_to_end(flow: DataFlow, *, timeout: float = 120) -> FlowRun:
    """Starts a run of ``flow`` and waits for it to end, ticked as beat would."""
    with Beat():
        return wait_for_run(flow_start(flow=flow), timeout=timeout)


@contextmanager
def logs_of(caplog, name: str) -> Iterator:
    """``caplog`` holding what logger ``name`` logs at INFO and above. The project's
    loggers do not propagate to caplog's handler, so the handler goes on the logger itself."""
    logger = logging.getLogger(name)
    logger.addHandler(caplog.handler)
    try:
        with caplog.at_level(logging.INFO, logger=name):
            yield caplog
    finally:
        logger.removeHandler(caplog.handler)


def read_parquet_rows(path: Path) -> list[tuple]:
    table = pq.read_table(path)
    return list(zip(*[table.column(c).to_pylist() for c in table.column_names], strict=True))


def multiset(rows) -> Counter:
    return Counter(rows)


def committed_overlaps_and_gaps(run: FlowRun) -> list[str]:
    """Where the committed batches of ``run`` do not tile its splits, one line each.

    Empty when every record was committed exactly once: each split's landed batches run
    without overlap or gap from where its first reader started, and hold its ``records_read``.
    """
    batches: dict[int, list[LandedBatch]] = {}
    for batch in LandedBatch.objects.filter(split__run=run).order_by("start_position"):
        batches.setdefault(batch.split_id, []).append(batch)
    problems = []
    for split in Split.objects.filter(run=run):
        position = split.assignments.order_by("id").values_list("start_position", flat=True)[0]
        for batch in batches.get(split.pk, []):
            if batch.start_position != position:
                problems.append(
                    f"{split.split_id}: batch [{batch.start_position}, {batch.end_position}) after {position}"
                )
            position = batch.end_position
        landed = sum(b.records for b in batches.get(split.pk, []))
        if position > split.position or landed != split.records_read:
            problems.append(
                f"{split.split_id}: landed up to {position} ({landed} records), "
                f"checkpoint {split.position} ({split.records_read} records)"
            )
    return problems


def waiting_in_shared_queue() -> int:
    """How many tasks wait in the deployment's shared Celery queue."""
    with celery_app.connection_for_write() as connection:
        return connection.default_channel.queue_declare(
            queue=settings.CELERY_TASK_DEFAULT_QUEUE
        ).message_count
