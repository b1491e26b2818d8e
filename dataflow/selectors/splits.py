"""Reads of a run's splits: each split's state, reader, position, counters and lag, and how
much of a split was read where its size is known (a byte range)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db.models import OuterRef, Subquery

from dataflow.models import Assignment, AssignmentOutcome, FlowRun, MetricSample, Split, SplitStatus
from dataflow.services.context import source_for

#: A range that ends here runs to the end of a file whose length is not known up front.
_OPEN_END = 2**62


def split_rows(*, run: FlowRun, limit: int, offset: int = 0) -> list[dict]:
    """``limit`` of the run's splits by id from ``offset``: state, active reader, position
    (also in the source's words, ``offset``), counters, the lag of its latest sample, and
    last error."""
    splits = list(run.splits.order_by("split_id")[offset : offset + limit])
    readers = {
        a.split_id: a
        for a in Assignment.objects.filter(split__in=splits, outcome=AssignmentOutcome.ACTIVE).only(
            "split_id", "subtask", "reader_location"
        )
    }
    latest = MetricSample.objects.filter(run=run, split_id=OuterRef("split_id")).order_by("-at")
    lags = dict(
        run.splits.filter(pk__in=[s.pk for s in splits])
        .annotate(lag=Subquery(latest.values("lag")[:1]))
        .values_list("split_id", "lag")
    )
    format_position = _position_formatter(run)
    rows = []
    for split in splits:
        reader = readers.get(split.pk)
        rows.append(
            {
                "split_id": split.split_id,
                "state": split.status,
                "reader": None
                if reader is None
                else {"subtask": reader.subtask, "location": reader.reader_location},
                "position": split.position,
                "offset": format_position(split.position),
                "records_read": split.records_read,
                "bytes_read": split.bytes_read,
                "errors_count": split.errors_count,
                "lag": lags.get(split.split_id),
                "error": split.error,
            }
        )
    return rows


def _position_formatter(run: FlowRun) -> Callable[[Any], str]:
    """The source's ``format_position``, or ``str`` where the source cannot be built now
    (a config that no longer validates must not break a status page)."""
    try:
        return source_for(run).format_position
    except Exception:  # noqa: BLE001 - a status page shows raw positions instead
        return str


def split_rows_add_progress(*, run: FlowRun, rows: list[dict]) -> None:
    """Sets ``size`` and ``progress`` (``split_share``) on ``split_rows``' rows: ``size``
    where the split's payload is a byte range, None elsewhere."""
    payloads = dict(
        run.splits.filter(split_id__in=[r["split_id"] for r in rows]).values_list("split_id", "payload")
    )
    for row in rows:
        extent = split_byte_range(payloads.get(row["split_id"]))
        row["size"] = None if extent is None else extent[1] - extent[0]
        row["progress"] = _share_read(status=row["state"], position=row["position"], extent=extent)


def split_share(*, split: Split) -> float | None:
    """How much of the split was read, from 0 to 1, where its size is known: a finished
    split is read whole; a split whose payload is a byte range (``start``, ``end``: a
    file's) is read up to its position. None for a split of unknown size (a stream)."""
    return _share_read(status=split.status, position=split.position, extent=split_byte_range(split.payload))


def _share_read(*, status: str, position: Any, extent: tuple[int, int] | None) -> float | None:
    if status == SplitStatus.FINISHED:
        return 1.0
    if extent is None:
        return None
    start, end = extent
    return min(1.0, max(0.0, (position - start) / (end - start)))


def split_byte_range(payload) -> tuple[int, int] | None:
    """(start, end) of a split whose payload is a byte range that positions count in (the
    files connector's); None for any other split (a stream, a compressed file)."""
    if not isinstance(payload, dict) or payload.get("compressed"):
        return None  # a compressed file's positions count uncompressed bytes
    start, end = payload.get("start"), payload.get("end")
    if not isinstance(start, int) or not isinstance(end, int) or not start < end < _OPEN_END:
        return None
    return start, end
