"""The landing zone: atomic Parquet files named by split and start position."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from source_support.landing import LandingZone


def table(ids: range) -> pa.Table:
    return pa.table({"id": list(ids), "name": [f"n{i}" for i in ids]})


def files_under(root) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


@pytest.mark.parametrize("fsync", [True, False])
def test_a_landed_batch_is_complete_under_its_final_name(tmp_path, fsync):
    zone = LandingZone(tmp_path, fsync=fsync)
    path = zone.batch_path("run1", "/data/a.csv@0", 0)

    zone.land(path, table(range(1000)))

    assert pq.read_table(path).equals(table(range(1000)))
    assert files_under(tmp_path) == [str(path.relative_to(tmp_path))]


def test_landing_leaves_no_temporary_files(tmp_path):
    zone = LandingZone(tmp_path)

    for start in (0, 100, 200):
        zone.land(zone.batch_path("run1", "split", start), table(range(start, start + 100)))

    names = [p.name for p in tmp_path.rglob("*") if p.is_file()]
    assert sorted(names) == [f"{s:020d}.parquet" for s in (0, 100, 200)]
    assert not [n for n in names if n.startswith(".") or n.endswith(".tmp")]


def test_relanding_the_same_name_overwrites_it_with_the_new_content(tmp_path):
    zone = LandingZone(tmp_path)
    path = zone.batch_path("run1", "split", 500)
    zone.land(path, table(range(10)))

    zone.land(path, table(range(10)))
    zone.land(path, table(range(10)))

    assert pq.read_table(path).equals(table(range(10)))
    assert len(files_under(tmp_path)) == 1


def test_a_rename_that_fails_leaves_no_temporary_file(tmp_path):
    zone = LandingZone(tmp_path)
    path = zone.batch_path("run1", "split", 0)
    # A non-empty directory under the final name makes the rename fail after the write.
    (path / "occupied").mkdir(parents=True)

    with pytest.raises(OSError):
        zone.land(path, table(range(5)))

    assert [p.name for p in path.parent.iterdir()] == [path.name]
    assert files_under(tmp_path) == []


def test_a_failed_relanding_keeps_the_complete_earlier_file(tmp_path):
    zone = LandingZone(tmp_path)
    path = zone.batch_path("run1", "split", 0)
    zone.land(path, table(range(5)))

    with pytest.raises((TypeError, AttributeError)):
        zone.land(path, object())

    assert pq.read_table(path).equals(table(range(5)))
    assert len(files_under(tmp_path)) == 1


def test_batch_path_is_the_same_for_the_same_split_and_start(tmp_path):
    first = LandingZone(tmp_path).batch_path("run1", "/data/a.csv@1048576", 2048)
    again = LandingZone(tmp_path).batch_path("run1", "/data/a.csv@1048576", 2048)

    assert first == again
    assert first.name == "00000000000000002048.parquet"
    assert first.parent.parent == tmp_path / "run-run1"


def test_batch_path_differs_by_split_start_and_run(tmp_path):
    zone = LandingZone(tmp_path)

    paths = {
        zone.batch_path("run1", "/data/a.csv@0", 0),
        zone.batch_path("run1", "/data/a.csv@0", 10),
        zone.batch_path("run1", "/data/b.csv@0", 0),
        zone.batch_path("run2", "/data/a.csv@0", 0),
    }

    assert len(paths) == 4


def test_batch_paths_of_one_split_sort_by_start_position(tmp_path):
    zone = LandingZone(tmp_path)
    starts = [0, 9, 10, 99_999, 1_000_000_000]

    paths = [zone.batch_path("run1", "split", s) for s in starts]

    assert sorted(paths) == paths
    assert len({p.parent for p in paths}) == 1


def test_batch_path_of_a_split_id_with_slashes_stays_inside_the_run_dir(tmp_path):
    zone = LandingZone(tmp_path)

    path = zone.batch_path("run1", "../../etc/passwd@0", 0)

    assert zone.run_dir("run1") in path.parents
    assert len(path.relative_to(zone.run_dir("run1")).parts) == 2


def test_discard_run_removes_only_that_run(tmp_path):
    zone = LandingZone(tmp_path)
    zone.land(zone.batch_path("run1", "split", 0), table(range(3)))
    kept = zone.batch_path("run2", "split", 0)
    zone.land(kept, table(range(3)))

    zone.discard_run("run1")
    zone.discard_run("never-ran")

    assert not zone.run_dir("run1").exists()
    assert files_under(tmp_path) == [str(kept.relative_to(tmp_path))]
