"""Rows the dashboard shows: users, flows, runs, file splits, metric samples, dead letters.

Written straight to the database (no reader runs), so a test sets exactly the state a page
must show; ``flow_with_history`` builds a flow that has done a bit of everything.
"""

from __future__ import annotations

import math
from datetime import timedelta

import factory
from django.contrib.auth import get_user_model
from django.utils import timezone

from dataflow.models import (
    Assignment,
    DataFlow,
    DeadLetter,
    FlowRun,
    FlowStatus,
    MetricSample,
    RunStatus,
    Split,
    SplitStatus,
)

PASSWORD = "a-test-password"


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = get_user_model()
        django_get_or_create = ("username",)

    username = factory.Sequence(lambda n: f"user{n}")
    password = factory.django.Password(PASSWORD)


class DataFlowFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = DataFlow

    name = factory.Sequence(lambda n: f"flow-{n}")
    description = "Orders from the shop's CSV exports"
    source_type = "files"
    source_config = factory.LazyFunction(lambda: {"path": "/srv/data/orders/*.csv"})
    format_type = "csv"
    format_options = factory.LazyFunction(lambda: {"schema": "id BIGINT, amount DOUBLE"})
    transform_sql = "SELECT * FROM source"
    sink_type = "parquet"
    sink_config = factory.LazyFunction(lambda: {"path": "/srv/out/orders"})
    parallelism = 4
    owner = factory.SubFactory(UserFactory)


class FlowRunFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = FlowRun

    flow = factory.SubFactory(DataFlowFactory)
    status = RunStatus.READING


class FileSplitFactory(factory.django.DjangoModelFactory):
    """A byte range of a CSV file, as the files connector saves it."""

    class Meta:
        model = Split

    class Params:
        path = factory.Sequence(lambda n: f"/srv/data/orders/2024-{n % 12 + 1:02d}.csv")
        start = 0
        end = 64 * 1024 * 1024

    run = factory.SubFactory(FlowRunFactory)
    split_id = factory.LazyAttribute(lambda s: f"{s.path}@{s.start}")
    payload = factory.LazyAttribute(
        lambda s: {"path": s.path, "start": s.start, "end": s.end, "position": s.start, "compressed": False}
    )
    position = factory.LazyAttribute(lambda s: s.start)
    status = SplitStatus.ASSIGNED


class AssignmentFactory(factory.django.DjangoModelFactory):
    """The lease of a split by a reader that holds it now."""

    class Meta:
        model = Assignment

    split = factory.SubFactory(FileSplitFactory)
    subtask = 0
    reader_token = factory.Sequence(lambda n: f"token-{n}")
    reader_location = factory.LazyAttribute(lambda a: f"worker-{a.subtask + 1}:{4100 + a.subtask}")
    start_position = factory.LazyAttribute(lambda a: a.split.position)


class MetricSampleFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = MetricSample

    run = factory.SubFactory(FlowRunFactory)
    split_id = ""
    at = factory.LazyFunction(timezone.now)


class DeadLetterFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = DeadLetter

    run = factory.SubFactory(FlowRunFactory)
    flow = factory.LazyAttribute(lambda d: d.run.flow)
    split_id = "/srv/data/orders/2024-03.csv@0"
    position = factory.Sequence(lambda n: 1000 + n * 37)
    offset = factory.LazyAttribute(lambda d: str(d.position))
    line = factory.Sequence(lambda n: 28 + n)
    raw = "1042,twelve euros,2024-03-02"
    error = "amount: could not convert 'twelve euros' to double"


def flow_with_history(*, owner, name: str = "orders-daily", samples: int = 90) -> DataFlow:
    """A running flow with two earlier runs (one succeeded, one failed), four file splits
    (finished, midway, just started, failed), ``samples`` run samples 10 s apart ending now
    (throughput that rises and falls, lag that drains) and three dead letters."""
    now = timezone.now()
    flow = DataFlowFactory(name=name, owner=owner, status=FlowStatus.RUNNING)
    done = FlowRunFactory(
        flow=flow, status=RunStatus.SUCCEEDED, records_read=1_250_000, rows_written=1_250_000
    )
    failed = FlowRunFactory(
        flow=flow,
        status=RunStatus.FAILED,
        records_read=310_442,
        message="split /srv/data/orders/2024-02.csv@0 failed at byte 18,874,368: "
        "the file changed while it was read; re-run the flow once the file is complete",
    )
    run = FlowRunFactory(flow=flow, status=RunStatus.READING, splits_pending=2)
    _backdate(done, started=now - timedelta(hours=3), minutes=14)
    _backdate(failed, started=now - timedelta(hours=2), minutes=6)
    _backdate(run, started=now - timedelta(seconds=10 * samples + 30), minutes=None)

    size = 64 * 1024 * 1024
    FileSplitFactory(
        run=run,
        path="/srv/data/orders/2024-01.csv",
        status=SplitStatus.FINISHED,
        position=size,
        records_read=412_000,
        bytes_read=size,
    )
    midway = FileSplitFactory(
        run=run,
        path="/srv/data/orders/2024-02.csv",
        position=size * 62 // 100,
        records_read=255_000,
        bytes_read=size * 62 // 100,
        owner_subtask=1,
    )
    AssignmentFactory(split=midway, subtask=1)
    started = FileSplitFactory(
        run=run,
        path="/srv/data/orders/2024-03.csv",
        start=0,
        end=size // 2,
        position=size // 16,
        records_read=26_000,
        bytes_read=size // 16,
        errors_count=3,
        owner_subtask=0,
    )
    AssignmentFactory(split=started, subtask=0)
    FileSplitFactory(
        run=run,
        path="/srv/data/orders/2024-04.csv",
        status=SplitStatus.FAILED,
        position=size // 5,
        records_read=80_000,
        bytes_read=size // 5,
        error="line 84,112: expected 3 fields, saw 5",
    )

    records = 0
    for i in range(samples):
        rate = 4200 + 2600 * math.sin(i / 9) + 900 * math.sin(i / 2.3)
        records += int(rate * 10)
        MetricSampleFactory(
            run=run,
            at=now - timedelta(seconds=10 * (samples - 1 - i)),
            records_read=records,
            records_per_s=round(rate, 1),
            lag=int(24_000 + 880_000 * (1 - i / samples) ** 2 + 18_000 * math.sin(i / 4)),
            latency_ms=1800 + (i % 7) * 120,
        )
    for _ in range(3):
        DeadLetterFactory(run=run)
    return flow


def _backdate(run: FlowRun, *, started, minutes: int | None) -> None:
    """Sets a run's times (``started_at`` is set on insert, so only an update can move it)."""
    finished = None if minutes is None else started + timedelta(minutes=minutes, seconds=17)
    FlowRun.objects.filter(pk=run.pk).update(started_at=started, finished_at=finished)
    run.refresh_from_db()
