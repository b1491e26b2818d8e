"""A failed file split read again after the user fixed the file (``FileSource.split_to_retry``)."""

from __future__ import annotations

import os

import pytest

from connectors.files.source import FileSource
from connectors.files.split import discovered_split
from source_support.formats import FormatSpec


@pytest.fixture()
def source(data, env) -> FileSource:
    fmt = FormatSpec("csv", {"schema": "id BIGINT"}).build()
    return FileSource(pattern=str(data / "*.csv"), fmt=fmt, split_size=100, env=env, batch_size=10)


def test_the_last_range_of_a_fixed_file_runs_to_its_new_end_from_its_position(source, data):
    path = data / "a.csv"
    path.write_bytes(b"id\n" + b"1\n" * 99)
    whole = discovered_split(str(path), 0, 201, os.stat(path))
    path.write_bytes(b"id\n" + b"1\n" * 50 + b"22\n" + b"1\n" * 48)  # one value fixed, 1 byte longer

    again = source.split_to_retry(whole.at(40))

    info = os.stat(path)
    assert (again.split_id, again.position, again.end) == (whole.split_id, 40, 202)
    assert again.change_in(info) is None, "the reader takes the file as it is now"


def test_a_file_read_in_several_ranges_that_changed_size_is_refused(source, data):
    path = data / "a.csv"
    path.write_bytes(b"id\n" + b"1\n" * 99)
    info = os.stat(path)
    first, last = discovered_split(str(path), 0, 100, info), discovered_split(str(path), 100, 201, info)
    path.write_bytes(b"id\n" + b"1\n" * 100)

    with pytest.raises(ValueError, match=r"changed size \(201 -> 203 bytes\) and is read in several ranges"):
        source.split_to_retry(first.at(10))
    assert source.split_to_retry(last.at(150)).end == 203
