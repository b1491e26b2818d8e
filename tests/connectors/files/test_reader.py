"""FileSplitReader driven by SourceReaderBase: batches, positions, bad records, lost files."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from connectors.files.config import FilesSourceConfig
from connectors.files.reader import FileSplitReader
from connectors.files.source import FileSource
from connectors.files.split import WHOLE_FILE, FileSplit, FileSplitSerializer
from source_support import lines as lines_module
from source_support.errors import ConfigError, SplitFailed
from source_support.formats import CsvFormat, JsonLinesFormat, validate_format
from source_support.reader_base import SourceReaderBase
from source_support.registry import BuildContext, Environment
from source_support.schema import parse_ddl
from tests.source_support.fakes import RecordingReaderContext

SCHEMA = parse_ddl("id BIGINT, sensor STRING, temperature DOUBLE")
HEADER = b"id,sensor,temperature\n"


def reader(fmt=None, batch_size: int = 10) -> SourceReaderBase[FileSplit]:
    fmt = fmt or CsvFormat(schema=SCHEMA, header=True)
    return SourceReaderBase(RecordingReaderContext(), FileSplitReader(fmt), batch_size=batch_size)


def whole_file(tmp_path, ids, *, batch_size: int = 10) -> tuple[Path, SourceReaderBase[FileSplit]]:
    """The CSV file a.csv of the rows ``ids`` (with its header), and a reader given it as one split."""
    path = tmp_path / "a.csv"
    path.write_bytes(HEADER + rows(ids))
    source_reader = reader(batch_size=batch_size)
    source_reader.add_splits([whole(path)])
    return path, source_reader


def rows(ids) -> bytes:
    return b"".join(f"{i},s{i % 3},{i}.5\n".encode() for i in ids)


def drain(source_reader) -> list:
    batches = []
    while source_reader.has_splits():
        batches.append(source_reader.poll())
        assert len(batches) < 10_000
    return batches


def whole(path: Path, **kwargs) -> FileSplit:
    return FileSplit(str(path), 0, WHOLE_FILE, 0, **kwargs)


def test_poll_returns_none_without_splits():
    source_reader = reader()

    assert source_reader.poll() is None
    assert source_reader.has_splits() is False


def test_batches_start_at_the_split_position_and_end_where_the_next_starts(tmp_path):
    path, source_reader = whole_file(tmp_path, range(25))

    batches = drain(source_reader)

    assert [b.records.num_rows for b in batches] == [10, 10, 5]
    assert batches[0].start.position == 0
    for batch, following in zip(batches, batches[1:], strict=False):
        assert following.start == batch.end
        assert batch.end.position > batch.start.position
        assert batch.finished is False
    assert batches[-1].end.position == path.stat().st_size
    assert batches[-1].finished is True
    assert all(b.split_id == f"{path}@0" and b.start.key == b.split_id for b in batches)


def test_all_rows_of_a_split_are_read_once_in_order(tmp_path):
    _, source_reader = whole_file(tmp_path, range(103), batch_size=7)

    ids = [i for b in drain(source_reader) for i in b.records.column("id").to_pylist()]

    assert ids == list(range(103))


def test_a_finished_split_is_dropped_from_the_snapshot(tmp_path):
    path, source_reader = whole_file(tmp_path, range(15))

    first = source_reader.poll()
    assert source_reader.snapshot_state() == [whole(path).at(first.end.position)]
    last = source_reader.poll()

    assert last.finished is True
    assert source_reader.snapshot_state() == []
    assert source_reader.has_splits() is False
    assert source_reader.poll() is None


def test_splits_are_read_one_after_the_other_in_assignment_order(tmp_path):
    first, second = tmp_path / "b.csv", tmp_path / "a.csv"
    first.write_bytes(HEADER + rows(range(0, 5)))
    second.write_bytes(HEADER + rows(range(5, 10)))
    source_reader = reader(batch_size=3)
    source_reader.add_splits([whole(first), whole(second)])

    batches = drain(source_reader)

    assert [Path(b.split_id.split("@")[0]).name for b in batches] == ["b.csv", "b.csv", "a.csv", "a.csv"]
    assert [i for b in batches for i in b.records.column("id").to_pylist()] == list(range(10))


def test_byte_ranges_of_one_file_read_by_separate_readers_give_every_row_once(tmp_path):
    path = tmp_path / "a.csv"
    path.write_bytes(HEADER + rows(range(500)))
    size = path.stat().st_size
    cuts = [0, 1, 37, 1000, 1001, 4000, size]
    splits = [
        FileSplit(str(path), s, WHOLE_FILE if e == size else e, s)
        for s, e in zip(cuts, cuts[1:], strict=False)
    ]

    ids = []
    for split in splits:
        source_reader = reader(batch_size=50)
        source_reader.add_splits([split])
        for batch in drain(source_reader):
            assert batch.start.position >= split.start
            ids += batch.records.column("id").to_pylist()

    assert ids == list(range(500))


def test_a_split_restored_at_a_checkpoint_reads_only_what_follows(tmp_path):
    _, source_reader = whole_file(tmp_path, range(30), batch_size=12)
    source_reader.poll()
    checkpoint = FileSplitSerializer().serialize(source_reader.snapshot_state()[0])
    source_reader.close()

    restored = reader(batch_size=12)
    restored.add_splits([FileSplitSerializer().deserialize(checkpoint)])
    batches = drain(restored)

    assert batches[0].start.position == checkpoint["position"]
    assert [i for b in batches for i in b.records.column("id").to_pylist()] == list(range(12, 30))


def test_a_gzip_split_reads_every_row(tmp_path):
    path = tmp_path / "a.csv.gz"
    path.write_bytes(gzip.compress(HEADER + rows(range(40))))
    source_reader = reader(batch_size=16)
    source_reader.add_splits([whole(path, compressed=True)])

    batches = drain(source_reader)

    assert [i for b in batches for i in b.records.column("id").to_pylist()] == list(range(40))
    assert batches[-1].end.position == len(HEADER + rows(range(40)))


def test_bad_records_carry_their_byte_position_in_the_file(tmp_path):
    good_before = HEADER + rows(range(5))
    bad_line = b"5,s2,hot\n"
    path = tmp_path / "a.csv"
    path.write_bytes(good_before + bad_line + rows(range(6, 20)) + b"20,s1\n")
    source_reader = reader(batch_size=8)
    source_reader.add_splits([whole(path)])

    batches = drain(source_reader)

    bad = [r for b in batches for r in b.bad_records]
    assert [(r.position, r.raw) for r in bad] == [
        (len(good_before), "5,s2,hot"),
        (path.stat().st_size - len(b"20,s1\n"), "20,s1"),
    ]
    assert "hot" in bad[0].reason
    assert "expected 3 columns" in bad[1].reason
    ids = [i for b in batches for i in b.records.column("id").to_pylist()]
    assert ids == [i for i in range(20) if i != 5]


def test_a_jsonl_split_reports_bad_lines_by_position(tmp_path):
    lines = [b'{"id": 1, "sensor": "a"}\n', b'{"id": oops}\n', b'{"id": 3}\n']
    path = tmp_path / "a.jsonl"
    path.write_bytes(b"".join(lines))
    source_reader = reader(JsonLinesFormat(SCHEMA), batch_size=100)
    source_reader.add_splits([whole(path)])

    (batch,) = drain(source_reader)

    assert batch.records.column("id").to_pylist() == [1, 3]
    assert [(r.position, r.raw) for r in batch.bad_records] == [(len(lines[0]), '{"id": oops}')]


def test_describe_names_the_file_line_and_byte(tmp_path):
    data = HEADER + rows(range(5)) + b"5,s2,hot\n"
    path = tmp_path / "a.csv"
    path.write_bytes(data)
    source_reader = reader(batch_size=3)
    source_reader.add_splits([whole(path)])
    position = data.index(b"5,s2,hot")

    assert source_reader.describe(f"{path}@0", position) == f"{path} line 7 (byte {position})"


def test_describe_counts_lines_of_a_gzip_file_uncompressed(tmp_path):
    data = HEADER + rows(range(100))
    path = tmp_path / "a.csv.gz"
    path.write_bytes(gzip.compress(data))
    source_reader = reader()
    source_reader.add_splits([whole(path, compressed=True)])
    position = data.index(b"\n50,") + 1

    assert source_reader.describe(f"{path}@0", position) == f"{path} line 52 (byte {position})"


def test_describe_of_a_split_no_longer_held_falls_back_to_the_split_id():
    assert reader().describe("gone.csv@0", 12) == "split gone.csv@0 at position 12"


def test_describe_of_a_deleted_file_still_names_the_byte(tmp_path):
    path, source_reader = whole_file(tmp_path, range(3))
    path.unlink()

    assert source_reader.describe(f"{path}@0", 30) == f"{path} at byte 30"


def test_a_file_deleted_before_reading_gives_one_bad_record_and_finishes(tmp_path):
    path = tmp_path / "a.csv"
    path.write_bytes(HEADER + rows(range(3)))
    split = FileSplit(str(path), 0, WHOLE_FILE, 40)
    source_reader = reader()
    source_reader.add_splits([split])
    path.unlink()

    batch = source_reader.poll()

    assert batch.finished is True
    assert batch.records.num_rows == 0
    assert batch.records.schema == SCHEMA
    assert batch.start == batch.end == split.offset
    assert len(batch.bad_records) == 1
    assert batch.bad_records[0].position == 40
    assert "deleted after it was discovered" in batch.bad_records[0].reason
    assert source_reader.has_splits() is False


def test_a_file_deleted_while_open_is_read_to_its_end(tmp_path):
    # An open file stays readable after unlink (POSIX), so no record is lost mid-split.
    path, source_reader = whole_file(tmp_path, range(30))
    source_reader.poll()
    path.unlink()

    batches = drain(source_reader)

    assert all(b.bad_records == [] for b in batches)
    assert batches[-1].finished is True
    assert [i for b in batches for i in b.records.column("id").to_pylist()] == list(range(10, 30))


def test_remove_split_stops_reading_it_and_closes_its_file(tmp_path):
    path = tmp_path / "a.csv"
    path.write_bytes(HEADER + rows(range(30)))
    split_reader = FileSplitReader(CsvFormat(schema=SCHEMA, header=True))
    source_reader = SourceReaderBase(RecordingReaderContext(), split_reader, batch_size=10)
    source_reader.add_splits([whole(path)])
    source_reader.poll()
    block_reader = split_reader.open[f"{path}@0"]

    source_reader.remove_split(f"{path}@0")

    assert source_reader.has_splits() is False
    assert split_reader.open == {}
    assert block_reader.file.closed


def test_close_closes_every_open_file(tmp_path):
    paths = [tmp_path / "a.csv", tmp_path / "b.csv"]
    for path in paths:
        path.write_bytes(HEADER + rows(range(30)))
    split_reader = FileSplitReader(CsvFormat(schema=SCHEMA, header=True))
    files = []
    for path in paths:
        split_reader.read_batch(whole(path), 5)
        files.append(split_reader.open[f"{path}@0"].file)

    split_reader.close()

    assert split_reader.open == {}
    assert all(f.closed for f in files)


def test_fetching_a_split_at_another_position_reopens_it_there(tmp_path):
    data = HEADER + rows(range(20))
    path = tmp_path / "a.csv"
    path.write_bytes(data)
    split_reader = FileSplitReader(CsvFormat(schema=SCHEMA, header=True))
    first = split_reader.read_batch(whole(path), 5)

    rewound = split_reader.read_batch(whole(path).at(len(HEADER)), 5)

    assert rewound.start.position == len(HEADER)
    assert rewound.records.equals(first.records)
    split_reader.close()


def test_no_more_splits_is_remembered():
    source_reader = reader()

    assert source_reader.no_more_splits is False
    source_reader.notify_no_more_splits()

    assert source_reader.no_more_splits is True


@pytest.mark.parametrize(("split_size_mb", "expected"), [(64, 64 << 20), (0.5, 1 << 19), (1e-9, 1)])
def test_file_source_turns_split_size_mb_into_bytes(tmp_path, split_size_mb, expected):
    env = Environment(allowed_roots=(tmp_path,), base_dir=tmp_path)
    source = FileSource.from_config(
        FilesSourceConfig(path=str(tmp_path), split_size_mb=split_size_mb),
        validate_format({"type": "csv", "schema": "id BIGINT"}),
        BuildContext(env=env, batch_size=100),
    )

    assert source.split_size == expected


def test_file_source_infers_the_schema_from_the_first_non_empty_file(tmp_path):
    (tmp_path / "a.csv").write_bytes(b"")
    (tmp_path / "b.csv.gz").write_bytes(gzip.compress(HEADER + rows(range(3))))
    env = Environment(allowed_roots=(tmp_path.resolve(),), base_dir=tmp_path)
    source = FileSource.from_config(
        FilesSourceConfig(path=str(tmp_path)),
        validate_format({"type": "csv"}),
        BuildContext(env=env, batch_size=100),
    )

    assert source.infer_schema() == SCHEMA


def test_file_source_infers_no_schema_without_files(tmp_path):
    env = Environment(allowed_roots=(tmp_path.resolve(),), base_dir=tmp_path)
    source = FileSource.from_config(
        FilesSourceConfig(path=str(tmp_path / "*.csv")),
        validate_format({"type": "jsonl"}),
        BuildContext(env=env, batch_size=1),
    )

    assert source.infer_schema() is None


# Issue 7: columns by header name, bad records located cheaply with their lines, large records


def test_files_with_columns_in_another_order_give_the_same_values(tmp_path):
    (tmp_path / "ab.csv").write_text("id,sensor,temperature\n1,s1,1.5\n")
    (tmp_path / "ba.csv").write_text("temperature,extra,ID,sensor\n1.5,x,1,s1\n")
    # a range that starts mid-file learns the header from the file's first line
    mid = FileSplit(str(tmp_path / "ba.csv"), 30, WHOLE_FILE, 30)
    (tmp_path / "ba.csv").write_text("temperature,extra,ID,sensor\n9.5,y,9,s9\n1.5,x,1,s1\n")

    got = [drain_one(whole(tmp_path / "ab.csv")), drain_one(mid)]

    assert got[0] == got[1] == [{"id": 1, "sensor": "s1", "temperature": 1.5}]


def drain_one(split: FileSplit, fmt=None) -> list[dict]:
    source_reader = reader(fmt)
    source_reader.add_splits([split])
    return [row for batch in drain(source_reader) for row in batch.records.to_pylist()]


def test_a_file_whose_header_lacks_schema_columns_fails_its_split_naming_both(tmp_path):
    (tmp_path / "a.csv").write_text("id,temp\n1,1.5\n")
    source_reader = reader()
    source_reader.add_splits([whole(tmp_path / "a.csv")])

    with pytest.raises(SplitFailed) as failed:
        source_reader.poll()

    assert failed.value.split_id == f"{tmp_path / 'a.csv'}@0"
    assert str(failed.value).startswith(
        f"{tmp_path / 'a.csv'}: its header lacks the columns sensor, temperature"
    )


def test_file_source_check_input_refuses_a_header_without_schema_columns(tmp_path):
    (tmp_path / "good.csv").write_text("sensor,id,temperature\n")
    (tmp_path / "bad.csv").write_text("id,temp\n1,1.5\n")
    fmt = validate_format({"type": "csv", "schema": "id BIGINT, sensor STRING, temperature DOUBLE"})
    env = Environment(allowed_roots=(tmp_path.resolve(),), base_dir=tmp_path)
    source = FileSource.from_config(
        FilesSourceConfig(path=str(tmp_path / "*.csv")), fmt, BuildContext(env=env, batch_size=10)
    )

    with pytest.raises(ConfigError) as refused:
        source.check_input()

    assert refused.value.field == "format.schema"
    assert "bad.csv" in refused.value.reason and "sensor, temperature" in refused.value.reason


def test_bad_records_carry_their_line_across_blocks_and_ranges(tmp_path):
    lines = ["id,sensor,temperature"] + [f"{i},s,{i}.5" for i in range(1, 50)]
    lines[30] = "30,s,warm"
    (tmp_path / "a.csv").write_text("\n".join(lines) + "\n")
    start = len("\n".join(lines[:20])) + 3  # a range that starts inside line 21
    source_reader = reader(batch_size=4)
    source_reader.add_splits([FileSplit(str(tmp_path / "a.csv"), start, WHOLE_FILE, start)])

    bad = [b for batch in drain(source_reader) for b in batch.bad_records]

    assert [(b.line, b.raw) for b in bad] == [(31, "30,s,warm")]
    assert "column 3 'temperature'" in bad[0].reason


def test_describe_names_the_file_of_a_split_that_just_finished(tmp_path):
    (tmp_path / "a.csv").write_text("id,sensor,temperature\n1,s,1.5\n2,s,warm\n")
    source_reader = reader()
    source_reader.add_splits([whole(tmp_path / "a.csv")])

    batch = source_reader.poll()
    first = batch.bad_records[0]

    assert batch.finished and not source_reader.has_splits()
    where = source_reader.describe(batch.split_id, first.position, line=first.line)
    assert where == f"{tmp_path / 'a.csv'} line 3 (byte 30)"


def test_a_split_of_20000_bad_records_stops_at_the_first_when_errors_fail_it(tmp_path, monkeypatch):
    (tmp_path / "a.csv").write_text(
        "id,sensor,temperature\n" + "".join(f"{i},s,hot\n" for i in range(20_000))
    )
    fmt = CsvFormat(schema=SCHEMA, header=True)
    source_reader = SourceReaderBase(
        RecordingReaderContext(), FileSplitReader(fmt, first_bad_record_only=True), batch_size=20_000
    )
    source_reader.add_splits([whole(tmp_path / "a.csv")])
    parses = []
    original = CsvFormat._locate

    def counted(self, *args):
        parses.append(args[0])
        return original(self, *args)

    monkeypatch.setattr(CsvFormat, "_locate", counted)

    batch = source_reader.poll()

    assert [(b.line, b.raw) for b in batch.bad_records] == [(2, "0,s,hot")]
    assert len(parses) == 1


def test_a_4_mb_line_is_read_and_a_longer_one_than_the_limit_fails_naming_its_line(tmp_path, monkeypatch):
    big = "x" * (4 << 20)
    (tmp_path / "a.csv").write_text(f"id,sensor,temperature\n1,{big},1.5\n2,s,2.5\n")
    assert [r["id"] for r in drain_one(whole(tmp_path / "a.csv"))] == [1, 2]

    monkeypatch.setattr(lines_module, "MAX_RECORD_BYTES", 1 << 20)
    source_reader = reader()
    source_reader.add_splits([whole(tmp_path / "a.csv")])
    with pytest.raises(SplitFailed, match=r"a\.csv line 2: a record is longer than 1 MB"):
        source_reader.poll()
