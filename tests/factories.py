"""The test-data layer: a factory-boy factory for every row a test builds.

A flow is made as its users make one: the spec built from the declarations below goes
through ``flow_apply``, so every flow a test builds is one the services accept (the
traits are held to ``flow_spec_validate`` in tests/test_factories.py). A name already
taken is refused rather than updated, as a factory promises a new row.

What the engine writes while a flow runs (runs, splits, assignments, samples, dead
letters, checkpoints, landed batches, webhook deliveries) is written straight to the
database in the shape the engine stores it: for the pages, the API and the services that
only read such rows. No reader runs and no Redis key is set for them; a test whose run
must move starts it with ``flow_start``.

Paths follow the allowed roots of the moment: with the ``dirs`` fixture, a flow reads
``dirs.data`` and writes ``dirs.out/<name>``.
"""

from __future__ import annotations

import math
from datetime import timedelta
from pathlib import Path

import factory
from django.conf import settings
from django.contrib.auth.models import Group, Permission, User
from django.utils import timezone
from factory.django import DjangoModelFactory
from rest_framework.authtoken.models import Token

from dataflow.models import (
    Assignment,
    Checkpoint,
    Connection,
    DataFlow,
    DeadLetter,
    FlowRun,
    FlowStatus,
    LandedBatch,
    MetricSample,
    RunStatus,
    Split,
    SplitStatus,
    WebhookDelivery,
)
from dataflow.redis_client import redis_url
from dataflow.services.connections import connection_save
from dataflow.services.flows import flow_apply
from dataflow.services.specs import flow_spec_of, flow_spec_validate
from source_support.registry import source_output_schema
from source_support.schema import parse_ddl, to_ddl
from tests.helpers import SCHEMA

#: The password of every user the factories make.
PASSWORD = "a-test-password"
#: The model permissions of a user who may do anything to flows through the API.
ALL_FLOW_PERMS = ("add_dataflow", "change_dataflow", "delete_dataflow")


class UserFactory(DjangoModelFactory):
    """A user who logs in with ``PASSWORD``, with the model permissions named in ``perms``
    (all three of ``ALL_FLOW_PERMS`` unless told otherwise). A username taken already
    gives that user."""

    class Meta:
        model = User
        django_get_or_create = ("username",)
        skip_postgeneration_save = True

    username = factory.Sequence(lambda n: f"user{n}")
    password = factory.django.Password(PASSWORD)

    @factory.post_generation
    def perms(self, create, extracted):
        if not create:
            return
        codenames = ALL_FLOW_PERMS if extracted is None else extracted
        self.user_permissions.set(
            Permission.objects.filter(codename__in=codenames, content_type__app_label="dataflow")
        )


class GroupFactory(DjangoModelFactory):
    class Meta:
        model = Group
        django_get_or_create = ("name",)

    name = factory.Sequence(lambda n: f"team-{n}")


class TokenFactory(DjangoModelFactory):
    class Meta:
        model = Token

    user = factory.SubFactory(UserFactory)


class ConnectionFactory(DjangoModelFactory):
    """A redis connection made through ``connection_save``, to the tests' Redis by default
    (the deployment's own: its ``key_patterns`` must keep off the deployment's keys),
    granted to ``users`` and ``groups``."""

    class Meta:
        model = Connection

    name = factory.Sequence(lambda n: f"redis-{n}")
    type = "redis"
    url = factory.LazyFunction(redis_url)
    key_patterns = factory.LazyFunction(lambda: ["t-*"])
    users = factory.LazyFunction(list)
    groups = factory.LazyFunction(list)

    @classmethod
    def _create(cls, model_class, **fields):
        return connection_save(**fields)


def _root(index: int) -> Path:
    return Path(settings.DATAFLOW_ALLOWED_ROOTS[index])


