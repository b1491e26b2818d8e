"""A flow's transform on a real Spark standalone cluster and through a real Spark Connect
server, both started from the pyspark package and stopped by pid.

The transform runs in the in-process Celery worker (the pytest process), so the Spark
settings are switched with the ``settings`` fixture; ``dataflow.spark`` rebuilds its session
when they change.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pyspark
import pytest

import dataflow.spark
import dataflow.spark.session
from dataflow.models import DataFlow, LandedBatch
from dataflow.services import transform_check
from dataflow.services.flows import flow_start
from dataflow.services.runs import transform as bounded_transform
from tests.factories import DataFlowFactory
from tests.helpers import (
    Beat,
    multiset,
    read_parquet_rows,
    run_to_end,
    wait_for_run,
    wait_until,
    write_csv,
)
from tests.server_process import free_port

SPARK_HOME = Path(pyspark.__file__).parent  # the pip package is a Spark distribution


def _port(preferred: int | None = None) -> int:
    """``preferred`` (Spark's default, as the logs name it) if nothing listens there, else a
    free port of this worker's (``free_port``: never an ephemeral port another process may
    take before the server binds it)."""
    if preferred:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", preferred))
            except OSError:
                pass
            else:
                return preferred
    return free_port()


def _get_json(url: str):
    # A wait, not a measure: the Spark UI's REST API answered in more than 5 s on a loaded
    # 2-core CI machine (a Connect server's UI after its run).
    with urllib.request.urlopen(url, timeout=60) as response:
        return json.load(response)


def _wait_until(predicate, *, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            value = predicate()
        except OSError:
            value = None
        if value:
            return value
        time.sleep(0.25)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def _started(spark: SparkProcesses, name: str, line: str) -> bool:
    """Whether process ``name`` has logged ``line``; fails with its log if it has exited."""
    if line in spark.log(name):
        return True
    proc = spark.procs[name]
    assert proc.poll() is None, f"{name} exited with {proc.returncode}: {spark.log(name)[-3000:]}"
    return False


class SparkProcesses:
    """Spark JVMs started by a test (``spark-class`` ends in ``exec java``), stopped by pid."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.procs: dict[str, subprocess.Popen] = {}

    def start(self, name: str, args: list[str]) -> None:
        env = dict(os.environ, SPARK_HOME=str(SPARK_HOME), SPARK_LOCAL_DIRS=str(self.log_dir / "tmp"))
        log = open(self.log_dir / f"{name}.log", "ab")  # noqa: SIM115 - closed with the process
        self.procs[name] = subprocess.Popen(
            args, cwd=self.log_dir, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )

    def stop(self, name: str) -> None:
        proc = self.procs.pop(name, None)
        if proc is None:
            return
        proc.send_signal(signal.SIGTERM)  # a worker's shutdown hook stops its executors
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)

    def log(self, name: str) -> str:
        return (self.log_dir / f"{name}.log").read_text(errors="replace")

    def close(self) -> None:
        for name in list(self.procs):
            self.stop(name)


class StandaloneCluster:
    """One master and one worker (2 cores, 2 GiB) on loopback, started on demand."""

    def __init__(self, log_dir: Path) -> None:
        self.spark = SparkProcesses(log_dir)
        self.work_dir = log_dir / "work"
        self.port = _port(7077)
        self.webui_port = _port(8080)
        self.url = f"spark://127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return "master" in self.spark.procs

    def status(self) -> dict:
        return _get_json(f"http://127.0.0.1:{self.webui_port}/json/")

    def start(self) -> None:
        if self.running:
            return
        spark_class = str(SPARK_HOME / "bin" / "spark-class")
        self.spark.start(
            "master",
            [spark_class, "org.apache.spark.deploy.master.Master",
             "--host", "127.0.0.1", "--port", str(self.port), "--webui-port", str(self.webui_port)],
        )  # fmt: skip
        # The worker starts once the master answers: a worker that finds no master waits
        # 5-15 s before it tries again.
        _wait_until(self.status, timeout=180, what="the Spark master")
        self.spark.start(
            "worker",
            [spark_class, "org.apache.spark.deploy.worker.Worker", self.url,
             "--host", "127.0.0.1", "--webui-port", str(_port()),
             "--cores", "2", "--memory", "2g", "--work-dir", str(self.work_dir)],
        )  # fmt: skip
        _wait_until(lambda: self.status()["aliveworkers"] == 1, timeout=180, what="the Spark worker")

    def stop(self) -> None:
        self.spark.stop("worker")
        self.spark.stop("master")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    cluster = StandaloneCluster(tmp_path_factory.mktemp("spark-cluster"))
    yield cluster
    cluster.stop()


@pytest.fixture()
def on_cluster(cluster, dirs, settings):
    settings.SPARK_MASTER = cluster.url
    settings.SPARK_EXECUTOR_MEMORY = "512m"
    settings.SPARK_CORES_MAX = "2"
    settings.DATAFLOW_LANDING_SHARED = True  # one machine: the landing root is the same path
    yield cluster
    dataflow.spark.session.stop_spark()


def _sources(dirs) -> list[tuple]:
    sent = []
    for i in range(3):
        sent += write_csv(dirs.data / f"part-{i}.csv", range(i * 300, i * 300 + 300))
    return sent


def _flow(dirs) -> DataFlow:
    # Not the identity (SELECT *), which needs no Spark: these tests are about Spark.
    return DataFlowFactory(
        parallelism=2,
        batch_size=100,
        sink_path=str(dirs.out / "sink"),
        sql="SELECT id, sensor, temperature FROM source",
    )


