"""RecordBlockReader: byte ranges of plain and gzip files, read as blocks of whole records."""

from __future__ import annotations

import gzip
import random
from pathlib import Path

import pytest

from source_support.formats import CsvFormat, JsonLinesFormat
from source_support.lines import MIN_CHUNK, RecordBlockReader, RecordTooLarge, line_number
from source_support.schema import parse_ddl

WHOLE_FILE = 2**62  # what the files enumerator gives as the end of a file's last range
SCHEMA = parse_ddl("id BIGINT, name STRING")
HEADER = b"id,name\n"


def csv(*, header: bool = False, multiline: bool = False) -> CsvFormat:
    return CsvFormat(schema=SCHEMA, header=header, multiline=multiline)


def make_records(count: int, *, seed: int = 7, newline: bytes = b"\n") -> list[bytes]:
    """Records of varied length, some short enough that many fall in one small range."""
    rng = random.Random(seed)
    return [f"{i},{'x' * rng.randint(0, 40)}".encode() + newline for i in range(count)]


def read_range(
    path: Path,
    fmt,
    *,
    start: int,
    end: int,
    batch: int,
    position: int | None = None,
    compressed: bool = False,
) -> list[tuple[int, bytes, bool]]:
    """Every (position, block, finished) the reader gives for one range, up to finished."""
    reader = RecordBlockReader(
        str(path),
        fmt,
        start=start,
        end=end,
        position=start if position is None else position,
        compressed=compressed,
    )
    blocks = []
    try:
        for _ in range(100_000):
            block = reader.read_block(batch)
            blocks.append(block)
            if block[2]:
                return blocks
        raise AssertionError("the range never finished")
    finally:
        reader.close()


def read_ranges(path: Path, fmt, cuts: list[int], *, batch: int, last_end: int = WHOLE_FILE) -> list[bytes]:
    """Blocks of all ranges [cuts[i], cuts[i+1]), each checked against the file's bytes."""
    data = path.read_bytes()
    blocks = []
    for i, (start, end) in enumerate(zip(cuts, cuts[1:], strict=False)):
        is_last = i == len(cuts) - 2
        for position, block, _ in read_range(
            path, fmt, start=start, end=last_end if is_last else end, batch=batch
        ):
            assert data[position : position + len(block)] == block
            if block:
                assert position >= start, "a range gave a record that starts before it"
                assert position < end or is_last, "a range gave a record that starts after it"
            blocks.append(block)
    return blocks


def random_cuts(size: int, pieces: int, rng: random.Random) -> list[int]:
    inner = rng.sample(range(1, size), min(pieces - 1, size - 1))
    return [0, *sorted(inner), size]


def split_records(blocks: list[bytes]) -> list[bytes]:
    return [line + b"\n" for line in b"".join(blocks).split(b"\n") if line]


@pytest.mark.parametrize("pieces", [1, 2, 3, 5, 17, 100, 400])
@pytest.mark.parametrize("batch", [1, 2, 7, 1000])
def test_ranges_cut_anywhere_give_every_record_once_in_order(tmp_path, pieces, batch):
    records = make_records(300)
    path = tmp_path / "data.csv"
    path.write_bytes(b"".join(records))
    cuts = random_cuts(path.stat().st_size, pieces, random.Random(pieces * 1000 + batch))

    blocks = read_ranges(path, csv(), cuts, batch=batch)

    assert split_records(blocks) == records
    assert all(block.count(b"\n") <= batch for block in blocks)


def test_two_ranges_cut_at_every_byte_give_every_record_once(tmp_path):
    records = make_records(12)
    data = b"".join(records)
    path = tmp_path / "data.csv"
    path.write_bytes(data)

    for cut in range(1, len(data)):
        blocks = read_ranges(path, csv(), [0, cut, len(data)], batch=3)
        assert b"".join(blocks) == data, f"cut at byte {cut}"


def test_last_range_may_end_at_the_file_size_instead_of_whole_file(tmp_path):
    records = make_records(100)
    path = tmp_path / "data.csv"
    path.write_bytes(b"".join(records))
    size = path.stat().st_size
    cuts = random_cuts(size, 9, random.Random(3))

    blocks = read_ranges(path, csv(), cuts, batch=5, last_end=size)

    assert split_records(blocks) == records


