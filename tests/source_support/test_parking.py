"""Open handles parked between a reader's slices (``source_support.parking``), and the files
reader handing a gzip file's open inflater to the next slice of its split."""

from __future__ import annotations

import gzip
import threading

import pyarrow as pa

from connectors.files.reader import PARKED_FILES, FileSplitReader
from connectors.files.split import FileSplit
from source_support.formats import CsvFormat
from source_support.parking import ParkedHandles


def test_a_parked_handle_is_taken_back_once_by_its_key():
    closed = []
    parked = ParkedHandles[str](close=closed.append)
    parked.park(("a", 10), "handle-a")

    assert parked.take(("a", 11)) is None
    assert parked.take(("a", 10)) == "handle-a"
    assert parked.take(("a", 10)) is None
    assert closed == []


def test_the_oldest_is_closed_past_capacity_and_the_rest_after_their_ttl():
    closed, expired = [], threading.Event()

    def close(handle):
        closed.append(handle)
        if handle == "b":
            expired.set()

    parked = ParkedHandles[str](close=close, capacity=1, ttl_s=0.2)
    parked.park("a", "a")
    parked.park("b", "b")

    assert closed == ["a"]
    assert expired.wait(5)
    assert parked.take("b") is None


def _split(path) -> FileSplit:
    stat = path.stat()
    return FileSplit(
        path=str(path),
        start=0,
        end=1 << 40,
        position=0,
        compressed=True,
        size=stat.st_size,
        mtime_ns=stat.st_mtime_ns,
        inode=stat.st_ino,
        device=stat.st_dev,
    )


def test_the_next_slice_of_a_gzip_split_goes_on_in_the_file_the_last_one_left_open(tmp_path):
    path = tmp_path / "rows.csv.gz"
    with gzip.open(path, "wt") as f:
        f.write("id\n" + "".join(f"{i}\n" for i in range(1000)))
    fmt = CsvFormat(schema=pa.schema([("id", pa.int64())]))
    split = _split(path)

    first = FileSplitReader(fmt)
    first.handle_splits_changes([split], [])
    batch = first.read_batch(split, 400)
    opened = first.open[split.split_id]
    split = split.at(batch.end.position)  # committed: the checkpoint moves on
    first.close()

    second = FileSplitReader(fmt)
    second.handle_splits_changes([split], [])
    rest = second.read_batch(split, 10_000)

    assert second.open[split.split_id] is opened  # not reopened and inflated again
    assert batch.records["id"].to_pylist() + rest.records["id"].to_pylist() == list(range(1000))
    second.close()
    PARKED_FILES.clear()
