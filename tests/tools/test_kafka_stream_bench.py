"""``bench/kafka_stream.py`` at a tiny size: it starts its own Tansu broker (an independent
Kafka broker), runs runflow and the raw consumers, prints its last line, and its sink
holds every message sent once."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pyarrow.dataset as ds
import pytest

ROOT = Path(__file__).resolve().parents[2]
LAST_LINE = (
    r"throughput_ratio=\d+\.\d{3} ours_rps=\d+ raw_rps=\d+ "
    r"latency_p50_s=-?\d+\.\d{3} latency_p99_s=-?\d+\.\d{3}"
)


@pytest.mark.slow
def test_the_kafka_stream_bench_prints_its_line_and_sinks_what_was_sent(tmp_path):
    done = subprocess.run(
        [
            sys.executable,
            "bench/kafka_stream.py",
            *("--records", "3000", "--rate", "200", "--seconds", "2", "--out", str(tmp_path)),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )

    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    assert re.fullmatch(LAST_LINE, lines[-1]), lines[-1]
    sent = re.search(r"^sent (\d+) messages", done.stdout, re.MULTILINE)
    assert sent is not None, lines
    ids = ds.dataset(tmp_path / "sink", format="parquet").to_table(columns=["id"]).column("id")
    assert sorted(ids.to_pylist()) == list(range(int(sent.group(1))))
