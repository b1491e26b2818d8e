"""Samples of a run's counters over time, per run and per split, for charts and the API."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db.models import Max
from django.utils import timezone

from dataflow.models import (
    EpochStatus,
    FlowRun,
    MetricSample,
    Split,
    SplitStatus,
    TransformEpoch,
)
from dataflow.services.context import source_for


def metrics_sample(*, run: FlowRun) -> list[MetricSample]:
    """One sample of the run (``split_id`` empty) and of each of its splits that is open or
    moved since the last sample (a finished file is sampled once, not every time): counters,
    lag where the connector can tell, records/s since the previous sample (the run's first
    sample: since the run started), and the
    end-to-end latency of the last committed transform epoch."""
    now = timezone.now()
    source = _source(run)
    splits = list(run.splits.all())
    open_splits = {s.split_id: (s.payload, s.position) for s in splits if s.status != SplitStatus.FINISHED}
    lags = source.split_lags(open_splits) if open_splits else {}
    last_at = MetricSample.objects.filter(run=run).aggregate(at=Max("at"))["at"]
    previous = {m.split_id: m for m in MetricSample.objects.filter(run=run, at=last_at)} if last_at else {}
    samples = [
        _sample(
            run,
            now,
            previous.get(split.split_id),
            split_id=split.split_id,
            records_read=split.records_read,
            bytes_read=split.bytes_read,
            batches=split.batches,
            errors=split.errors_count,
            last_offset=source.format_position(split.position)[:64],
            lag=lags.get(split.split_id),
        )
        for split in splits
        if split.split_id in open_splits or _moved(split, previous.get(split.split_id))
    ]
    known = [lag for lag in lags.values() if lag is not None]
    total = _sample(
        run,
        now,
        previous.get(""),
        records_read=sum(s.records_read for s in splits),
        bytes_read=sum(s.bytes_read for s in splits),
        batches=sum(s.batches for s in splits),
        errors=sum(s.errors_count for s in splits),
        lag=sum(known) if known else None,
        latency_ms=_last_epoch_latency_ms(run),
        first_from=run.started_at,
    )
    MetricSample.objects.bulk_create([*samples, total])
    # A run that reads for months keeps samples for DATAFLOW_RETENTION_DAYS, not forever.
    MetricSample.objects.filter(
        run=run, at__lt=now - timedelta(days=settings.DATAFLOW_RETENTION_DAYS)
    ).delete()
    return [*samples, total]


def _moved(split: Split, previous: MetricSample | None) -> bool:
    return previous is None or previous.records_read != split.records_read


def _sample(
    run: FlowRun, now, previous: MetricSample | None, *, first_from=None, **counters: Any
) -> MetricSample:
    """A sample whose records/s is the rate since ``previous``; with no previous sample, the
    rate since ``first_from`` (the run's start, for the whole run's first sample: what a
    run shorter than one sample interval read per second), else 0."""
    sample = MetricSample(run=run, at=now, **counters)
    base_at, base_records = (previous.at, previous.records_read) if previous is not None else (first_from, 0)
    if base_at is not None:
        seconds = (now - base_at).total_seconds()
        if seconds > 0:
            sample.records_per_s = max(0.0, (sample.records_read - base_records) / seconds)
    return sample


def _last_epoch_latency_ms(run: FlowRun) -> int | None:
    epoch = TransformEpoch.objects.filter(run=run, status=EpochStatus.COMMITTED).order_by("-number").first()
    return epoch.latency_ms if epoch is not None else None


def _source(run: FlowRun):
    return source_for(run)
