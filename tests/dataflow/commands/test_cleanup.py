"""manage.py cleanup: what ended runs leave behind goes after the retention, dry run first."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from dataflow.models import Assignment, DataFlow, DeadLetter, FlowRun, LandedBatch, Split
from dataflow.services.cleanup import run_landing_dir
from tests.factories import (
    AssignmentFactory,
    DataFlowFactory,
    DeadLetterFactory,
    FlowRunFactory,
    LandedBatchFactory,
    SplitFactory,
)


def _run(flow: DataFlow, status: str, *, days_ago: float | None, landed_bytes: int = 0) -> FlowRun:
    """A run that ended ``days_ago`` (None: still active), with one split, one assignment,
    one dead letter and, if asked, a landed file of ``landed_bytes``."""
    finished = None if days_ago is None else timezone.now() - timedelta(days=days_ago)
    run = FlowRunFactory(flow=flow, status=status, finished_at=finished)
    split = SplitFactory(run=run, status="finished")
    AssignmentFactory(split=split)
    DeadLetterFactory(run=run, split_id=split.split_id)
    if landed_bytes:
        path = run_landing_dir(run) / "0123" / "00000000000000000000.parquet"
        path.parent.mkdir(parents=True)
        path.write_bytes(b"p" * landed_bytes)
        LandedBatchFactory(split=split, path=str(path))
    return run


@pytest.fixture()
def history(dirs):
    """Two flows' runs: what the default retention (7 days) removes and what it keeps."""
    a, b, c, d = (DataFlowFactory(name=name) for name in "abcd")
    runs = {
        "old_stopped": _run(a, "stopped", days_ago=30, landed_bytes=100),  # later runs exist
        "old_failed": _run(a, "failed", days_ago=20, landed_bytes=1000),
        "latest_a": _run(a, "succeeded", days_ago=10, landed_bytes=1),  # row kept, files go
        "old_b": _run(b, "failed", days_ago=9, landed_bytes=5),
        "recent_b": _run(b, "failed", days_ago=2, landed_bytes=7),  # within retention
        "active_b": _run(b, "reading", days_ago=None, landed_bytes=3),
        "latest_stopped": _run(c, "stopped", days_ago=15, landed_bytes=10),  # resumable
        "failed_split": _run(d, "failed", days_ago=30, landed_bytes=20),  # restart --failed
    }
    Split.objects.filter(run=runs["failed_split"]).update(status="failed", error="bad line")
    return runs


def _exists(runs, *names):
    return {name: FlowRun.objects.filter(pk=runs[name].pk).exists() for name in names}


@pytest.mark.django_db
@pytest.mark.slow
def test_cleanup_is_a_dry_run_that_prints_counts_and_bytes(history, capsys):
    call_command("cleanup")

    out = capsys.readouterr().out
    # old_stopped, old_failed, latest_a, old_b: 4 runs' files of 100 + 1000 + 1 + 5 bytes;
    # rows of 3 runs (latest_a keeps its row), each with one split, assignment, dead letter.
    assert "landed files of 4 runs: 4 files, 1106 bytes" in out
    assert "3 runs (3 splits, 3 assignments, 3 dead letters)" in out
    assert "nothing removed" in out
    stopped, failed = history["latest_stopped"].pk, history["failed_split"].pk
    assert f"kept: run {stopped} of c (stopped, can be resumed) holds 1 landed files, 10 bytes" in out
    assert f"kept: run {failed} of d (failed, can be resumed) holds 1 landed files, 20 bytes" in out
    assert FlowRun.objects.count() == 8
    assert all(run_landing_dir(run).exists() for run in history.values())


@pytest.mark.django_db
@pytest.mark.slow
def test_cleanup_apply_removes_old_runs_and_landed_files_but_keeps_what_can_be_needed(history, capsys):
    call_command("cleanup", "--apply")

    assert "removed landed files of 4 runs: 4 files, 1106 bytes" in capsys.readouterr().out
    assert _exists(history, "old_stopped", "old_failed", "old_b") == dict.fromkeys(
        ["old_stopped", "old_failed", "old_b"], False
    )
    kept = ["latest_stopped", "failed_split", "latest_a", "recent_b", "active_b"]
    assert _exists(history, *kept) == dict.fromkeys(kept, True)
    assert not run_landing_dir(history["latest_a"]).exists()
    for name in ("latest_stopped", "failed_split", "recent_b", "active_b"):
        assert run_landing_dir(history[name]).exists(), name
    assert Split.objects.count() == Assignment.objects.count() == DeadLetter.objects.count() == 5
    assert LandedBatch.objects.count() == 5


@pytest.mark.django_db
@pytest.mark.slow
def test_cleanup_older_than_overrides_the_retention(history, capsys):
    call_command("cleanup", "--apply", "--older-than", "25")

    assert "removed landed files of 1 runs: 1 files, 100 bytes" in capsys.readouterr().out
    assert not FlowRun.objects.filter(pk=history["old_stopped"].pk).exists()
    assert FlowRun.objects.count() == 7


@pytest.mark.django_db
def test_a_stopped_run_that_a_later_run_replaced_cannot_be_resumed_and_its_files_go(dirs, capsys):
    flow = DataFlowFactory(name="a")
    stopped = _run(flow, "stopped", days_ago=30, landed_bytes=10)
    _run(flow, "failed", days_ago=20)  # resume now refuses: the latest run did not stop

    call_command("cleanup", "--apply")

    assert "kept:" not in capsys.readouterr().out
    assert not run_landing_dir(stopped).exists()


@pytest.mark.django_db
def test_cleanup_never_removes_through_a_symlink_out_of_the_landing_root(dirs, tmp_path, capsys):
    run = _run(DataFlowFactory(name="a"), "failed", days_ago=30)
    _run(run.flow, "failed", days_ago=29)  # the latest run of the flow
    outside = tmp_path / "precious"
    outside.mkdir()
    (outside / "keep.txt").write_text("keep")
    run_landing_dir(run).symlink_to(outside)

    call_command("cleanup")
    assert "landed files of 0 runs" in capsys.readouterr().out
    call_command("cleanup", "--apply")

    assert (outside / "keep.txt").read_text() == "keep"
    assert not FlowRun.objects.filter(pk=run.pk).exists()