def _stream_source(flow) -> dict:
    """A redis_streams source over ``flow.streams``, at ``flow.stream_url`` if given (else
    the deployment's Redis). A user who is not staff reaches Redis
    only through a connection granted to them (``services.connections``): such an owner is
    granted one to the tests' Redis, bound to the flow's streams. The address policy
    refuses that loopback address unless the test allows it, as a deployment allows a
    private server: ``settings.DATAFLOW_ALLOWED_INTERNAL_ADDRESSES = ["127.0.0.1"]``."""
    source = {"type": "redis_streams", "streams": flow.streams}
    if flow.stream_url is not None:
        source["url"] = flow.stream_url
    elif flow.owner is not None and not flow.owner.is_staff:
        granted = ConnectionFactory(
            name=f"{flow.name}-redis", key_patterns=[flow.streams], users=[flow.owner]
        )
        source["connection"] = granted.name
    return source


class DataFlowFactory(DjangoModelFactory):
    """A flow applied through ``flow_apply``: a CSV files source at ``source_path`` (the
    first allowed root), a files sink of ``sink_type`` (Parquet) at ``sink_path``
    (``<last root>/<name>``), the columns of ``tests.helpers.SCHEMA`` and ``sql``.
    ``owner`` None is the operator's flow (as from a TOML file). ``status`` is set after
    the apply (no spec holds it).

    Traits: ``stream`` (an unbounded flow: Redis streams ``streams``, ``<name>:*`` unless
    told, at ``stream_url`` if given, read as fields), ``sequence`` (the numbers below
    ``count`` in ``splits`` ranges, made by the source itself), ``running`` (a run in progress,
    the flow running), ``with_history`` (two past runs, one succeeded three hours ago and
    one failed two hours ago), ``with_dead_letters`` (three dead letters of the latest
    run; a finished run is made if there is none).
    """

    class Meta:
        model = DataFlow

    class Params:
        source_path = factory.LazyFunction(lambda: str(_root(0)))
        sink_path = factory.LazyAttribute(lambda flow: str(_root(-1) / flow.name))
        schema = SCHEMA
        sql = "SELECT * FROM source"
        sink_type = "parquet"
        streams = factory.LazyAttribute(lambda flow: f"{flow.name}:*")
        stream_url = None
        stream = factory.Trait(
            source=factory.LazyAttribute(_stream_source),
            format=factory.LazyAttribute(lambda flow: {"type": "fields", "schema": flow.schema}),
        )
        count = 1000
        splits = 10
        sequence = factory.Trait(
            source=factory.LazyAttribute(
                lambda flow: {"type": "sequence", "count": flow.count, "splits": flow.splits}
            ),
            format=None,
        )
        running = factory.Trait(status=FlowStatus.RUNNING, active_run=True)
        with_history = factory.Trait(past_runs=True)
        with_dead_letters = factory.Trait(dead_letters=3)

    name = factory.Sequence(lambda n: f"flow-{n}")
    owner = None
    description = ""
    parallelism = 4
    batch_size = 1000
    poll_interval_ms = 50
    status = FlowStatus.IDLE
    source = factory.LazyAttribute(lambda flow: {"type": "files", "path": flow.source_path})
    format = factory.LazyAttribute(lambda flow: {"type": "csv", "schema": flow.schema})
    transform = factory.LazyAttribute(lambda flow: {"sql": flow.sql})
    sink = factory.LazyAttribute(lambda flow: {"type": flow.sink_type, "path": flow.sink_path})
    stop = None
    schedule = None
    notify = None
    expect = None
    # Set by the traits: the rows made after the flow, in the order a flow makes them.
    past_runs = False
    active_run = False
    dead_letters = 0

    @classmethod
    def _create(
        cls,
        model_class,
        *,
        owner,
        status,
        source,
        format,
        transform,
        sink,
        stop,
        schedule,
        notify,
        expect,
        past_runs,
        active_run,
        dead_letters,
        **flow_table,
    ):
        doc = {"flow": flow_table, "source": source, "format": format, "transform": transform, "sink": sink}
        for section, table in (
            ("stop", stop),
            ("schedule", schedule),
            ("notify", notify),
            ("expect", expect),
        ):
            if table:
                doc[section] = table
        flow, created = flow_apply(spec=doc, owner=owner)
        if not created:
            raise ValueError(f"a flow named {flow.name!r} exists already; a factory makes new ones")
        if status != flow.status:
            DataFlow.objects.filter(pk=flow.pk).update(status=status)
            flow.status = status
        if past_runs:
            FlowRunFactory(
                flow=flow,
                records_read=1_250_000,
                rows_written=1_250_000,
                started_at=timezone.now() - timedelta(hours=3),
                took=timedelta(minutes=14, seconds=17),
            )
            FlowRunFactory(
                flow=flow,
                failed=True,
                records_read=310_442,
                message="split /srv/data/orders/2024-02.csv@0 failed at byte 18,874,368: "
                "the file changed while it was read; re-run the flow once the file is complete",
                started_at=timezone.now() - timedelta(hours=2),
                took=timedelta(minutes=6, seconds=17),
            )
        if active_run:
            FlowRunFactory(flow=flow, running=True)
        if dead_letters:
            run = flow.runs.first() or FlowRunFactory(flow=flow)
            DeadLetterFactory.create_batch(dead_letters, run=run)
        return flow


