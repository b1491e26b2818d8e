"""A gzip file gunzipped in a thread ahead of its reader reads as gzip.open reads it."""

from __future__ import annotations

import gzip
import threading

import pytest

from source_support import gunzip
from source_support.gunzip import ReadAheadGzipFile


@pytest.fixture()
def packed(tmp_path, monkeypatch):
    monkeypatch.setattr(gunzip, "CHUNK", 1000)  # many chunks, so the thread runs ahead
    text = b"".join(f"{i},sensor-{i % 7},{i * 0.5}\n".encode() for i in range(20_000))
    path = tmp_path / "a.csv.gz"
    path.write_bytes(gzip.compress(text))
    return path, text


def test_reads_lines_and_blocks_in_order(packed):
    path, text = packed
    with ReadAheadGzipFile(str(path)) as f:
        first = f.readline()
        rest = b"".join(iter(lambda: f.read(7_777), b""))

    assert first + rest == text


def test_seeks_forward_and_back_to_uncompressed_positions(packed):
    path, text = packed
    with ReadAheadGzipFile(str(path)) as f:
        f.read(50)
        assert f.seek(200_000) == 200_000
        ahead = f.read(300)
        f.seek(12)
        back = f.read(40)

    assert (ahead, back) == (text[200_000:200_300], text[12:52])


def test_a_truncated_file_raises_in_the_read_that_reaches_its_end(packed):
    path, _ = packed
    path.write_bytes(path.read_bytes()[:-2000])
    with ReadAheadGzipFile(str(path)) as f, pytest.raises(EOFError):
        while f.read(10_000):
            pass


def test_close_stops_the_thread_while_it_waits_for_room(packed):
    path, _ = packed
    f = ReadAheadGzipFile(str(path))
    f.read(10)
    f.close()

    assert f.closed and not f.thread.is_alive()
    assert "gunzip" not in {t.name for t in threading.enumerate() if t.is_alive()}
