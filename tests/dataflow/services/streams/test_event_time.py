"""Event times of landed batches (from Parquet footers) and the watermark of a run."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dataflow.services.streams.event_time import (
    BatchTimes,
    SplitClock,
    batch_times,
    rows_before,
    watermark_ms,
    window_floor,
)

T0 = datetime(2024, 5, 1, tzinfo=UTC)
T0_MS = int(T0.timestamp() * 1000)


def landed(tmp_path, values, *, tz="UTC", statistics=True, row_group_size=None) -> str:
    path = str(tmp_path / "batch.parquet")
    table = pa.table({"ts": pa.array(values, pa.timestamp("us", tz=tz)), "n": list(range(len(values)))})
    pq.write_table(table, path, write_statistics=statistics, row_group_size=row_group_size)
    return path


@pytest.mark.parametrize("statistics", [True, False])
def test_batch_times_are_the_floored_milliseconds_of_the_earliest_and_latest_row(tmp_path, statistics):
    values = [
        T0 + timedelta(microseconds=2500),
        None,
        T0 - timedelta(microseconds=1),
        T0 + timedelta(seconds=3),
    ]
    path = landed(tmp_path, values, statistics=statistics, row_group_size=2)

    assert batch_times(path, "ts") == BatchTimes(min_ms=T0_MS - 1, max_ms=T0_MS + 3000, nulls=1)


def test_a_batch_without_event_times_has_none(tmp_path):
    assert batch_times(landed(tmp_path, [None, None]), "ts") == BatchTimes(None, None, 2)
    assert batch_times(landed(tmp_path, []), "ts") == BatchTimes(None, None, 0)


def test_a_timestamp_without_time_zone_counts_as_utc(tmp_path):
    naive = T0.replace(tzinfo=None) + timedelta(seconds=1)

    assert batch_times(landed(tmp_path, [naive], tz=None), "ts").max_ms == T0_MS + 1000


def test_rows_before_a_bound_are_counted_to_the_microsecond(tmp_path):
    values = [T0 - timedelta(microseconds=1), T0, T0 + timedelta(seconds=1), None]

    assert rows_before(landed(tmp_path, values), "ts", T0_MS) == 1


def test_the_watermark_is_the_slowest_live_split_minus_the_delay():
    splits = [SplitClock(5_000, idle=False), SplitClock(9_000, idle=False), SplitClock(1_000, idle=True)]

    assert watermark_ms(splits, delay_ms=500, latest_ms=9_000) == 4_500


def test_a_live_split_that_landed_nothing_yet_holds_the_watermark():
    assert (
        watermark_ms(
            [SplitClock(5_000, idle=False), SplitClock(None, idle=False)], delay_ms=0, latest_ms=5_000
        )
        is None
    )


def test_with_every_split_idle_or_ended_the_watermark_is_the_latest_event_time():
    assert watermark_ms([SplitClock(3_000, idle=True)], delay_ms=1_000, latest_ms=8_000) == 7_000
    assert watermark_ms([], delay_ms=0, latest_ms=8_000) == 8_000
    assert watermark_ms([], delay_ms=0, latest_ms=None) is None


def test_windows_are_aligned_on_the_unix_epoch_as_sparks_are():
    assert window_floor(19_999, 10_000) == 10_000
    assert window_floor(20_000, 10_000) == 20_000
    assert window_floor(-1, 10_000) == -10_000
