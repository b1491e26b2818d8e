"""Event time for the streaming transform's windows: what landed batches hold (read from
their Parquet footers) and the watermark of a run (Flink's per-split watermarks).

Times are milliseconds since the Unix epoch, floored: a row's time ``t`` lies before a
whole-millisecond bound ``b`` exactly when ``floor_ms(t) < b``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)


@dataclass(frozen=True)
class BatchTimes:
    """The event times in one landed batch (None: no row has one)."""

    min_ms: int | None
    max_ms: int | None
    #: rows without an event time
    nulls: int


def batch_times(path: str, column: str) -> BatchTimes:
    """The event-time range of a landed Parquet file, from its footer's statistics (read
    from the column itself where a row group has none)."""
    meta = pq.read_metadata(path)
    index = next((i for i in range(meta.num_columns) if meta.schema.column(i).path == column), None)
    if index is None:
        raise KeyError(f"{path} has no column {column!r}")
    lows, highs, nulls = [], [], 0
    for group in range(meta.num_row_groups):
        chunk = meta.row_group(group).column(index)
        stats = chunk.statistics
        if stats is None or stats.null_count is None:
            return _times_from_column(path, column)
        if stats.has_min_max:
            low, high = stats.min, stats.max
            if not (isinstance(low, datetime) and isinstance(high, datetime)):
                return _times_from_column(path, column)
            lows.append(_ms(low))
            highs.append(_ms(high))
        elif stats.null_count != chunk.num_values:
            return _times_from_column(path, column)  # values, but no range of them
        nulls += stats.null_count
    return BatchTimes(min(lows, default=None), max(highs, default=None), nulls)


def rows_before(path: str, column: str, bound_ms: int) -> int:
    """Rows of a landed file whose event time lies before ``bound_ms``."""
    micros = _micros(path, column)
    before = pc.less(micros, pa.scalar(bound_ms * 1000, pa.int64()))
    return len(micros.filter(before))  # a row without a time is dropped: before no bound


def _times_from_column(path: str, column: str) -> BatchTimes:
    micros = _micros(path, column)
    low, high = pc.min_max(micros).values()
    low, high = low.as_py(), high.as_py()
    return BatchTimes(
        None if low is None else low // 1000,
        None if high is None else high // 1000,
        micros.null_count,
    )


def _micros(path: str, column: str) -> pa.ChunkedArray:
    values = pq.read_table(path, columns=[column]).column(column)
    unit_type = pa.timestamp("us", tz=values.type.tz) if pa.types.is_timestamp(values.type) else None
    if unit_type is None:
        raise TypeError(f"column {column!r} of {path} is {values.type}, not a timestamp")
    return values.cast(unit_type, safe=False).cast(pa.int64())


def _ms(value: datetime) -> int:
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)  # TIMESTAMP_NTZ: the session's time zone is UTC
    return (value - _EPOCH) // _MS


@dataclass(frozen=True)
class SplitClock:
    """What the watermark knows of one split that may still land rows."""

    #: the latest event time it landed (None: nothing yet)
    max_ms: int | None
    #: nothing landed for the idle timeout: it does not hold the watermark back
    idle: bool


def watermark_ms(splits: Iterable[SplitClock], *, delay_ms: int, latest_ms: int | None) -> int | None:
    """The run's watermark: the least latest event time among the splits that are not idle,
    minus the delay (a slow split does not make a faster one's rows late, and an idle one
    does not hold the others back); with every split idle or ended, the latest event time
    seen (``latest_ms``) minus the delay. None while a live split has landed nothing yet."""
    live = [s for s in splits if not s.idle]
    latest = [s.max_ms for s in live if s.max_ms is not None]
    if len(latest) < len(live):
        return None
    if latest:
        return min(latest) - delay_ms
    return None if latest_ms is None else latest_ms - delay_ms


def window_floor(time_ms: int, window_ms: int) -> int:
    """The start of the tumbling window (aligned on the Unix epoch, as Spark's) holding ``time_ms``."""
    return time_ms // window_ms * window_ms
