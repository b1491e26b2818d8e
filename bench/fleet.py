"""The warm-fleet case of ``bench/bounded.py``, and a fleet of processes as deployed.

A fleet's workers are warm: their Spark session is started and has run a job before any
flow starts (a worker that takes Spark tasks runs ``warm_up_with_job`` as it starts).
``procs.start_fleet`` makes one in this process: a Celery worker (the threads pool, as
``runflow`` runs it) and beat (Celery's embedded beat service with the project's
DatabaseScheduler, as ``celery -A dataflow beat`` runs it).

``python bench/fleet.py bounded --data DIR --out DIR [--runs 2]`` is what ``bench/bounded.py``
runs as a subprocess for its warm-fleet case: the fleet is started before the clock, then
the bounded flow over DIR is started ``--runs`` times through ``flow_start``, each run timed
from the request to the published sink. One ``fleet-run`` line per run gives its phases, in
seconds from the request: the run created (its splits listed), the first reader assignment,
the first and last commit, the transform's start, the sink published, and the transform
check's start and end; each run's sink is copied to ``OUT-run<i>``. Uses DATABASE_URL / REDIS_URL when set (a fleet's PostgreSQL and
Redis), else the embedded defaults in a fresh ``bench/_work/fleet-var``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from procs import REPO, WORK, setup_django, start_fleet


class ProcessFleet:
    """A fleet of its own processes, as deployed (docs/deployment.md): beat, a reader worker
    (threads) and a Spark-driver worker (``-Q spark -c 1``, prefork), with this process's
    environment; ``stop`` ends them (their process groups). Ready when both workers answer
    a ping; the Spark worker may still be warming up (``warm`` waits for its log line)."""

    def __init__(self, log_dir: Path, parallelism: int) -> None:
        log_dir.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "DATAFLOW_SPARK_QUEUE": "spark", "PYTHONUNBUFFERED": "1"}
        commands = {
            "readers": [
                "worker",
                "-P",
                "threads",
                "-c",
                str(parallelism + 2),
                "-Q",
                "dataflow",
                "-n",
                "readers@%h",
            ],
            "spark": ["worker", "-Q", "spark", "-c", "1", "-n", "spark@%h"],
            "beat": ["beat", "-s", str(log_dir / "beat-schedule")],
        }
        self.procs = []
        for name, args in commands.items():
            log = open(log_dir / f"{name}.log", "ab")  # noqa: SIM115 - closed with the process
            self.procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "celery", "-A", "dataflow", *args, "-l", "INFO"],
                    cwd=REPO,
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
        from dataflow.celery import app

        deadline = time.monotonic() + 120
        while len(app.control.ping(timeout=1.0)) < 2:
            if time.monotonic() > deadline:
                sys.exit(f"the fleet's workers did not answer; see {log_dir}")
        spark_log = log_dir / "spark.log"
        while os.environ.get("DATAFLOW_WORKER_SPARK_WARM_UP", "1") != "0":
            text = spark_log.read_text(errors="replace")
            if "Spark warmed up" in text or "Spark warm-up failed" in text:
                break
            if time.monotonic() > deadline:
                sys.exit(f"the Spark worker did not warm up; see {spark_log}")
            time.sleep(0.2)

    def stop(self) -> None:
        for proc in self.procs:
            os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


class TaskClock:
    """When each Celery task of this process's worker started and ended (epoch seconds),
    by task name: the first start and the last end of each."""

    def __init__(self) -> None:
        from celery.signals import task_postrun, task_prerun

        self.first_start: dict[str, float] = {}
        self.last_end: dict[str, float] = {}
        self._lock = threading.Lock()
        task_prerun.connect(self._started, weak=False)
        task_postrun.connect(self._ended, weak=False)

    def reset(self) -> None:
        with self._lock:
            self.first_start.clear()
            self.last_end.clear()

    def _started(self, sender=None, **kwargs) -> None:
        with self._lock:
            self.first_start.setdefault(_short(sender), time.time())

    def _ended(self, sender=None, **kwargs) -> None:
        with self._lock:
            self.last_end[_short(sender)] = time.time()


def _short(task) -> str:
    return str(getattr(task, "name", task)).rsplit(".", 1)[-1]


def bounded_flow_spec(*, name: str, data: Path, sink: Path, parallelism: int, batch_size: int) -> dict:
    from bench.bounded import SCHEMA, SQL  # the same flow as ``runflow`` runs

    return {
        "flow": {
            "name": name,
            "parallelism": parallelism,
            "batch_size": batch_size,
            "poll_interval_ms": 500,
            "skip_errors": False,
        },
        "source": {"type": "files", "path": f"{data}/*.csv"},
        "format": {"type": "csv", "schema": SCHEMA},
        "transform": {"sql": SQL},
        "sink": {"type": "parquet", "path": str(sink)},
    }


def run_phases(run_id: int, requested: float, created: float, clock: TaskClock) -> dict[str, float]:
    """The run's phases in seconds from the request (see the module's docstring)."""
    from django.db.models import Max, Min

    from dataflow.models import Assignment, FlowRun, LandedBatch

    run = FlowRun.objects.get(pk=run_id)
    assignments = Assignment.objects.filter(split__run_id=run_id).aggregate(
        first=Min("assigned_at"), last=Max("ended_at")
    )
    first_commit = LandedBatch.objects.filter(split__run_id=run_id).aggregate(t=Min("landed_at"))["t"]
    marks = {
        "created": created,
        "assigned": assignments["first"].timestamp(),
        "first_commit": first_commit.timestamp(),
        "last_commit": assignments["last"].timestamp(),
        "transform": run.transform_started_at.timestamp(),
        "published": run.finished_at.timestamp(),
        "check_start": clock.first_start.get("transform_check", 0.0),
        "check_end": clock.last_end.get("transform_check", 0.0),
    }
    return {k: round(v - requested, 3) if v else -1.0 for k, v in marks.items()}


def bounded_main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="fleet.py bounded")
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True, help="the sink (replaced by each run)")
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--parallelism", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=50_000)
    parser.add_argument(
        "--processes", action="store_true", help="a fleet of worker and beat processes (not warmed)"
    )
    args = parser.parse_args(argv)
    var = WORK / "fleet-var"
    shutil.rmtree(var, ignore_errors=True)
    setup_django(var_dir=var, allowed_roots=[args.data.parent, args.out.parent])
    from dataflow.models import FlowRun, RunStatus
    from dataflow.services.flows import flow_apply, flow_start

    flow, _ = flow_apply(
        spec=bounded_flow_spec(
            name="bench-bounded-fleet",
            data=args.data,
            sink=args.out,
            parallelism=args.parallelism,
            batch_size=args.batch_size,
        )
    )
    clock = TaskClock()
    if args.processes:
        fleet = ProcessFleet(var / "fleet-logs", args.parallelism)
    else:
        fleet = start_fleet(args.parallelism)
    print(f"fleet ready ({os.getpid()})", flush=True)
    try:
        for i in range(args.runs):
            clock.reset()
            requested = time.time()
            t0 = time.perf_counter()
            run = flow_start(flow=flow)
            created = time.time()
            while True:
                status = FlowRun.objects.filter(pk=run.pk).values_list("status", flat=True).get()
                if status not in (RunStatus.READING, RunStatus.TRANSFORMING):
                    break
                time.sleep(0.01)
            elapsed = time.perf_counter() - t0
            if status != RunStatus.SUCCEEDED:
                message = FlowRun.objects.get(pk=run.pk).message
                sys.exit(f"run {run.pk} ended {status}: {message}")
            phases = run_phases(run.pk, requested, created, clock)
            kept = args.out.with_name(f"{args.out.name}-run{i + 1}")  # each run's sink, for comparison
            shutil.rmtree(kept, ignore_errors=True)
            shutil.copytree(args.out, kept)
            print(f"fleet-run {i + 1} {elapsed:.3f} {json.dumps(phases)}", flush=True)
    finally:
        fleet.stop()


if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] != "bounded":
        sys.exit("usage: fleet.py bounded --data DIR --out DIR [--runs N]")
    bounded_main(sys.argv[2:])
