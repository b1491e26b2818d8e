"""A class archive for the Spark driver's JVM, so that it starts seconds sooner.

A JVM that starts Spark loads, parses and verifies some ten thousand classes from Spark's
jars. With HotSpot's dynamic class-data sharing (``-XX:ArchiveClassesAtExit`` once, then
``-XX:SharedArchiveFile``) a later JVM maps them from an archive instead: the bounded
benchmark's plain PySpark script took 10.1-10.6 s without one and 7.3 s with one.

The first driver JVM for a given Java and set of Spark jars writes the archive as it exits,
under a name of its own next to a file that holds its pid. A later launch adopts it (renames
it to the archive's name) once that JVM is gone and the archive's header, which HotSpot
writes last, is complete. Archives live in ``DATAFLOW_SPARK_CLASS_ARCHIVE_DIR`` (shared by
every process of the machine; empty: none is made or used).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import uuid
from pathlib import Path

import psutil

#: The first bytes of a finished dynamic archive (HotSpot's CDS_DYNAMIC_ARCHIVE_MAGIC, little endian).
DYNAMIC_ARCHIVE_MAGIC = bytes.fromhex("a8ab0bf0")


class JvmClassArchive:
    """The archive for the JVM that ``java`` starts with Spark's jars (``jars_dir``) and
    ``class_path`` (user jars), kept in ``directory``."""

    def __init__(self, directory: Path, *, java: str, jars_dir: Path, class_path: str = "") -> None:
        jars = sorted(os.listdir(jars_dir)) if jars_dir.is_dir() else []
        key = hashlib.sha1("\0".join([os.path.realpath(java), str(jars_dir), class_path, *jars]).encode())
        self.directory = directory
        self.path = directory / f"spark-{key.hexdigest()[:16]}.jsa"
        self._dump: Path | None = None

    def java_option(self) -> str:
        """The JVM option for this launch: use the archive if there is one, else make it
        at exit unless another JVM is making it; empty when neither."""
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            busy = self._adopt_finished_dumps()
            if self.path.is_file():
                return f"-XX:SharedArchiveFile={self.path}"
            if busy:
                return ""
            token = uuid.uuid4().hex[:12]
            self._dump = self.path.with_name(f"{self.path.stem}.{token}.dump")
            self._pid_file(self._dump).write_text(str(os.getpid()))
            return f"-XX:ArchiveClassesAtExit={self._dump}"
        except OSError:
            return ""

    def launched(self, jvm_pid: int) -> None:
        """Records the pid of the JVM that makes the archive (it is written when that JVM exits)."""
        if self._dump is not None:
            with contextlib.suppress(OSError):
                self._pid_file(self._dump).write_text(str(jvm_pid))

    def discard(self) -> None:
        """Removes the archive (a JVM could not start with it) and this launch's dump."""
        for path in (self.path, self._dump, self._dump and self._pid_file(self._dump)):
            if path is not None:
                with contextlib.suppress(OSError):
                    path.unlink()

    def _adopt_finished_dumps(self) -> bool:
        """Renames a dump whose JVM has exited and whose header is complete to the archive's
        name; removes the ones that are not. True if a JVM is still making one."""
        busy = False
        for pid_file in self.directory.glob(f"{self.path.stem}.*.dump.pid"):
            dump = pid_file.with_suffix("")
            if _running(pid_file):
                busy = True
                continue
            if not self.path.is_file() and _complete(dump):
                os.replace(dump, self.path)
            else:
                dump.unlink(missing_ok=True)
            pid_file.unlink(missing_ok=True)
        return busy

    @staticmethod
    def _pid_file(dump: Path) -> Path:
        return dump.with_name(dump.name + ".pid")


def _running(pid_file: Path) -> bool:
    try:
        process = psutil.Process(int(pid_file.read_text().strip()))
        return process.status() != psutil.STATUS_ZOMBIE
    except (OSError, ValueError, psutil.Error):
        return False


def _complete(dump: Path) -> bool:
    try:
        with open(dump, "rb") as f:
            return f.read(len(DYNAMIC_ARCHIVE_MAGIC)) == DYNAMIC_ARCHIVE_MAGIC
    except OSError:
        return False


def java_executable() -> str:
    """The ``java`` that spark-submit runs: ``$JAVA_HOME/bin/java``, else the one on PATH."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        return os.path.join(java_home, "bin", "java")
    return shutil.which("java") or "java"
