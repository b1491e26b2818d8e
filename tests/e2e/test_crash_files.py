"""Readers of a combined split (many small files) and of one gzip file killed with SIGKILL
mid-split: another worker resumes at the checkpoint, and the sink holds exactly the rows sent.

Real ``celery -A dataflow worker`` and ``celery -A dataflow beat`` processes against the
test's PostgreSQL and Redis (``tests/e2e/test_crash.py`` does the same with whole files).
"""

from __future__ import annotations

import gzip

import pytest

from connectors.files.split import group_location
from dataflow.models import Assignment, Split
from dataflow.services.flows import flow_start
from tests.e2e.test_crash import _wait_for_progress, _worker_holding_a_split
from tests.factories import DataFlowFactory
from tests.helpers import (
    committed_overlaps_and_gaps,
    live,
    multiset,
    read_parquet_rows,
    wait_for_run,
    write_csv,
)

pytestmark = pytest.mark.django_db(transaction=True)


def _kill_mid_split_and_finish(run, fleet, sent):
    _wait_for_progress(run, len(sent) // 4, fleet)
    victim = _worker_holding_a_split(run, fleet)
    fleet.kill(victim)
    killed_at = live(run)
    run = wait_for_run(run, timeout=240)
    survivor = "w2" if victim == "w1" else "w1"
    assert run.status == "succeeded", run.message + fleet.log(survivor)[-3000:]
    assert killed_at < len(sent)
    return run


def test_a_combined_split_resumes_in_the_file_it_stopped_in(fleet, dirs):
    sent = []
    for i in range(1200):
        sent += write_csv(dirs.data / f"f{i:05d}.csv", range(i * 25, (i + 1) * 25))
    flow = DataFlowFactory(parallelism=2, batch_size=100, sink_path=str(dirs.out / "sink"))
    fleet.beat()
    fleet.worker("w1")
    fleet.worker("w2")
    run = flow_start(flow=flow)

    run = _kill_mid_split_and_finish(run, fleet, sent)

    assert multiset(read_parquet_rows(dirs.out / "sink")) == multiset(sent)
    assert run.records_read == len(sent)
    assert committed_overlaps_and_gaps(run) == []
    splits = list(Split.objects.filter(run=run).values_list("split_id", flat=True))
    assert len(splits) == 2 and all("+" in s for s in splits)  # 600 files each
    # The killed reader's split was taken over at its checkpoint, past its first file.
    expired = Assignment.objects.filter(split__run=run, outcome="expired").values_list("split_id", flat=True)
    resumed = Assignment.objects.filter(split_id__in=list(expired), start_position__gt=0).values_list(
        "start_position", flat=True
    )
    assert any(group_location(position)[0] > 0 for position in resumed)


def test_a_gzip_split_resumes_at_its_uncompressed_checkpoint(fleet, dirs):
    sent = write_csv(dirs.root / "plain.csv", range(300_000))
    with open(dirs.root / "plain.csv", "rb") as plain, gzip.open(dirs.data / "all.csv.gz", "wb") as packed:
        packed.write(plain.read())
    flow = DataFlowFactory(parallelism=2, batch_size=1000, sink_path=str(dirs.out / "sink"))
    fleet.beat()
    fleet.worker("w1")
    fleet.worker("w2")
    run = flow_start(flow=flow)

    run = _kill_mid_split_and_finish(run, fleet, sent)

    assert multiset(read_parquet_rows(dirs.out / "sink")) == multiset(sent)
    assert run.records_read == len(sent)
    assert committed_overlaps_and_gaps(run) == []
    expired = Assignment.objects.filter(split__run=run, outcome="expired").values_list("split_id", flat=True)
    assert Assignment.objects.filter(split_id__in=list(expired), start_position__gt=0).exists()
