"""What a run that fails on its splits says: each failed split's error, then the inputs of
its unread splits that are gone too, each named once. The splits are real rows in
PostgreSQL; the source is the files source's split serializer with a ``missing_inputs``
that calls every input gone (the one connector that looks, S3, is driven end to end by
``tests/e2e/test_s3_missing.py``)."""

from __future__ import annotations

import pytest

from connectors.files.split import FileSplitSerializer
from dataflow.models import PendingSplit, SplitStatus
from dataflow.services.runs import failures
from dataflow.services.runs.failures import failed_run_message
from tests.factories import FlowRunFactory, SplitFactory

pytestmark = pytest.mark.django_db


class EveryInputGone:
    """A source whose unread splits' inputs are all gone (as S3 says of deleted objects)."""

    split_serializer = FileSplitSerializer()

    def __init__(self) -> None:
        self.asked: list[str] = []

    def missing_inputs(self, splits) -> list[str]:
        self.asked += [split.path for split in splits]
        return [split.path for split in splits]


def test_failed_splits_are_named_and_every_unread_input_that_is_gone_once():
    run = FlowRunFactory(running=True)
    SplitFactory(run=run, path="/d/a.csv", status=SplitStatus.FAILED, error="a.csv line 1: gone")
    SplitFactory(run=run, path="/d/b.csv", status=SplitStatus.FINISHED)
    SplitFactory(run=run, path="/d/c.csv", status=SplitStatus.ASSIGNED)
    waiting = SplitFactory.build(run=run, path="/d/d.csv").payload
    PendingSplit.objects.create(run=run, seq=1, payload=waiting)
    # A split handed out while the message is written is read both waiting and assigned.
    PendingSplit.objects.create(run=run, seq=2, payload=SplitFactory.build(run=run, path="/d/c.csv").payload)
    source = EveryInputGone()

    message = failed_run_message(run=run, source=source)

    assert message == "1 split failed: a.csv line 1: gone; not read yet and gone too: /d/c.csv, /d/d.csv"
    assert "/d/b.csv" not in source.asked, "a finished split's input is not looked for"


def test_one_failed_split_and_nothing_gone_is_said_in_a_line():
    run = FlowRunFactory(running=True)
    SplitFactory(run=run, status=SplitStatus.FAILED, error="x.csv line 3: bad")

    class NothingGone(EveryInputGone):
        def missing_inputs(self, splits) -> list[str]:
            return []

    assert failed_run_message(run=run, source=NothingGone()) == "split failed: x.csv line 3: bad"


def test_how_many_failed_beyond_those_named_and_unread_beyond_those_checked_are_counted(monkeypatch):
    monkeypatch.setattr(failures, "MAX_ERRORS_NAMED", 2)
    monkeypatch.setattr(failures, "MAX_UNREAD_CHECKED", 1)
    run = FlowRunFactory(running=True)
    for n in range(3):
        SplitFactory(run=run, path=f"/d/f{n}.csv", status=SplitStatus.FAILED, error=f"f{n}")
    for n in range(3):
        SplitFactory(run=run, path=f"/d/u{n}.csv", status=SplitStatus.ASSIGNED)

    message = failed_run_message(run=run, source=EveryInputGone())

    assert message == (
        "3 splits failed: f0; f1; and 1 more; not read yet and gone too: /d/u0.csv; "
        "2 more unread splits were not checked"
    )