@pytest.mark.parametrize("pieces", [1, 2, 4, 50])
@pytest.mark.parametrize("batch", [1, 3, 1000])
def test_a_last_record_without_newline_is_read_once(tmp_path, pieces, batch):
    records = make_records(80)
    data = b"".join(records) + b"80,last"
    path = tmp_path / "data.csv"
    path.write_bytes(data)
    cuts = random_cuts(len(data), pieces, random.Random(pieces + batch))

    blocks = read_ranges(path, csv(), cuts, batch=batch)

    assert b"".join(blocks) == data


def test_a_range_cut_inside_the_last_record_without_newline_reads_it_once(tmp_path):
    data = b"1,a\n2,b\n3,last-record"
    path = tmp_path / "data.csv"
    path.write_bytes(data)

    for cut in range(1, len(data)):
        blocks = read_ranges(path, csv(), [0, cut, len(data)], batch=10)
        assert b"".join(blocks) == data, f"cut at byte {cut}"


@pytest.mark.parametrize("pieces", [1, 2, 5, 60])
def test_the_header_is_skipped_once_wherever_the_ranges_are_cut(tmp_path, pieces):
    records = make_records(150)
    path = tmp_path / "data.csv"
    path.write_bytes(HEADER + b"".join(records))
    cuts = random_cuts(path.stat().st_size, pieces, random.Random(pieces))

    blocks = read_ranges(path, csv(header=True), cuts, batch=4)

    assert split_records(blocks) == records


def test_a_range_ending_inside_the_header_gives_no_records(tmp_path):
    records = make_records(10)
    path = tmp_path / "data.csv"
    path.write_bytes(HEADER + b"".join(records))

    for cut in range(1, len(HEADER) + 1):
        first = read_range(path, csv(header=True), start=0, end=cut, batch=5)
        rest = read_ranges(path, csv(header=True), [cut, path.stat().st_size], batch=5)
        assert b"".join(block for _, block, _ in first) == b"", f"cut at byte {cut}"
        assert split_records(rest) == records, f"cut at byte {cut}"


@pytest.mark.parametrize("pieces", [1, 2, 7, 80])
def test_crlf_records_are_read_whole_wherever_the_ranges_are_cut(tmp_path, pieces):
    records = make_records(120, newline=b"\r\n")
    data = b"".join(records)
    path = tmp_path / "data.csv"
    path.write_bytes(data)
    cuts = random_cuts(len(data), pieces, random.Random(pieces))

    blocks = read_ranges(path, csv(), cuts, batch=6)

    assert b"".join(blocks) == data
    assert all(block.endswith(b"\r\n") for block in blocks if block)
    table, bad = csv().parse(b"".join(blocks), 0)
    assert bad == []
    assert table.column("id").to_pylist() == list(range(120))


@pytest.mark.parametrize("header", [False, True])
@pytest.mark.parametrize("batch", [1, 9, 10_000])
def test_a_gzip_file_is_read_whole_with_uncompressed_positions(tmp_path, header, batch):
    records = make_records(500)
    plain = (HEADER if header else b"") + b"".join(records)
    path = tmp_path / "data.csv.gz"
    path.write_bytes(gzip.compress(plain))

    blocks = read_range(path, csv(header=header), start=0, end=WHOLE_FILE, batch=batch, compressed=True)

    assert split_records([block for _, block, _ in blocks]) == records
    for position, block, _ in blocks:
        assert plain[position : position + len(block)] == block


def test_every_block_ends_at_the_position_the_next_one_starts(tmp_path):
    path = tmp_path / "data.csv"
    path.write_bytes(HEADER + b"".join(make_records(200)))

    blocks = read_range(path, csv(header=True), start=0, end=WHOLE_FILE, batch=13)

    assert blocks[0][0] == len(HEADER)
    for (position, block, _), (next_position, _, _) in zip(blocks, blocks[1:], strict=False):
        assert position + len(block) == next_position
    assert blocks[-1][0] + len(blocks[-1][1]) == path.stat().st_size


