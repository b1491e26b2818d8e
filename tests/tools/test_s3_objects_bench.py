"""``bench/s3_objects.py`` at a tiny size: it starts its moto server (the S3 stand-in), runs
both sides, finds their outputs equal and prints its last line."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_s3_objects_bench_runs_both_sides_and_compares_them():
    done = subprocess.run(
        [sys.executable, "bench/s3_objects.py", "--gb", "0.01"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )

    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    assert any(line.startswith("outputs equal: ") for line in lines), lines
    assert re.fullmatch(r"ratio=\d+\.\d\d ours_s=\d+\.\d\d raw_s=\d+\.\d\d", lines[-1]), lines[-1]
