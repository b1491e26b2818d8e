"""Small files packed into combined splits (Spark's getFilePartitions), read whole and
parsed together, resumable at any committed position."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from connectors.files.enumerator import files_with_stats, pack_files
from connectors.files.reader import FileSplitReader
from connectors.files.source import FileSource
from connectors.files.split import (
    FileSplit,
    FileSplitSerializer,
    combined_split,
    group_location,
    group_position,
)
from source_support.errors import SplitFailed
from source_support.formats import CsvFormat
from source_support.reader_base import SourceReaderBase
from source_support.schema import parse_ddl
from tests.source_support.fakes import RecordingReaderContext

SCHEMA = parse_ddl("id BIGINT, sensor STRING, temperature DOUBLE")
HEADER = b"id,sensor,temperature\n"


def small_files(data: Path, count: int, *, per_file: int = 1, subdirs: int = 1) -> list[Path]:
    paths = []
    for i in range(count):
        folder = data / f"d{i % subdirs}"
        folder.mkdir(exist_ok=True)
        path = folder / f"f{i:05d}.csv"
        ids = range(i * per_file, (i + 1) * per_file)
        path.write_bytes(HEADER + b"".join(f"{k},s{k % 3},{k}.5\n".encode() for k in ids))
        paths.append(path)
    return paths


def group_of(data: Path, env) -> FileSplit:
    return combined_split(files_with_stats(str(data / "**" / "*.csv"), env))


def reader(*, batch_size: int = 1000, fails_split: bool = False) -> SourceReaderBase[FileSplit]:
    fmt = CsvFormat(schema=SCHEMA, header=True)
    split_reader = FileSplitReader(fmt, first_bad_record_only=fails_split)
    return SourceReaderBase(RecordingReaderContext(), split_reader, batch_size=batch_size)


def drain(source_reader) -> list:
    batches = []
    while source_reader.has_splits():
        batches.append(source_reader.poll())
        assert len(batches) < 10_000
    return batches


def ids_of(batches) -> list[int]:
    return [i for b in batches for i in b.records.column("id").to_pylist()]


def test_small_files_are_packed_as_spark_packs_them(data, env):
    small_files(data, 100)  # 58 or 59 bytes each
    files = files_with_stats(str(data / "**" / "*.csv"), env)
    size = files[0][1].st_size

    splits = pack_files(files, split_size=10 * (size + 1000), open_cost=1000, splittable=True, parallelism=2)

    # A split holds files while their sizes plus the open cost fit: 10 files each.
    assert [len(s.group) for s in splits if s.group] == [10] * 10
    assert sorted(p for s in splits for p in (s.group.path(i) for i in range(len(s.group)))) == sorted(
        p for p, _ in files
    )


def test_parallelism_caps_a_split_at_its_share_of_the_files(data, env):
    small_files(data, 100)
    files = files_with_stats(str(data / "**" / "*.csv"), env)

    splits = pack_files(files, split_size=64 << 20, open_cost=1000, splittable=True, parallelism=4)

    assert len(splits) == 4  # maxSplitBytes = total cost / parallelism
    assert sum(len(s.group) for s in splits) == 100


def test_no_open_cost_and_large_files_keep_one_split_per_file_or_range(data, env):
    small_files(data, 3)
    (data / "big.csv").write_bytes(HEADER + b"1,a,1.0\n" * 5000)
    files = files_with_stats(str(data / "**" / "*.csv"), env)

    unpacked = pack_files(files, split_size=1 << 20, open_cost=0, splittable=True, parallelism=2)
    packed = pack_files(files, split_size=10_000, open_cost=100, splittable=True, parallelism=1)

    assert [s.group for s in unpacked] == [None] * 4
    assert [(s.path.endswith("big.csv"), s.start) for s in packed if s.group is None] == [
        (True, start) for start in range(0, 40_022, 10_000)
    ]
    assert [len(s.group) for s in packed if s.group] == [3]


def test_a_combined_split_reads_every_record_once_in_path_order_one_batch_per_block(data, env):
    small_files(data, 250, subdirs=3)
    split = group_of(data, env)

    batches = drain(_given(reader(batch_size=100), split))

    assert [b.records.num_rows for b in batches] == [100, 100, 50]
    expected = [int(p.stem[1:]) for p in sorted((data).rglob("*.csv"))]
    assert ids_of(batches) == expected
    assert batches[-1].finished and batches[-1].end.position == split.end


def test_a_batch_may_end_inside_a_file_and_resuming_there_loses_and_repeats_nothing(data, env):
    small_files(data, 7, per_file=5)
    split = group_of(data, env)
    first = reader(batch_size=12)
    _given(first, split)
    head = [first.poll(), first.poll()]
    index, offset = group_location(head[-1].end.position)
    assert (index, offset) == (4, len(HEADER) + sum(len(f"{k},s{k % 3},{k}.5\n") for k in range(20, 24)))

    # A reader killed here: another resumes the serialized split at the committed position.
    payload = FileSplitSerializer().serialize(split)
    resumed = FileSplitSerializer().deserialize(payload).at(head[-1].end.position)
    rest = drain(_given(reader(batch_size=12), resumed))

    assert ids_of(head) + ids_of(rest) == list(range(35))


def test_files_with_headers_in_another_order_are_parsed_apart(data, env):
    (data / "a.csv").write_bytes(HEADER + b"1,s1,1.5\n")
    (data / "b.csv").write_bytes(b"temperature,id,sensor\n2.5,2,s2\n")
    (data / "c.csv").write_bytes(b"temperature,id,sensor\n3.5,3,s3")  # no newline at the end
    (data / "d.csv").write_bytes(b"\xef\xbb\xbf" + HEADER + b"4,s4,4.5\n")
    split = group_of(data, env)

    batches = drain(_given(reader(), split))

    assert [b.records.num_rows for b in batches] == [1, 2, 1]
    rows = [r for b in batches for r in b.records.to_pylist()]
    assert rows == [{"id": i, "sensor": f"s{i}", "temperature": i + 0.5} for i in range(1, 5)]


def test_a_file_that_changed_since_discovery_fails_its_split_naming_it(data, env):
    paths = small_files(data, 5)
    split = group_of(data, env)
    with open(paths[3], "ab") as f:
        f.write(b"99,s0,1.5\n")

    source_reader = _given(reader(batch_size=2), split)
    source_reader.poll()
    with pytest.raises(SplitFailed) as failed:
        drain(source_reader)

    assert str(paths[3]) in str(failed.value) and "changed while it was read" in str(failed.value)
    assert failed.value.split_id == split.split_id


def test_a_bad_record_names_its_file_line_and_byte(data, env):
    paths = small_files(data, 4, per_file=2)
    paths[2].write_bytes(HEADER + b"4,s1,4.5\nfive,s2,5.5\n")
    split = group_of(data, env)
    skipping, failing = reader(), reader(fails_split=True)

    batch = drain(_given(skipping, split))[0]
    first = drain(_given(failing, group_of(data, env)))[0].bad_records[0]

    assert ids_of([batch]) == [0, 1, 2, 3, 4, 6, 7]
    [bad] = batch.bad_records
    assert bad.line == 3 and "five,s2,5.5" in bad.raw
    assert bad.reason.startswith(f"{paths[2]} line 3 (byte {len(HEADER) + 9}): ")
    assert failing.describe(split.split_id, first.position, line=first.line) == (
        f"{paths[2]} line 3 (byte {len(HEADER) + 9})"
    )


def test_a_deleted_file_is_a_bad_record_and_the_others_are_read(data, env):
    paths = small_files(data, 3)
    split = group_of(data, env)
    os.unlink(paths[1])

    [batch] = drain(_given(reader(), split))

    assert ids_of([batch]) == [0, 2]
    assert [b.reason for b in batch.bad_records] == [
        f"{paths[1]}: the file was deleted after it was discovered"
    ]


@pytest.mark.slow
def test_the_split_payload_stays_small(data, env):
    small_files(data, 1000, subdirs=2)
    payload = FileSplitSerializer().serialize(group_of(data, env))

    assert len(repr(payload)) < 60 * 1000  # about 50 bytes a file


def _given(source_reader, split):
    source_reader.add_splits([split])
    return source_reader


def test_a_position_in_a_combined_split_reads_as_file_and_byte_and_back(data, env):
    source = FileSource(
        pattern=str(data / "*.csv"), fmt=CsvFormat(schema=SCHEMA), split_size=100, env=env, batch_size=10
    )
    for position, text in [
        (0, "0"),
        (35, "35"),
        (group_position(3, 35), "3:35"),
        (group_position(1, 0), "1:0"),
    ]:
        assert source.format_position(position) == text
        assert source.parse_position(text) == position
    for bad in ("x", "3:", ":35", "3:35:1", "-5", "1:-1", str(2**40), f"{2**23}:0", "9" * 30):
        with pytest.raises(ValueError, match="file:byte"):
            source.parse_position(bad)