def test_reader_position_after_a_block_is_where_the_next_record_starts(tmp_path):
    path = tmp_path / "data.csv"
    path.write_bytes(b"1,a\n22,bb\n333,ccc\n")
    reader = RecordBlockReader(str(path), csv(), start=0, end=WHOLE_FILE, position=0, compressed=False)

    first = reader.read_block(2)
    position_after_first = reader.position
    second = reader.read_block(2)
    reader.close()

    assert first == (0, b"1,a\n22,bb\n", False)
    assert position_after_first == 10
    assert second == (10, b"333,ccc\n", True)


@pytest.mark.parametrize(("start", "end"), [(0, WHOLE_FILE), (0, 2000), (2000, 5000), (5000, WHOLE_FILE)])
@pytest.mark.parametrize("stop_after", [1, 2, 5])
def test_resuming_from_a_checkpoint_gives_the_same_remaining_records(tmp_path, start, end, stop_after):
    path = tmp_path / "data.csv"
    path.write_bytes(HEADER + b"".join(make_records(400)))
    fmt = csv(header=True)
    full = read_range(path, fmt, start=start, end=end, batch=7)
    assert len(full) > stop_after, "the range must be long enough to stop inside it"
    checkpoint = full[stop_after][0]

    resumed = read_range(path, fmt, start=start, end=end, batch=7, position=checkpoint)

    assert b"".join(block for _, block, _ in resumed) == b"".join(block for _, block, _ in full[stop_after:])
    assert resumed[0][0] == checkpoint


def test_resuming_a_gzip_file_from_a_checkpoint_gives_the_same_remaining_records(tmp_path):
    plain = HEADER + b"".join(make_records(600))
    path = tmp_path / "data.csv.gz"
    path.write_bytes(gzip.compress(plain))
    fmt = csv(header=True)
    full = read_range(path, fmt, start=0, end=WHOLE_FILE, batch=50, compressed=True)
    checkpoint = full[4][0]

    resumed = read_range(path, fmt, start=0, end=WHOLE_FILE, batch=50, position=checkpoint, compressed=True)

    assert b"".join(block for _, block, _ in resumed) == plain[checkpoint:]
    assert b"".join(block for _, block, _ in resumed) == b"".join(block for _, block, _ in full[4:])


def test_resuming_at_the_end_of_a_range_finishes_with_no_records(tmp_path):
    path = tmp_path / "data.csv"
    path.write_bytes(b"".join(make_records(50)))
    full = read_range(path, csv(), start=0, end=WHOLE_FILE, batch=10)
    end_position = full[-1][0] + len(full[-1][1])

    resumed = read_range(path, csv(), start=0, end=WHOLE_FILE, batch=10, position=end_position)

    assert resumed == [(end_position, b"", True)]


def test_an_empty_range_finishes_at_once(tmp_path):
    path = tmp_path / "data.csv"
    path.write_bytes(b"".join(make_records(50)))

    blocks = read_range(path, csv(), start=100, end=100, batch=10)

    assert [block for _, block, _ in blocks] == [b""]
    assert blocks[-1][2] is True


def test_multiline_csv_blocks_hold_whole_quoted_records(tmp_path):
    records = [f'{i},"line one\nline ""two"" of {i}"\n'.encode() for i in range(40)]
    path = tmp_path / "data.csv"
    path.write_bytes(b"".join(records))
    fmt = csv(multiline=True)

    blocks = read_range(path, fmt, start=0, end=WHOLE_FILE, batch=3)

    assert b"".join(block for _, block, _ in blocks) == b"".join(records)
    for position, block, _ in blocks:
        table, bad = fmt.parse(block, position)
        assert bad == []
        assert table.num_rows == min(3, 40 - table.column("id")[0].as_py())


def test_jsonl_records_are_read_once_across_ranges(tmp_path):
    records = [f'{{"id": {i}, "name": "{"y" * (i % 13)}"}}\n'.encode() for i in range(200)]
    path = tmp_path / "data.jsonl"
    path.write_bytes(b"".join(records))
    fmt = JsonLinesFormat(SCHEMA)
    cuts = random_cuts(path.stat().st_size, 11, random.Random(11))

    blocks = read_ranges(path, fmt, cuts, batch=8)

    table, bad = fmt.parse(b"".join(blocks), 0)
    assert bad == []
    assert table.column("id").to_pylist() == list(range(200))


