"""StaticFileEnumerator discovery and assignment, and validation of the [source] table."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest

from connectors.files.config import FilesSourceConfig
from connectors.files.enumerator import StaticFileEnumerator, list_files
from connectors.files.split import WHOLE_FILE, FileSplit
from source_support.errors import ConfigError
from source_support.registry import Environment
from tests.source_support.fakes import RecordingContext


def enumerator(
    pattern,
    env: Environment,
    *,
    split_size: int = 1 << 20,
    splittable: bool = True,
    state=None,
    context: RecordingContext | None = None,
) -> StaticFileEnumerator:
    return StaticFileEnumerator(
        context or RecordingContext(),
        pattern=str(pattern),
        split_size=split_size,
        splittable=splittable,
        env=env,
        state=state,
    )


def started(pattern, env: Environment, **kwargs) -> StaticFileEnumerator:
    enum = enumerator(pattern, env, **kwargs)
    enum.start()
    return enum


def write(path: Path, size: int = 10) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x\n" * (size // 2) + b"x" * (size % 2))
    return path


def test_a_directory_means_its_files_sorted_by_path(data, env):
    for name in ("b.csv", "a.csv", "c.json"):
        write(data / name)
    write(data / "sub" / "deeper.csv")

    enum = started(data, env)

    assert [s.path for s in enum.context.pending] == [str(data / n) for n in ("a.csv", "b.csv", "c.json")]
    assert all((s.start, s.end, s.position) == (0, 10, 0) for s in enum.context.pending)


def test_a_glob_selects_matching_files(data, env):
    for name in ("a.csv", "b.csv", "c.json"):
        write(data / name)

    enum = started(data / "*.csv", env)

    assert [s.path for s in enum.context.pending] == [str(data / "a.csv"), str(data / "b.csv")]


def test_a_recursive_glob_finds_files_in_subdirectories(data, env):
    write(data / "top.csv")
    write(data / "2024" / "01" / "deep.csv")

    enum = started(data / "**" / "*.csv", env)

    assert [s.path for s in enum.context.pending] == [
        str(data / "2024" / "01" / "deep.csv"),
        str(data / "top.csv"),
    ]


def test_hidden_and_marker_files_are_skipped(data, env):
    write(data / "part-0.csv")
    write(data / ".part-1.csv.crc")
    write(data / "_SUCCESS")
    write(data / "_temporary.csv")

    enum = started(data, env)

    assert [Path(s.path).name for s in enum.context.pending] == ["part-0.csv"]
    assert enum.files_found == 1


def test_empty_files_are_counted_but_get_no_split(data, env):
    write(data / "empty.csv", size=0)
    write(data / "full.csv")

    enum = started(data, env)

    assert [Path(s.path).name for s in enum.context.pending] == ["full.csv"]
    assert enum.files_found == 2


def test_a_gzip_file_is_one_compressed_split_whatever_its_size(data, env):
    path = data / "big.csv.gz"
    path.write_bytes(gzip.compress(os.urandom(5000)))

    enum = started(data, env, split_size=1000)

    assert [(s.start, s.end, s.position, s.compressed) for s in enum.context.pending] == [
        (0, WHOLE_FILE, 0, True)
    ]


def test_a_large_file_is_cut_into_ranges_of_split_size(data, env):
    path = write(data / "big.csv", size=2500)

    enum = started(data, env, split_size=1000)

    assert [(s.path, s.start, s.end, s.position) for s in enum.context.pending] == [
        (str(path), 0, 1000, 0),
        (str(path), 1000, 2000, 1000),
        (str(path), 2000, 2500, 2000),  # up to the size discovered, not to the end of the file
    ]


def test_a_file_of_exactly_n_split_sizes_has_n_ranges(data, env):
    path = write(data / "exact.csv", size=3000)

    enum = started(data, env, split_size=1000)

    assert [(s.start, s.end) for s in enum.context.pending] == [(0, 1000), (1000, 2000), (2000, 3000)]
    assert all(s.path == str(path) for s in enum.context.pending)


def test_a_file_no_larger_than_split_size_is_one_whole_split(data, env):
    write(data / "small.csv", size=1000)

    enum = started(data, env, split_size=1000)

    assert [(s.start, s.end) for s in enum.context.pending] == [(0, 1000)]


def test_unsplittable_files_are_kept_whole(data, env):
    write(data / "multiline.csv", size=5000)

    enum = started(data, env, split_size=1000, splittable=False)

    assert [(s.start, s.end) for s in enum.context.pending] == [(0, 5000)]


def test_split_requests_are_served_in_order_then_told_no_more(data, env):
    write(data / "a.csv")
    write(data / "b.csv")
    context = RecordingContext()
    enum = started(data, env, context=context)

    enum.handle_split_request(1)
    enum.handle_split_request(0)
    assert context.no_more == []
    enum.handle_split_request(1)
    enum.handle_split_request(0)

    assert [(subtask, Path(s.path).name) for subtask, s in context.assigned] == [(1, "a.csv"), (0, "b.csv")]
    assert context.no_more == [1, 0]
    assert enum.is_exhausted()


def test_pending_count_and_exhaustion_follow_the_queue(data, env):
    write(data / "a.csv")
    enum = enumerator(data, env)

    assert enum.is_exhausted() is False
    enum.start()
    assert (enum.pending_count(), enum.is_exhausted()) == (1, False)
    enum.handle_split_request(0)
    assert (enum.pending_count(), enum.is_exhausted()) == (0, True)


def test_a_source_with_no_files_is_exhausted_at_once(data, env):
    context = RecordingContext()
    enum = started(data, env, context=context)

    enum.handle_split_request(0)

    assert enum.is_exhausted()
    assert context.assigned == []
    assert context.no_more == [0]


def test_splits_added_back_are_assigned_first_at_their_position(data, env):
    write(data / "a.csv")
    write(data / "b.csv")
    context = RecordingContext()
    enum = started(data, env, context=context)
    enum.handle_split_request(0)
    _, taken = context.assigned[0]

    enum.add_splits_back([taken.at(4)], 0)
    enum.handle_split_request(1)

    assert context.assigned[1] == (1, taken.at(4))
    assert [Path(s.path).name for s in enum.context.pending] == ["b.csv"]


def test_a_split_added_back_after_exhaustion_is_served_again(data, env):
    write(data / "a.csv")
    context = RecordingContext()
    enum = started(data, env, context=context)
    enum.handle_split_request(0)
    enum.handle_split_request(0)
    assert enum.is_exhausted()

    enum.add_splits_back([context.assigned[0][1]], 0)
    enum.handle_split_request(1)

    assert enum.is_exhausted() is True
    assert [subtask for subtask, _ in context.assigned] == [0, 1]


def test_snapshot_and_restore_keep_the_queue_without_discovering_again(data, env):
    write(data / "a.csv", size=2500)
    write(data / "b.csv")
    enum = started(data, env, split_size=1000)
    enum.handle_split_request(0)
    enum.add_splits_back([FileSplit(str(data / "a.csv"), 0, 1000, 600)], 0)
    state = enum.snapshot_state()
    write(data / "c.csv")  # arrives after discovery: a bounded source does not see it

    # The backlog is the run's (in the store), not the enumerator's: the context keeps it.
    restored = enumerator(data, env, split_size=1000, state=state, context=enum.context)
    restored.start()

    assert [(Path(s.path).name, s.start, s.position) for s in restored.context.pending] == [
        ("a.csv", 0, 600),
        ("a.csv", 1000, 1000),
        ("a.csv", 2000, 2000),
        ("b.csv", 0, 0),
    ]
    assert restored.pending_count() == 4
    assert restored.files_found == 2
    assert restored.snapshot_state() == state


def test_a_snapshot_before_start_discovers_on_the_next_start(data, env):
    write(data / "a.csv")
    before = enumerator(data, env)
    state = before.snapshot_state()

    restored = enumerator(data, env, state=state, context=before.context)
    restored.start()

    assert [Path(s.path).name for s in restored.context.pending] == ["a.csv"]


def test_a_snapshot_round_trips_through_json(data, env):
    (data / "a.csv.gz").write_bytes(gzip.compress(b"1\n"))
    write(data / "b.csv", size=3000)
    enum = started(data, env, split_size=1000)

    state = json.loads(json.dumps(enum.snapshot_state()))

    assert state == {"discovered": True, "files_found": 2, "pending": 4}
    assert enumerator(data, env, state=state, context=enum.context).pending_count() == 4


def test_a_symlink_leading_outside_the_allowed_roots_is_skipped(tmp_path, data, env):
    outside = tmp_path / "secret"
    outside.mkdir()
    write(outside / "passwords.csv")
    (data / "link.csv").symlink_to(outside / "passwords.csv")
    write(data / "inside.csv")
    (data / "inner-link.csv").symlink_to(data / "inside.csv")

    enum = started(data, env)

    assert [Path(s.path).name for s in enum.context.pending] == ["inner-link.csv", "inside.csv"]


def test_list_files_returns_nothing_for_a_path_that_does_not_exist(data, env):
    assert list_files(str(data / "missing" / "*.csv"), env) == []


# FilesSourceConfig.parse


def test_validate_resolves_a_relative_path_against_the_base_dir(tmp_path, data, env):
    config = FilesSourceConfig.parse({"path": "data/*.csv", "split_size_mb": 0.5}, env)

    assert config.path == str(data / "*.csv") and config.split_size_mb == 0.5


def test_validate_accepts_an_absolute_directory(data, env):
    config = FilesSourceConfig.parse({"path": str(data)}, env)

    assert config.path == str(data)


def test_validate_requires_a_path(env):
    with pytest.raises(ConfigError) as excinfo:
        FilesSourceConfig.parse({}, env)

    assert excinfo.value.field == "source.path"


@pytest.mark.parametrize("path", ["/etc/*.conf", "/etc", "data/../../elsewhere/*.csv", "../*.csv"])
def test_validate_refuses_a_path_outside_the_allowed_roots(env, path):
    with pytest.raises(ConfigError) as excinfo:
        FilesSourceConfig.parse({"path": path}, env)

    assert excinfo.value.field == "source.path"
    assert "outside the allowed roots" in excinfo.value.reason


def test_validate_refuses_a_glob_whose_wildcard_could_reach_outside(tmp_path, env):
    # The part before the first wildcard must itself lie under an allowed root.
    with pytest.raises(ConfigError) as excinfo:
        FilesSourceConfig.parse({"path": str(tmp_path / "*" / "x.csv")}, env)

    assert excinfo.value.field == "source.path"


@pytest.mark.parametrize("size", [0, -1, -0.5])
def test_validate_refuses_a_split_size_that_is_not_positive(data, env, size):
    with pytest.raises(ConfigError) as excinfo:
        FilesSourceConfig.parse({"path": str(data), "split_size_mb": size}, env)

    assert excinfo.value.field == "source.split_size_mb"


@pytest.mark.parametrize("size", ["64", True])
def test_validate_refuses_a_split_size_that_is_not_a_number(data, env, size):
    with pytest.raises(ConfigError) as excinfo:
        FilesSourceConfig.parse({"path": str(data), "split_size_mb": size}, env)

    assert excinfo.value.field == "source.split_size_mb"
    assert excinfo.value.reason.startswith("must be a ")


def test_validate_refuses_an_unknown_field_naming_it(data, env):
    with pytest.raises(ConfigError) as excinfo:
        FilesSourceConfig.parse({"path": str(data), "pattern": "*.csv"}, env)

    assert excinfo.value.field == "source.pattern"
    assert "is not a field of source" in excinfo.value.reason


def test_validate_refuses_a_path_that_is_not_a_string(env):
    with pytest.raises(ConfigError) as excinfo:
        FilesSourceConfig.parse({"path": ["a", "b"]}, env)

    assert excinfo.value.field == "source.path"
