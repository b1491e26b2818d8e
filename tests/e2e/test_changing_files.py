"""Files that change while a run reads them fail the run naming the file; nothing of two
versions of a file reaches the sink (issue 7, item 2), and a path of any length is read."""

from __future__ import annotations

import os
import threading

import pytest

from dataflow.models import Split
from tests.helpers import multiset, read_parquet_rows, run_flow, spec, write_csv


@pytest.fixture()
def after_first_batch(monkeypatch):
    """Runs ``change`` once, right after a reader fetched its first batch: the change then
    falls mid-run every time. Only the moment is arranged; everything else runs for real
    (worker threads, Redis, PostgreSQL, Spark)."""
    from connectors.files.reader import FileSplitReader

    fetch = FileSplitReader.read_batch
    done = threading.Event()
    pending: list = []

    def fetch_then_change(self, split, max_records):
        batch = fetch(self, split, max_records)
        if pending and not done.is_set():
            done.set()
            pending[0]()
        return batch

    monkeypatch.setattr(FileSplitReader, "read_batch", fetch_then_change)

    def arrange(change) -> threading.Event:
        pending.append(change)
        return done

    return arrange


def test_a_file_replaced_with_mv_mid_run_fails_the_run_even_when_skipping_errors(
    worker, dirs, after_first_batch
):
    source = dirs.data / "a.csv"
    write_csv(source, range(3000))  # ~40 KB: four ranges of 10 KB, read one after the other

    def replace_with_mv():
        write_csv(dirs.root / "a.csv.new", range(100_000, 103_000))
        os.replace(dirs.root / "a.csv.new", source)

    changed = after_first_batch(replace_with_mv)
    doc = spec(
        "replaced", str(source), str(dirs.out / "sink"), skip_errors=True, batch_size=100, parallelism=1
    )
    doc["source"]["split_size_mb"] = 0.01

    run = run_flow(doc)

    assert changed.is_set()
    assert run.status == "failed", run.message
    assert f"{source} changed while it was read: replaced by another file" in run.message
    assert run.message.endswith("re-run the flow once the file is complete")
    assert Split.objects.filter(run=run, status="failed").count() == 1
    assert not (dirs.out / "sink").exists()


def test_a_file_appended_mid_run_fails_the_run_and_its_half_line_is_not_kept(worker, dirs, after_first_batch):
    source = dirs.data / "a.csv"
    write_csv(source, range(3000))
    with open(source, "a") as f:
        f.write("3000,appen")  # a writer is still at it when the run starts
    size = source.stat().st_size

    def finish_writing():
        with open(source, "a") as f:
            f.write("ded,1.5\n3001,s1,2.0\n")

    changed = after_first_batch(finish_writing)
    doc = spec("appended", str(source), str(dirs.out / "sink"), batch_size=100, parallelism=1)

    run = run_flow(doc)

    assert changed.is_set()
    assert run.status == "failed", run.message
    assert f"{source} changed while it was read: size {size} -> {source.stat().st_size}" in run.message
    assert not (dirs.out / "sink").exists()


def test_a_path_longer_than_the_split_id_column_is_read(worker, dirs):
    deep = dirs.data
    for level in range(5):  # 5 x 250 characters: past the 1,024 of Split.split_id
        deep = deep / f"{level}{'d' * 249}"
    deep.mkdir(parents=True)
    sent = write_csv(deep / "a.csv", range(500)) + write_csv(deep / "b.csv", range(500, 600))
    assert len(str(deep / "a.csv")) > 1024

    run = run_flow(spec("deep", str(dirs.data / "**" / "*.csv"), str(dirs.out / "sink")))

    assert run.status == "succeeded", run.message
    assert multiset(read_parquet_rows(dirs.out / "sink")) == multiset(sent)
    assert Split.objects.filter(run=run).count() == 2