def test_reading_a_large_file_keeps_the_buffer_bounded(tmp_path):
    # 50 MB of ~50-byte records; the reader must hold about one block, not the file.
    chunk = b"".join(f"{i},sensor-{i % 7}-{'z' * (i % 20)}\n".encode() for i in range(20_000))
    path = tmp_path / "large.csv"
    with open(path, "wb") as f:
        while f.tell() < 50 << 20:
            f.write(chunk)
    size = path.stat().st_size
    reader = RecordBlockReader(str(path), csv(), start=0, end=WHOLE_FILE, position=0, compressed=False)

    largest_buffer = largest_block = total = 0
    try:
        finished = False
        while not finished:
            _, block, finished = reader.read_block(10_000)
            total += len(block)
            largest_buffer = max(largest_buffer, reader.pending.size)
            largest_block = max(largest_block, len(block))
    finally:
        reader.close()

    assert total == size
    assert largest_block <= 10_000 * 50
    assert largest_buffer <= 4 * MIN_CHUNK, f"buffer grew to {largest_buffer} bytes of a {size}-byte file"


def test_line_number_counts_lines_up_to_a_byte_position(tmp_path):
    data = b"id,name\n1,a\n22,bb\n333,ccc\n"
    path = tmp_path / "data.csv"
    path.write_bytes(data)

    assert line_number(str(path), 0, compressed=False) == 1
    assert line_number(str(path), data.index(b"1,a"), compressed=False) == 2
    assert line_number(str(path), data.index(b"333"), compressed=False) == 4
    assert line_number(str(path), data.index(b"333") + 2, compressed=False) == 4


def test_line_number_counts_uncompressed_lines_of_a_gzip_file(tmp_path):
    data = b"".join(make_records(3000))
    path = tmp_path / "data.csv.gz"
    path.write_bytes(gzip.compress(data))

    position = data.index(b"\n2500,") + 1

    assert line_number(str(path), position, compressed=True) == 2501


def test_line_number_past_the_end_counts_every_line(tmp_path):
    path = tmp_path / "data.csv"
    path.write_bytes(b"a\nb\n")

    assert line_number(str(path), 1000, compressed=False) == 3


class ScannedCsv(CsvFormat):
    """The same CSV, cut into blocks by listing every record end (``record_ends``), the
    path formats whose records may hold newlines take."""

    @property
    def ends_at_every_newline(self) -> bool:
        return False


@pytest.mark.parametrize("seed", range(12))
def test_counting_newlines_cuts_the_blocks_listing_record_ends_cuts(tmp_path, seed, monkeypatch):
    # Small pieces, so that blocks, ranges and reads end inside pieces and across them.
    monkeypatch.setattr("source_support.lines.MIN_CHUNK", 97)
    monkeypatch.setattr("source_support.lines.READ_BYTES", 211)
    rng = random.Random(seed)
    records = make_records(rng.randint(1, 400), seed=seed)
    if rng.random() < 0.3:
        records[rng.randrange(len(records))] = b"\n"  # a blank line
    data = b"".join(records)
    if rng.random() < 0.5:
        data = data.rstrip(b"\n")  # a last record without a newline
    path = tmp_path / "data.csv"
    path.write_bytes(data)
    cuts = sorted({0, *(rng.randrange(1, len(data) + 1) for _ in range(rng.randint(0, 4)))}) + [WHOLE_FILE]
    batch = rng.choice([1, 2, 7, 50, 10_000])

    for start, end in zip(cuts, cuts[1:], strict=False):
        counted = read_range(path, csv(), start=start, end=end, batch=batch)
        listed = read_range(path, ScannedCsv(schema=SCHEMA, header=False), start=start, end=end, batch=batch)
        assert counted == listed
    assert b"".join(read_ranges(path, csv(), cuts, batch=batch)) == data


def test_a_record_too_long_is_found_by_counting_newlines_too(tmp_path, monkeypatch):
    monkeypatch.setattr("source_support.lines.MAX_RECORD_BYTES", 1000)
    path = tmp_path / "data.csv"
    path.write_bytes(b"1,a\n2," + b"x" * 2000 + b"\n3,c\n")

    with pytest.raises(RecordTooLarge, match="line 2"):
        read_range(path, csv(), start=0, end=WHOLE_FILE, batch=10)
