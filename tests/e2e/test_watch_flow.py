"""A files flow with ``watch = true``: files dropped into the directory while it runs (written
hidden, then renamed into place) reach the sink exactly once, across a stop and a resume
too; with ``[stop] at = "latest"`` it reads what was there and ends.

The sink is read with pyarrow and compared with the rows written to the files.
"""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from dataflow.models import DataFlow, FlowRun
from dataflow.services.flows import flow_resume, flow_start, flow_stop
from tests.factories import DataFlowFactory
from tests.helpers import Beat, multiset, wait_for_run, wait_until, write_csv

pytestmark = pytest.mark.django_db(transaction=True)


def watched(dirs, *, stop: dict | None = None) -> DataFlow:
    """A flow that watches the data directory for new files, into out/sink."""
    return DataFlowFactory(
        source={
            "type": "files",
            "path": str(dirs.data),
            "watch": True,
            "discovery_interval_ms": 300,
            "settle_ms": 0,
        },
        transform={"sql": "SELECT * FROM source", "trigger_ms": 200},
        stop=stop,
        parallelism=2,
        batch_size=40,
        sink_path=str(dirs.out / "sink"),
    )


def drop(directory: Path, name: str, ids: range) -> list[tuple]:
    """Writes a CSV file as a hidden file, then renames it into place (as a writer that
    must not be read half-written does); returns its rows."""
    hidden = directory / f".{name}.tmp"
    rows = write_csv(hidden, ids)
    os.rename(hidden, directory / name)
    return rows


def sink_rows(sink: Path) -> list[tuple]:
    if not sink.exists() or not any(p for p in sink.glob("*.parquet")):
        return []
    table = pq.read_table(sink)
    return list(zip(*[table.column(c).to_pylist() for c in table.column_names], strict=True))


def note(run: FlowRun) -> str:
    run.refresh_from_db()
    return f"run {run.status}: {run.message}"


def test_files_dropped_while_a_watched_flow_runs_reach_the_sink_once_across_a_resume(worker, dirs):
    sink = dirs.out / "sink"
    sent = drop(dirs.data, "part-000.csv", range(0, 100))
    flow = watched(dirs)

    def arrived(rows) -> None:
        wait_until(
            lambda: multiset(sink_rows(sink)) == multiset(rows),
            120,
            lambda: f"{len(sink_rows(sink))} rows in the sink, {len(rows)} written ({note(run)})",
        )

    with Beat():
        run = flow_start(flow=flow)
        arrived(sent)
        for n in range(1, 4):  # while it runs
            sent += drop(dirs.data, f"part-{n:03d}.csv", range(n * 100, n * 100 + 100))
        arrived(sent)
        sent += drop(dirs.data, "part-004.csv", range(400, 500))  # perhaps read, perhaps not
        flow_stop(flow=flow)
        sent += drop(dirs.data, "part-005.csv", range(500, 600))  # while it is stopped
        assert len(set(sink_rows(sink))) == len(sink_rows(sink))
        resumed = flow_resume(flow=flow)
        assert resumed.pk == run.pk
        sent += drop(dirs.data, "part-006.csv", range(600, 700))
        arrived(sent)
        run.refresh_from_db()
        assert run.status == "reading", run.message
        flow_stop(flow=flow)

    assert multiset(sink_rows(sink)) == multiset(sent)


def test_a_watched_flow_stopped_at_latest_reads_what_was_there_and_ends(worker, dirs):
    sink = dirs.out / "sink"
    sent = []
    for n in range(3):
        sent += drop(dirs.data, f"part-{n:03d}.csv", range(n * 100, n * 100 + 100))
    flow = watched(dirs, stop={"at": "latest"})

    with Beat():
        run = flow_start(flow=flow)
        drop(dirs.data, "part-late.csv", range(1000, 1100))  # after the run started: not read
        run = wait_for_run(run, timeout=120)

    assert run.status == "succeeded", run.message
    assert multiset(sink_rows(sink)) == multiset(sent)
    assert run.records_read == len(sent)


def test_a_file_renamed_into_place_after_a_newer_one_is_still_read(worker, dirs):
    sink = dirs.out / "sink"
    early = dirs.data / ".part-early.csv.tmp"
    sent = write_csv(early, range(0, 100))  # written first, renamed into place last
    os.utime(early, ns=(early.stat().st_mtime_ns - 60 * 10**9,) * 2)  # a minute older
    flow = watched(dirs)

    with Beat():
        run = flow_start(flow=flow)
        sent_late = drop(dirs.data, "part-late.csv", range(100, 200))
        wait_until(
            lambda: multiset(sink_rows(sink)) == multiset(sent_late),
            120,
            lambda: f"{len(sink_rows(sink))} rows in the sink ({note(run)})",
        )
        os.rename(early, dirs.data / "part-early.csv")
        wait_until(
            lambda: multiset(sink_rows(sink)) == multiset(sent + sent_late),
            120,
            lambda: f"the older file was not read: {len(sink_rows(sink))} rows in the sink ({note(run)})",
        )
        flow_stop(flow=flow)