def _run_schema(run) -> str:
    """The schema a run starts with when the flow gives one (``flows._resolve_schema``)."""
    flow = run.flow
    if "schema" not in flow.format_options:
        return ""
    schema = parse_ddl(flow.format_options["schema"])
    return to_ddl(source_output_schema(flow.source_type, flow.source_config, schema))


class FlowRunFactory(DjangoModelFactory):
    """A run as ``flow_start`` stores it (the flow's spec validated again, its schema),
    ended now. ``started_at`` backdates it; ``took`` says how long it ran (from
    ``started_at``, else back from its end, or from now while it runs). Traits:
    ``running`` (reading, not ended), ``failed``, ``stopped``."""

    class Meta:
        model = FlowRun

    class Params:
        running = factory.Trait(status=RunStatus.READING, finished_at=None)
        failed = factory.Trait(status=RunStatus.FAILED, message="split failed: line 3: bad record")
        stopped = factory.Trait(status=RunStatus.STOPPED, message="stopped by request")

    flow = factory.SubFactory(DataFlowFactory)
    spec = factory.LazyAttribute(lambda run: flow_spec_validate(flow_spec_of(run.flow)))
    schema_ddl = factory.LazyAttribute(_run_schema)
    status = RunStatus.SUCCEEDED
    finished_at = factory.LazyFunction(timezone.now)
    started_at = None
    took = None

    @classmethod
    def _create(cls, model_class, *, started_at, took, **fields):
        run = super()._create(model_class, **fields)
        if started_at is None and took is None:
            return run
        # started_at is auto_now_add: only an update after the insert moves it.
        ended = run.finished_at is not None
        if started_at is None:
            started_at = (run.finished_at if ended else timezone.now()) - took
        elif ended and took is not None:
            run.finished_at = started_at + took
        run.started_at = started_at
        FlowRun.objects.filter(pk=run.pk).update(started_at=run.started_at, finished_at=run.finished_at)
        return run


class SplitFactory(DjangoModelFactory):
    """A byte range ``[start, end)`` of the file at ``path``, as the files source saves its
    splits, assigned to a reader."""

    class Meta:
        model = Split

    class Params:
        path = factory.Sequence(lambda n: f"/srv/data/orders/part-{n}.csv")
        start = 0
        end = 64 * 1024 * 1024

    run = factory.SubFactory(FlowRunFactory, running=True)
    split_id = factory.LazyAttribute(lambda split: f"{split.path}@{split.start}")
    payload = factory.LazyAttribute(
        lambda split: {
            "path": split.path,
            "start": split.start,
            "end": split.end,
            "position": split.start,
            "compressed": False,
        }
    )
    position = factory.LazyAttribute(lambda split: split.start)
    status = SplitStatus.ASSIGNED


def splits_bulk(run, count: int, *, start: int = 0) -> list[Split]:
    """``count`` splits of ``run`` (``SplitFactory``'s, numbered from ``start``: ids
    ``part-00000.csv@0``, ... that sort as numbered), each with a lag sample, in two bulk
    statements: a run of thousands of splits in well under a second."""
    splits = Split.objects.bulk_create(
        SplitFactory.build(run=run, path=f"/srv/data/orders/part-{i:05d}.csv")
        for i in range(start, start + count)
    )
    MetricSample.objects.bulk_create(
        MetricSample(run=run, split_id=split.split_id, at=timezone.now(), lag=10) for split in splits
    )
    return splits


