"""Files that keep coming (``watch = true``): ContinuousFileEnumerator over real files, with
the clock and every file's mtime set by the test, and the watch fields of [source]."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from connectors.files import enumerator as enumerator_module
from connectors.files.config import FilesSourceConfig, WatchOptions
from connectors.files.enumerator import ContinuousFileEnumerator, StaticFileEnumerator
from connectors.files.source import FileSource
from source_support.api import Boundedness
from source_support.errors import ConfigError
from source_support.formats import FormatSpec
from source_support.registry import BuildContext, Environment, source_is_unbounded
from source_support.testing import ManualClock
from tests.source_support.fakes import RecordingContext

T0 = 1_700_000_000.0  # the clock's start, in seconds
INTERVAL_S = 10


def write(path: Path, *, at: float, rows: int = 3) -> Path:
    """A file whose mtime is ``at`` (seconds, the test clock's time)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(b"%d\n" % i for i in range(rows)))
    os.utime(path, ns=(int(at * 1e9), int(at * 1e9)))
    return path


class Watch:
    """A watched source's enumerator as the runtime runs it: rebuilt from its JSON state
    at every tick, over one context (the run's backlog and readers)."""

    def __init__(self, pattern: Path, env: Environment, *, stop=None, split_size: int = 1 << 20, **options):
        self.pattern, self.env, self.stop, self.split_size = str(pattern), env, stop or {}, split_size
        self.options = WatchOptions(**{"discovery_interval_ms": INTERVAL_S * 1000, **options})
        self.clock = ManualClock(T0)
        self.context = RecordingContext()
        self.state = None
        self.enumerator = self.tick()

    def tick(self, after_s: float = 0.0) -> ContinuousFileEnumerator:
        """Moves the clock, then rebuilds and starts the enumerator from its saved state."""
        self.clock.advance(after_s)
        enum = ContinuousFileEnumerator(
            self.context,
            pattern=self.pattern,
            split_size=self.split_size,
            splittable=True,
            env=self.env,
            options=self.options,
            stop=self.stop,
            clock=self.clock,
            state=None if self.state is None else json.loads(json.dumps(self.state)),
        )
        enum.start()
        self.state, self.enumerator = enum.snapshot_state(), enum
        return enum

    def request(self, subtask: int) -> None:
        self.enumerator.handle_split_request(subtask)
        self.state = self.enumerator.snapshot_state()

    def queued(self) -> list[str]:
        """Names of the files whose splits wait, head first."""
        return [Path(s.path).name for s in self.context.pending]

    def assigned(self) -> list[tuple[int, str]]:
        return [(subtask, Path(s.path).name) for subtask, s in self.context.assigned]


def test_new_files_are_taken_at_each_discovery_and_each_only_once(data, env):
    write(data / "a.csv", at=T0 - 60)
    watch = Watch(data, env)
    assert watch.queued() == ["a.csv"]

    write(data / "b.csv", at=T0 + 1)
    watch.tick(5)  # the interval is not up: no listing
    assert watch.queued() == ["a.csv"]
    watch.tick(5)
    watch.tick(INTERVAL_S)
    watch.tick(INTERVAL_S)

    assert watch.queued() == ["a.csv", "b.csv"]
    assert watch.enumerator.files_found == 2


def test_new_files_are_queued_oldest_first(data, env):
    write(data / "z.csv", at=T0 - 30)
    write(data / "a.csv", at=T0 - 20)
    write(data / "m.csv", at=T0 - 30)

    watch = Watch(data, env)

    assert watch.queued() == ["m.csv", "z.csv", "a.csv"]  # by mtime, then path


def test_the_state_survives_a_rebuild_through_json_and_nothing_is_taken_twice(data, env):
    for name in ("a.csv", "b.csv"):
        write(data / name, at=T0 - 5)
    watch = Watch(data, env)
    watch.request(0)

    watch.tick(INTERVAL_S)  # a new enumerator from the JSON state lists the files again

    assert watch.assigned() == [(0, "a.csv")]
    assert watch.queued() == ["b.csv"]
    assert (watch.enumerator.files_found, watch.enumerator.pending_count()) == (2, 1)


def test_a_file_still_being_written_waits_until_its_mtime_stands_still(data, env):
    path = write(data / "a.csv", at=T0 - 0.2, rows=2)
    watch = Watch(data, env, discovery_interval_ms=100)
    assert watch.queued() == []

    write(path, at=T0 + 0.5, rows=5)  # the writer goes on
    watch.tick(1.2)  # 0.7 s since the last write: not settled
    assert watch.queued() == []
    watch.tick(0.4)  # 1.1 s since

    assert watch.queued() == ["a.csv"]
    assert [s.end for s in watch.context.pending] == [path.stat().st_size]


def test_a_hidden_file_renamed_into_place_is_taken_at_once(data, env):
    hidden = write(data / ".a.csv.tmp", at=T0 - 3)
    watch = Watch(data, env)
    assert watch.queued() == []

    hidden.rename(data / "a.csv")  # a rename keeps the mtime of the finished file
    watch.tick(INTERVAL_S)

    assert watch.queued() == ["a.csv"]


def test_settle_zero_takes_a_file_as_soon_as_it_is_listed(data, env):
    write(data / "a.csv", at=T0)

    watch = Watch(data, env, settle_ms=0)

    assert watch.queued() == ["a.csv"]


def test_a_reader_that_asked_when_nothing_was_there_gets_the_next_file_unasked(data, env):
    watch = Watch(data, env)
    watch.request(1)
    assert watch.assigned() == [] and watch.state["awaiting"] == [1]

    write(data / "a.csv", at=T0 + 2)
    watch.tick(INTERVAL_S)

    assert watch.assigned() == [(1, "a.csv")]
    assert watch.state["awaiting"] == []
    assert watch.context.no_more == []


def test_waiting_readers_are_served_in_the_order_they_asked(data, env):
    watch = Watch(data, env)
    watch.request(1)
    watch.request(0)
    watch.request(1)  # a reader asks again (the runtime retries): it keeps its place

    write(data / "a.csv", at=T0 + 1)
    write(data / "b.csv", at=T0 + 2)
    watch.tick(INTERVAL_S)

    assert watch.assigned() == [(1, "a.csv"), (0, "b.csv")]


def test_a_waiting_reader_that_has_gone_gets_nothing(data, env):
    watch = Watch(data, env)
    watch.request(1)
    watch.context.parallelism = 1  # reader 1's lease lapsed: only reader 0 is registered

    write(data / "a.csv", at=T0 + 1)
    watch.tick(INTERVAL_S)

    assert watch.assigned() == []
    assert watch.queued() == ["a.csv"]
    assert watch.state["awaiting"] == []


def test_splits_that_come_back_go_first_and_to_a_waiting_reader(data, env):
    write(data / "a.csv", at=T0 - 5)
    write(data / "b.csv", at=T0 - 4)
    watch = Watch(data, env)
    watch.request(0)
    watch.request(0)
    watch.request(1)  # nothing left: reader 1 waits
    (_, a), (_, b) = watch.context.assigned

    watch.enumerator.add_splits_back([a.at(2)], 0)

    assert watch.context.assigned[-1] == (1, a.at(2))
    assert watch.enumerator.awaiting == []


def test_without_a_stop_rule_there_is_never_an_end(data, env):
    watch = Watch(data, env)
    for _ in range(3):
        watch.request(0)
        watch.tick(INTERVAL_S)

    assert watch.context.no_more == []
    assert watch.enumerator.is_exhausted() is False


def test_a_stop_time_takes_files_modified_up_to_it_then_ends(data, env):
    stop = {"kind": "time", "time_ms": int((T0 + 20) * 1000)}
    write(data / "a.csv", at=T0 - 10)
    watch = Watch(data, env, stop=stop)
    watch.request(0)
    watch.request(1)  # waits

    write(data / "b.csv", at=T0 + 19.8)
    write(data / "c.csv", at=T0 + 25)  # after the stop time (or a clock ahead of ours)
    watch.tick(20.5)  # past the time, but b is still settling: not the last discovery
    assert watch.assigned() == [(0, "a.csv")]
    assert watch.enumerator.is_exhausted() is False
    watch.tick(0.6)  # the last discovery: every file modified up to the time has settled
    watch.request(0)
    watch.tick(INTERVAL_S)

    assert watch.assigned() == [(0, "a.csv"), (1, "b.csv")]
    assert watch.context.no_more == [0]
    assert watch.enumerator.is_exhausted()


def test_stop_latest_takes_only_the_files_there_at_the_first_discovery(data, env):
    write(data / "a.csv", at=T0 - 10)
    being_written = write(data / "b.csv", at=T0)
    watch = Watch(data, env, stop={"kind": "latest", "at": "latest"})
    assert watch.queued() == ["a.csv"]

    write(data / "c.csv", at=T0 - 10)  # came later, whatever its mtime
    write(being_written, at=T0 + 0.5, rows=6)
    watch.tick(INTERVAL_S)
    watch.request(0)
    watch.request(0)
    watch.request(0)

    assert watch.assigned() == [(0, "a.csv"), (0, "b.csv")]
    assert watch.context.no_more == [0]
    assert watch.enumerator.is_exhausted()


def test_stop_latest_without_files_ends_at_once(data, env):
    watch = Watch(data, env, stop={"kind": "latest", "at": "latest"})
    watch.request(0)

    assert watch.enumerator.is_exhausted()
    assert watch.context.no_more == [0]


def test_the_state_remembers_only_the_paths_within_the_file_age_window(data, env):
    hour_ms = 3600 * 1000
    for i in range(600):  # one file a minute for ten hours
        write(data / f"part-{i:05d}.csv", at=T0 - 36_000 + 60 * i, rows=1)
    watch = Watch(data, env, max_file_age_ms=hour_ms)

    assert len(watch.queued()) == 600
    assert len(watch.state["seen"]) == 61  # the newest hour, both ends in
    assert len(json.dumps(watch.state)) < 4_000

    watch.tick(INTERVAL_S)

    assert len(watch.queued()) == 600  # none taken again, remembered or not


def test_a_late_file_is_taken_within_the_window_and_not_beyond_it(data, env):
    write(data / "newest.csv", at=T0 - 5)
    watch = Watch(data, env, max_file_age_ms=3600 * 1000)

    write(data / "late.csv", at=T0 - 1800)  # e.g. moved in from elsewhere, mtime kept
    write(data / "too-late.csv", at=T0 - 7200)
    watch.tick(INTERVAL_S)

    assert watch.queued() == ["newest.csv", "late.csv"]


def test_with_no_file_age_files_at_the_newest_mtime_are_still_each_taken_once(data, env):
    write(data / "b.csv", at=T0 - 5)
    watch = Watch(data, env, max_file_age_ms=0)

    write(data / "a.csv", at=T0 - 5)  # same mtime, sorts before b, listed later
    watch.tick(INTERVAL_S)
    watch.tick(INTERVAL_S)

    assert watch.queued() == ["b.csv", "a.csv"]
    assert watch.state["seen"] == {"a.csv": int((T0 - 5) * 1e9), "b.csv": int((T0 - 5) * 1e9)}


def test_a_glob_remembers_paths_below_its_fixed_part(data, env):
    write(data / "2024" / "01" / "a.csv", at=T0 - 5)
    write(data / "2024" / "01" / "a.json", at=T0 - 5)

    watch = Watch(data / "**" / "*.csv", env)

    assert watch.queued() == ["a.csv"]
    assert list(watch.state["seen"]) == ["2024/01/a.csv"]


def test_a_large_new_file_is_cut_into_ranges(data, env):
    write(data / "a.csv", at=T0 - 5, rows=1000)

    watch = Watch(data, env, split_size=1000)

    assert [(s.start, s.end) for s in watch.context.pending] == [
        (0, 1000),
        (1000, 2000),
        (2000, 3000),
        (3000, 3890),
    ]


def test_a_symlink_leading_outside_the_allowed_roots_is_not_taken(tmp_path, data, env):
    outside = write(tmp_path / "secret" / "passwords.csv", at=T0 - 5)
    (data / "link.csv").symlink_to(outside)
    write(data / "inside.csv", at=T0 - 5)

    watch = Watch(data, env)

    assert watch.queued() == ["inside.csv"]


def test_discovery_waits_while_many_splits_are_pending(data, env, monkeypatch):
    monkeypatch.setattr(enumerator_module, "MAX_PENDING_SPLITS", 2)
    write(data / "a.csv", at=T0 - 5)
    write(data / "b.csv", at=T0 - 4)
    watch = Watch(data, env)

    write(data / "c.csv", at=T0 - 3)
    watch.tick(INTERVAL_S)
    assert watch.queued() == ["a.csv", "b.csv"]
    watch.request(0)
    watch.tick(INTERVAL_S)

    assert watch.queued() == ["b.csv", "c.csv"]


# The source and its [source] table


def source(data: Path, env: Environment, stop=None, **table) -> FileSource:
    config = FilesSourceConfig.parse({"path": str(data), **table}, env)
    fmt = FormatSpec("csv", {"schema": "n BIGINT"})
    return FileSource.from_config(config, fmt, BuildContext(env=env, batch_size=10, stop=stop or {}))


def test_a_watched_source_is_unbounded_and_enumerates_continuously(data, env):
    watched = source(data, env, watch=True)

    assert watched.boundedness == Boundedness.CONTINUOUS_UNBOUNDED
    assert isinstance(watched.create_enumerator(RecordingContext()), ContinuousFileEnumerator)
    assert watched.watch == WatchOptions(
        discovery_interval_ms=10_000, settle_ms=1_000, max_file_age_ms=3_600_000
    )
    assert source_is_unbounded("files", {"path": str(data), "watch": True})


def test_without_watch_the_source_stays_bounded(data, env):
    bounded = source(data, env, watch=False)

    assert bounded.boundedness == Boundedness.BOUNDED
    assert isinstance(bounded.create_enumerator(RecordingContext()), StaticFileEnumerator)
    assert not source_is_unbounded("files", {"path": str(data)})


def test_the_watch_fields_are_read_from_the_table(data, env):
    watched = source(data, env, watch=True, discovery_interval_ms=100, settle_ms=0, max_file_age_ms=0)

    assert watched.watch == WatchOptions(discovery_interval_ms=100, settle_ms=0, max_file_age_ms=0)


@pytest.mark.parametrize("name", ["discovery_interval_ms", "settle_ms", "max_file_age_ms"])
def test_a_watch_field_without_watch_is_refused(data, env, name):
    with pytest.raises(ConfigError) as excinfo:
        FilesSourceConfig.parse({"path": str(data), name: 5000}, env)

    assert excinfo.value.field == f"source.{name}"
    assert "watch = true" in excinfo.value.reason


def test_a_stored_unwatched_source_with_the_watch_defaults_parses_again(data, env):
    # Every field is stored, the watch ones at their defaults too: a stored config read
    # back (an exported flow imported again) must be accepted as it is.
    stored = FilesSourceConfig.parse({"path": str(data)}, env).to_dict()

    assert FilesSourceConfig.parse(stored, env).to_dict() == stored


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("discovery_interval_ms", 99),
        ("discovery_interval_ms", 86_400_001),
        ("settle_ms", -1),
        ("settle_ms", 3_600_001),
        ("max_file_age_ms", -1),
    ],
)
def test_a_watch_field_out_of_range_is_refused(data, env, name, value):
    with pytest.raises(ConfigError) as excinfo:
        FilesSourceConfig.parse({"path": str(data), "watch": True, name: value}, env)

    assert excinfo.value.field == f"source.{name}"
    assert excinfo.value.reason.startswith("must be between")


def test_watch_must_be_true_or_false(data, env):
    with pytest.raises(ConfigError) as excinfo:
        FilesSourceConfig.parse({"path": str(data), "watch": "yes"}, env)

    assert excinfo.value.field == "source.watch"


def test_an_entry_id_stop_is_refused_for_files(data, env):
    with pytest.raises(ConfigError) as excinfo:
        source(data, env, stop={"at": "1700000000000-0", "kind": "position"}, watch=True)

    assert excinfo.value.field == "stop.at"
