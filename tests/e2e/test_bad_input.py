"""Bad records, empty inputs and vanished files: clear outcomes, nothing landed is lost."""

from __future__ import annotations

import os

import pytest

from connectors.files.split import group_location
from dataflow.models import DeadLetter, LandedBatch, Split
from tests.helpers import multiset, read_parquet_rows, run_flow, spec, write_csv


def _with_bad_lines(path, good_ids, bad_at: dict[int, str]):
    """A CSV where the line after row index ``k`` is replaced by ``bad_at[k]``."""
    rows, lines = [], ["id,sensor,temperature"]
    for k, i in enumerate(good_ids):
        if k in bad_at:
            lines.append(bad_at[k])
        row = (i, f"s{i % 7}", float(i))
        rows.append(row)
        lines.append(f"{row[0]},{row[1]},{row[2]}")
    path.write_text("\n".join(lines) + "\n")
    return rows


def test_bad_records_go_to_dead_letters_when_skipping(worker, dirs):
    sent = _with_bad_lines(dirs.data / "a.csv", range(3000), {10: "x,s1,1.0", 2500: "7,s1,notanumber"})
    sent += write_csv(dirs.data / "b.csv", range(5000, 6000))
    doc = spec("skip", str(dirs.data), str(dirs.out / "sink"), skip_errors=True, batch_size=400)

    run = run_flow(doc)

    assert run.status == "succeeded", run.message
    assert multiset(read_parquet_rows(dirs.out / "sink")) == multiset(sent)
    assert run.errors_count == 2
    letters = list(DeadLetter.objects.filter(run=run).order_by("position"))
    assert [d.raw for d in letters] == ["x,s1,1.0", "7,s1,notanumber"]
    text = (dirs.data / "a.csv").read_bytes()
    assert [text[d.position : d.position + 8] for d in letters] == [b"x,s1,1.0", b"7,s1,not"]
    assert "notanumber" in letters[1].error


def test_bad_record_without_skipping_fails_the_flow_with_file_and_line(worker, dirs, settings):
    settings.DATAFLOW_KEEP_LANDED = True
    _with_bad_lines(dirs.data / "a.csv", range(3000), {2500: "7,s1,notanumber"})
    doc = spec("strict", str(dirs.data / "a.csv"), str(dirs.out / "sink"), batch_size=1000, parallelism=1)

    run = run_flow(doc)

    assert run.status == "failed"
    assert "a.csv line 2502" in run.message  # header + 2500 rows before it
    assert "notanumber" in run.message
    assert run.flow.status == "failed"
    split = Split.objects.get(run=run)
    assert split.status == "failed" and "line 2502" in split.error
    # The two batches read before the bad one stay landed and committed.
    landed = LandedBatch.objects.filter(split__run=run)
    assert sum(b.records for b in landed) == 2000
    assert all(os.path.exists(b.path) for b in landed)
    assert not (dirs.out / "sink").exists()


def test_a_source_that_matches_nothing_fails_and_keeps_the_previous_sink(worker, dirs):
    write_csv(dirs.data / "a.csv", range(10))
    good = run_flow(spec("typo", str(dirs.data / "*.csv"), str(dirs.out / "sink")))
    assert good.status == "succeeded", good.message
    doc = spec("typo", str(dirs.data / "*.cvs"), str(dirs.out / "sink"))
    del doc["format"]["schema"]

    run = run_flow(doc)

    assert run.status == "failed"
    assert "source.path" in run.message and "*.cvs" in run.message and "matched no file" in run.message
    assert "allow_empty" in run.message
    assert len(read_parquet_rows(dirs.out / "sink")) == 10, "the last good sink is kept"


def test_empty_files_fail_the_run_unless_allow_empty(worker, dirs):
    (dirs.data / "empty.csv").write_text("")
    (dirs.data / "header-only.csv").write_text("id,sensor,temperature\n")
    doc = spec("empties", str(dirs.data), str(dirs.out / "sink"))

    refused = run_flow(doc)
    doc["source"]["allow_empty"] = True
    allowed = run_flow(doc)

    assert refused.status == "failed" and "holds no record" in refused.message
    assert allowed.status == "succeeded", allowed.message
    assert read_parquet_rows(dirs.out / "sink") == []
    assert allowed.rows_written == 0


@pytest.fixture()
def goes_after_discovery(dirs, monkeypatch):
    """goes.csv is listed by discovery and deleted right after, before any reader opens it.

    The deletion must fall between discovery and reading, so discovery is wrapped; all the
    rest runs for real.
    """
    import connectors.files.enumerator as enumerator

    write_csv(dirs.data / "goes.csv", range(100, 200))
    discover = enumerator.StaticFileEnumerator._discover

    def discover_then_delete(self):
        splits = discover(self)
        (dirs.data / "goes.csv").unlink()
        return splits

    monkeypatch.setattr(enumerator.StaticFileEnumerator, "_discover", discover_then_delete)


def test_file_deleted_after_discovery_fails_its_split_clearly(worker, dirs, goes_after_discovery):
    write_csv(dirs.data / "stays.csv", range(100))
    doc = spec("vanish", str(dirs.data), str(dirs.out / "sink"))

    run = run_flow(doc)

    assert run.status == "failed"
    assert "goes.csv" in run.message and "deleted after it was discovered" in run.message


def test_file_deleted_after_discovery_is_a_dead_letter_when_skipping(worker, dirs, goes_after_discovery):
    sent = write_csv(dirs.data / "stays.csv", range(100))
    doc = spec("vanish-skip", str(dirs.data), str(dirs.out / "sink"), skip_errors=True)

    run = run_flow(doc)

    assert run.status == "succeeded", run.message
    assert multiset(read_parquet_rows(dirs.out / "sink")) == multiset(sent)
    assert DeadLetter.objects.get(run=run).error == "the file was deleted after it was discovered"


def test_a_bad_record_in_a_combined_split_names_its_file_and_line(worker, dirs):
    sent = []
    for i in range(300):
        sent += write_csv(dirs.data / f"f{i:03d}.csv", range(i * 3, i * 3 + 3))
    bad_file = dirs.data / "f150.csv"
    bad_file.write_text("id,sensor,temperature\n450,s2,225.0\nfour,s1,1.0\n452,s4,226.0\n")
    sent.remove((451, "s3", 225.5))
    doc = spec("skip-small", str(dirs.data), str(dirs.out / "sink"), skip_errors=True)

    run = run_flow(doc)

    assert run.status == "succeeded", run.message
    assert multiset(read_parquet_rows(dirs.out / "sink")) == multiset(sent)
    assert all("+" in s for s in Split.objects.filter(run=run).values_list("split_id", flat=True))
    [letter] = DeadLetter.objects.filter(run=run)
    assert letter.raw == "four,s1,1.0" and letter.line == 3
    assert letter.error.startswith(f"{bad_file} line 3 (byte 35): ")
    # its offset in the file source's words: file:byte in its split, as the offsets API takes it
    index, byte = group_location(letter.position)
    assert byte == 35 and letter.offset == (f"{index}:35" if index else "35")