def test_master_down_when_the_job_starts_fails_the_attempt_and_a_retry_succeeds(worker, dirs, on_cluster):
    cluster = on_cluster
    cluster.stop()  # nothing listens on the master's port
    sent = _sources(dirs)
    flow = _flow(dirs)

    with Beat():
        run = flow_start(flow=flow)
        _wait_until(
            lambda: run.refresh_from_db() or run.transform_attempts >= 1 and "unreachable" in run.message,
            timeout=60,
            what="the first transform attempt to fail",
        )
    # No beat now: nothing queues the next attempt while the master starts.

    assert run.status == "transforming"
    assert run.transform_attempts < bounded_transform.MAX_TRANSFORM_ATTEMPTS
    assert run.message.startswith(
        f"transform attempt 1 failed, will retry: Spark master {cluster.url} is unreachable: "
    ), run.message
    batches = list(LandedBatch.objects.filter(split__run=run))
    assert batches and all(Path(b.path).is_file() for b in batches)
    assert multiset(row for b in batches for row in read_parquet_rows(Path(b.path))) == multiset(sent)

    cluster.start()
    with Beat():
        run = wait_for_run(run, timeout=150)

    assert run.status == "succeeded", run.message
    assert run.transform_attempts >= 2
    assert multiset(read_parquet_rows(dirs.out / "sink")) == multiset(sent)


def test_flow_runs_on_a_standalone_cluster_and_its_application_ends(worker, dirs, on_cluster):
    cluster = on_cluster
    cluster.start()
    before = {app["id"] for app in cluster.status()["completedapps"]}
    sent = _sources(dirs)

    run = run_to_end(_flow(dirs), timeout=150)

    assert run.status == "succeeded", run.message
    assert multiset(read_parquet_rows(dirs.out / "sink")) == multiset(sent)
    # The session was stopped after the job, so the master lists the application as finished.
    status = _wait_until(
        lambda: (s := cluster.status()) and not s["activeapps"] and s,
        timeout=60,
        what="the application to finish",
    )
    # One application for the transform check as the run starts and one for the job, or one
    # for both when the job started before the check's session was stopped.
    apps = [app for app in status["completedapps"] if app["id"] not in before]
    assert 1 <= len(apps) <= 2
    assert {(app["name"], app["state"]) for app in apps} == {("activedataflow", "FINISHED")}
    # ...and its executors ran on the cluster's worker.
    assert any(list((cluster.work_dir / app["id"]).glob("*/stderr")) for app in apps)


@contextmanager
def connect_server(log_dir: Path):
    """A Spark Connect server (local[2]) from the pyspark package, stopped by pid."""
    spark = SparkProcesses(log_dir)
    port, ui_port = _port(15002), _port()
    spark.start(
        "connect",
        [str(SPARK_HOME / "bin" / "spark-submit"),
         "--class", "org.apache.spark.sql.connect.service.SparkConnectServer",
         "--master", "local[2]", "--driver-memory", "1g",
         "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
         "--conf", f"spark.connect.grpc.binding.port={port}",
         "--conf", f"spark.ui.port={ui_port}"],
    )  # fmt: skip
    try:
        # A wait for the server, not a measure: its JVM took over 90 s to start on 2 cores
        # beside the other tests' (pytest-xdist); a server that exits fails at once.
        _wait_until(
            lambda: _started(spark, "connect", "Spark Connect server started"),
            timeout=300,
            what="the Spark Connect server",
        )
        yield f"sc://127.0.0.1:{port}", f"http://127.0.0.1:{ui_port}/api/v1"
    finally:
        spark.close()


def test_flow_runs_through_spark_connect(worker, dirs, settings, monkeypatch, tmp_path_factory):
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    sessions = []
    spark_job = dataflow.spark.session.spark_job

    @contextmanager
    def recording_spark_job():
        with spark_job() as session:
            sessions.append(session)
            yield session

    # Where the check of the transform and the bounded transform take their sessions.
    monkeypatch.setattr(transform_check, "spark_job", recording_spark_job)
    monkeypatch.setattr(bounded_transform, "spark_job", recording_spark_job)
    sent = _sources(dirs)

    with connect_server(tmp_path_factory.mktemp("spark-connect")) as (remote, api):
        settings.SPARK_REMOTE = remote
        settings.DATAFLOW_LANDING_SHARED = True
        run = run_to_end(_flow(dirs), timeout=150)

        assert run.status == "succeeded", run.message
        assert multiset(read_parquet_rows(dirs.out / "sink")) == multiset(sent)
        # One session for the check of the transform as the run starts, one for the job.
        assert len(sessions) == 2 and all(isinstance(s, ConnectSession) for s in sessions)
        # Released on the server after each; the check's session may still be closing when
        # the run has already ended (the check runs beside the readers).
        wait_until(
            lambda: all(s.is_stopped for s in sessions), 30, lambda: "a Connect session was not released"
        )
        # The server ran the write, for this client session, into the sink's staging directory.
        (app,) = _get_json(f"{api}/applications")
        executions = _get_json(f"{api}/applications/{app['id']}/sql?details=false")
        writes = [
            e
            for e in executions
            if sessions[-1].session_id in e["description"]
            and f".sink.staging-{run.uid.hex}-" in e["planDescription"]
        ]
        assert writes and all(e["status"] == "COMPLETED" for e in writes)
