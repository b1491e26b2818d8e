"""Files that change under a run: discovery remembers each file, a reader reads only what
was discovered and fails a split whose file is no longer that one."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from connectors.files.enumerator import StaticFileEnumerator
from connectors.files.reader import FileSplitReader
from connectors.files.split import MAX_SPLIT_ID, WHOLE_FILE, FileSplit, FileSplitSerializer
from source_support.errors import SplitFailed
from source_support.formats import CsvFormat
from source_support.reader_base import SourceReaderBase
from source_support.registry import Environment
from source_support.schema import parse_ddl
from tests.source_support.fakes import RecordingContext, RecordingReaderContext

SCHEMA = parse_ddl("id BIGINT, sensor STRING, temperature DOUBLE")
HEADER = b"id,sensor,temperature\n"


def rows(ids) -> bytes:
    return b"".join(f"{i},s{i % 3},{i}.5\n".encode() for i in ids)


def discover(path: Path, *, split_size: int = 1 << 20) -> list[FileSplit]:
    env = Environment(allowed_roots=(path.parent.resolve(),), base_dir=path.parent)
    context = RecordingContext()
    StaticFileEnumerator(
        context, pattern=str(path), split_size=split_size, splittable=True, env=env, state=None
    ).start()
    return list(context.pending)


def reader(batch_size: int = 10) -> SourceReaderBase[FileSplit]:
    fmt = CsvFormat(schema=SCHEMA, header=True)
    return SourceReaderBase(RecordingReaderContext(), FileSplitReader(fmt), batch_size=batch_size)


def ids(batches) -> list[int]:
    return [i for b in batches for i in b.records.column("id").to_pylist()]


def read_all(source_reader) -> list:
    batches = []
    while source_reader.has_splits():
        batches.append(source_reader.poll())
    return batches


@pytest.fixture()
def csv(tmp_path) -> Path:
    path = tmp_path / "a.csv"
    path.write_bytes(HEADER + rows(range(30)))
    return path


def test_discovery_records_size_mtime_inode_and_device(csv):
    (split,) = discover(csv)

    info = os.stat(csv)
    assert (split.size, split.mtime_ns, split.inode, split.device) == (
        info.st_size,
        info.st_mtime_ns,
        info.st_ino,
        info.st_dev,
    )
    assert split.end == info.st_size  # not WHOLE_FILE: records after it are not read


def test_the_identity_survives_the_serializer_and_old_payloads_still_load(csv):
    (split,) = discover(csv)
    serializer = FileSplitSerializer()

    assert serializer.deserialize(serializer.serialize(split)) == split
    old = {"path": str(csv), "start": 0, "end": WHOLE_FILE, "position": 0, "compressed": False}
    assert serializer.deserialize(old) == FileSplit(str(csv), 0, WHOLE_FILE, 0)
    assert serializer.serialize(serializer.deserialize(old)) == old


def test_an_unchanged_file_is_read_whole_also_when_reopened_at_a_checkpoint(csv):
    (split,) = discover(csv)
    first = reader()
    first.add_splits([split])
    head = first.poll()
    first.close()

    second = reader()  # a new slice: the file is opened again at the checkpoint
    second.add_splits([split.at(head.end.position)])

    assert ids([head, *read_all(second)]) == list(range(30))


def test_a_file_appended_to_before_it_is_opened_fails_its_split_naming_the_change(csv):
    (split,) = discover(csv)
    size = csv.stat().st_size
    with open(csv, "ab") as f:
        f.write(rows(range(30, 32)))
    source_reader = reader()
    source_reader.add_splits([split])

    with pytest.raises(SplitFailed) as failed:
        source_reader.poll()

    assert failed.value.split_id == split.split_id
    message = str(failed.value)
    assert message.startswith(f"{csv} changed while it was read: ")
    assert f"size {size} -> {csv.stat().st_size}" in message
    assert message.endswith("re-run the flow once the file is complete")


def test_a_file_appended_to_while_its_split_is_read_fails_when_the_split_ends(csv):
    # The writer finishes a half-written last line and goes on: what was read cannot be trusted.
    csv.write_bytes(HEADER + rows(range(30)) + b"30,s0,3")
    (split,) = discover(csv)
    source_reader = reader()
    source_reader.add_splits([split])
    head = source_reader.poll()
    with open(csv, "ab") as f:
        f.write(b"0.5\n" + rows(range(31, 40)))

    with pytest.raises(SplitFailed, match=r"a.csv changed while it was read: size \d+ -> \d+"):
        read_all(source_reader)
    assert ids([head]) == list(range(10))


def test_a_file_replaced_with_mv_fails_the_split_that_opens_it_next(csv, tmp_path):
    (split,) = discover(csv)
    first = reader()
    first.add_splits([split])
    head = first.poll()
    first.close()
    new = tmp_path / "a.csv.new"
    new.write_bytes(HEADER + rows(range(100, 130)))
    os.replace(new, csv)  # same size, another inode

    second = reader()
    second.add_splits([split.at(head.end.position)])

    with pytest.raises(SplitFailed, match="a.csv changed while it was read: replaced by another file"):
        second.poll()


def test_ranges_of_a_replaced_file_opened_after_the_replacement_fail(tmp_path, csv):
    csv.write_bytes(HEADER + rows(range(300)))
    splits = discover(csv, split_size=1000)
    assert len(splits) > 2
    source_reader = reader(batch_size=1000)
    source_reader.add_splits(splits)
    first = source_reader.poll()
    assert first.finished
    new = tmp_path / "a.csv.new"
    new.write_bytes(HEADER + rows(range(1000, 1300)))
    os.replace(new, csv)

    with pytest.raises(SplitFailed, match="replaced by another file") as failed:
        source_reader.poll()
    assert failed.value.split_id == splits[1].split_id


def test_a_file_rewritten_in_place_with_the_same_size_fails_by_its_mtime(csv):
    (split,) = discover(csv)
    content = csv.read_bytes()
    csv.write_bytes(content.replace(b"1,s1,1.5", b"1,s1,9.5"))
    os.utime(csv, ns=(split.mtime_ns + 1_000_000_000, split.mtime_ns + 1_000_000_000))
    source_reader = reader()
    source_reader.add_splits([split])

    with pytest.raises(SplitFailed, match="a.csv changed while it was read: modified "):
        source_reader.poll()


def test_a_truncated_file_fails_its_split(csv):
    (split,) = discover(csv)
    csv.write_bytes(HEADER + rows(range(5)))
    source_reader = reader()
    source_reader.add_splits([split])

    with pytest.raises(SplitFailed, match=r"size \d+ -> \d+"):
        source_reader.poll()


def test_a_failed_split_leaves_no_file_open(csv):
    (split,) = discover(csv)
    with open(csv, "ab") as f:
        f.write(rows(range(30, 31)))
    split_reader = FileSplitReader(CsvFormat(schema=SCHEMA, header=True))

    with pytest.raises(SplitFailed):
        split_reader.read_batch(split, 10)
    assert split_reader.open == {}


def test_a_split_saved_before_identities_were_recorded_reads_without_checks(csv):
    split = FileSplit(str(csv), 0, WHOLE_FILE, 0)
    with open(csv, "ab") as f:
        f.write(rows(range(30, 35)))
    source_reader = reader()
    source_reader.add_splits([split])

    assert ids(read_all(source_reader)) == list(range(35))


# Paths longer than the database keeps as a split id (Split.split_id, 1024 characters).


def test_a_short_path_keeps_its_readable_split_id(csv):
    assert FileSplit(str(csv), 100, 200, 100).split_id == f"{csv}@100"


def test_a_path_longer_than_the_split_id_column_gets_a_short_unique_id():
    deep = "/data/" + "/".join(["d" * 250] * 10)  # 2,500 characters, under PATH_MAX
    ids_ = {FileSplit(f"{deep}/{name}.csv", start, 0, 0).split_id for name in "ab" for start in (0, 64)}

    assert len(ids_) == 4
    assert all(len(split_id) <= MAX_SPLIT_ID for split_id in ids_)
    assert all(split_id.endswith(("/a.csv@0", "/b.csv@0", "/a.csv@64", "/b.csv@64")) for split_id in ids_)
