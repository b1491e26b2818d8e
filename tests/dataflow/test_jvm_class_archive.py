"""The driver JVM's class archive: made once, adopted only when its maker is gone and it is whole."""

from __future__ import annotations

import os
import subprocess
import sys

from dataflow.jvm_class_archive import DYNAMIC_ARCHIVE_MAGIC, JvmClassArchive


def _archive(tmp_path) -> JvmClassArchive:
    jars = tmp_path / "jars"
    jars.mkdir(exist_ok=True)
    (jars / "spark-core.jar").write_bytes(b"")
    return JvmClassArchive(tmp_path / "cache", java="/usr/bin/java", jars_dir=jars)


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def _dump(archive: JvmClassArchive, content: bytes, pid: int) -> None:
    dump = archive.path.with_name(f"{archive.path.stem}.abc.dump")
    dump.write_bytes(content)
    dump.with_name(dump.name + ".pid").write_text(str(pid))


def test_the_first_jvm_makes_the_archive_and_the_next_uses_it_once_its_maker_is_gone(tmp_path):
    first = _archive(tmp_path)
    option = first.java_option()
    assert option.startswith("-XX:ArchiveClassesAtExit=")
    dump = option.partition("=")[2]
    first.launched(os.getpid())  # "the JVM", still running
    assert _archive(tmp_path).java_option() == ""  # no second maker meanwhile

    with open(dump, "wb") as f:
        f.write(DYNAMIC_ARCHIVE_MAGIC + b"rest of the archive")
    first.launched(_dead_pid())

    later = _archive(tmp_path)
    assert later.java_option() == f"-XX:SharedArchiveFile={later.path}"
    assert later.path.read_bytes().startswith(DYNAMIC_ARCHIVE_MAGIC)
    assert sorted(p.name for p in later.directory.iterdir()) == [later.path.name]


def test_a_dump_cut_off_before_its_header_is_removed_and_made_again(tmp_path):
    archive = _archive(tmp_path)
    archive.directory.mkdir(parents=True)
    _dump(archive, b"\0" * 64, _dead_pid())  # HotSpot writes the header last

    assert archive.java_option().startswith("-XX:ArchiveClassesAtExit=")
    assert not archive.path.exists()
    assert not (archive.directory / f"{archive.path.stem}.abc.dump").exists()


def test_an_archive_a_jvm_could_not_start_with_is_discarded(tmp_path):
    archive = _archive(tmp_path)
    archive.directory.mkdir(parents=True)
    archive.path.write_bytes(DYNAMIC_ARCHIVE_MAGIC)
    assert archive.java_option().startswith("-XX:SharedArchiveFile=")

    archive.discard()

    assert not archive.path.exists()