class AssignmentFactory(DjangoModelFactory):
    """The lease of a split by the reader that holds it now."""

    class Meta:
        model = Assignment

    split = factory.SubFactory(SplitFactory)
    subtask = 0
    reader_token = factory.Sequence(lambda n: f"token-{n}")
    reader_location = factory.LazyAttribute(
        lambda lease: f"worker-{lease.subtask + 1}:{4100 + lease.subtask}"
    )
    start_position = factory.LazyAttribute(lambda lease: lease.split.position)


class LandedBatchFactory(DjangoModelFactory):
    """A committed batch of ``records`` records of a split, not yet transformed."""

    class Meta:
        model = LandedBatch

    split = factory.SubFactory(SplitFactory)
    start_position = 0
    end_position = factory.LazyAttribute(lambda batch: batch.start_position + batch.records)
    path = factory.LazyAttribute(
        lambda batch: f"/landing/{batch.split.split_id}/{batch.start_position:020d}.parquet"
    )
    records = 1


class MetricSampleFactory(DjangoModelFactory):
    """A sample of a run's counters (``split_id`` empty), taken now unless ``at`` says."""

    class Meta:
        model = MetricSample

    run = factory.SubFactory(FlowRunFactory, running=True)
    split_id = ""
    at = factory.LazyFunction(timezone.now)


class CheckpointFactory(DjangoModelFactory):
    class Meta:
        model = Checkpoint

    run = factory.SubFactory(FlowRunFactory, running=True)
    splits = factory.LazyFunction(dict)


class DeadLetterFactory(DjangoModelFactory):
    """A CSV line of a run that could not be parsed, with where it was and why."""

    class Meta:
        model = DeadLetter

    run = factory.SubFactory(FlowRunFactory)
    flow = factory.LazyAttribute(lambda letter: letter.run.flow)
    split_id = "/srv/data/orders/2024-03.csv@0"
    position = factory.Sequence(lambda n: 1000 + n * 37)
    offset = factory.LazyAttribute(lambda letter: str(letter.position))
    line = factory.Sequence(lambda n: 28 + n)
    raw = "1042,twelve euros,2024-03-02"
    error = "amount: could not convert 'twelve euros' to double"


class WebhookDeliveryFactory(DjangoModelFactory):
    """A call of the flow's webhook about its run's failure, not made yet."""

    class Meta:
        model = WebhookDelivery

    run = factory.SubFactory(FlowRunFactory, failed=True)
    flow = factory.LazyAttribute(lambda delivery: delivery.run.flow)
    event = "run.failed"
    url = "https://hooks.example.com/flows"


def dashboard_flow(*, owner, name: str = "orders-daily", samples: int = 90) -> DataFlow:
    """A flow as the dashboard shows one that has done a bit of everything: running, with
    history and dead letters (the traits), four file splits of its run (finished, midway,
    just started, failed), and ``samples`` run samples 10 s apart ending now (throughput
    that rises and falls, lag that drains)."""
    now = timezone.now()
    flow = DataFlowFactory(
        name=name,
        owner=owner,
        description="Orders from the shop's CSV exports",
        running=True,
        with_history=True,
        with_dead_letters=True,
    )
    run = flow.runs.get(status=RunStatus.READING)
    FlowRun.objects.filter(pk=run.pk).update(
        splits_pending=2, started_at=now - timedelta(seconds=10 * samples + 30)
    )

    size = 64 * 1024 * 1024
    SplitFactory(
        run=run,
        path="/srv/data/orders/2024-01.csv",
        status=SplitStatus.FINISHED,
        position=size,
        records_read=412_000,
        bytes_read=size,
    )
    midway = SplitFactory(
        run=run,
        path="/srv/data/orders/2024-02.csv",
        position=size * 62 // 100,
        records_read=255_000,
        bytes_read=size * 62 // 100,
        owner_subtask=1,
    )
    AssignmentFactory(split=midway, subtask=1)
    started = SplitFactory(
        run=run,
        path="/srv/data/orders/2024-03.csv",
        end=size // 2,
        position=size // 16,
        records_read=26_000,
        bytes_read=size // 16,
        errors_count=3,
        owner_subtask=0,
    )
    AssignmentFactory(split=started, subtask=0)
    SplitFactory(
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
    return flow
