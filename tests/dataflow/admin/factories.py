"""Rows the admin's read-only pages show: runs, splits, dead letters and assignments of a
flow, written directly (their pages only read them)."""

from __future__ import annotations

import factory
from factory.django import DjangoModelFactory

from dataflow.models import Assignment, DeadLetter, FlowRun, RunStatus, Split, SplitStatus


class FlowRunFactory(DjangoModelFactory):
    class Meta:
        model = FlowRun

    status = RunStatus.SUCCEEDED
    spec = factory.LazyAttribute(lambda run: {"name": run.flow.name})


class SplitFactory(DjangoModelFactory):
    """A byte range of a file, as the files source writes its splits."""

    class Meta:
        model = Split

    split_id = factory.Sequence(lambda n: f"/data/part-{n}.csv@0")
    payload = factory.LazyAttribute(
        lambda split: {"path": split.split_id.split("@")[0], "start": 0, "end": 1000, "position": 0}
    )
    position = 0
    status = SplitStatus.ASSIGNED


class DeadLetterFactory(DjangoModelFactory):
    class Meta:
        model = DeadLetter

    flow = factory.LazyAttribute(lambda letter: letter.run.flow)
    split_id = "/data/part-0.csv@0"
    position = factory.Sequence(int)
    offset = factory.LazyAttribute(lambda letter: str(letter.position))
    raw = "1,a,not-a-number"
    error = "temperature: not a double"


class AssignmentFactory(DjangoModelFactory):
    class Meta:
        model = Assignment

    subtask = 0
    reader_token = factory.Sequence(lambda n: f"token-{n}")
    start_position = 0
