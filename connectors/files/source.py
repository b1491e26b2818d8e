"""The files source over the files that match a glob: bounded, or unbounded with ``watch``."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import pyarrow as pa

from connectors.files.avro_reader import AvroFileSplitReader, avro_check_input, avro_infer_schema
from connectors.files.config import FilesSourceConfig, WatchOptions
from connectors.files.enumerator import (
    BLOCKS,
    COMPRESSED_SUFFIXES,
    DECODED,
    RANGES,
    WHOLE,
    ContinuousFileEnumerator,
    StaticFileEnumerator,
    list_files,
)
from connectors.files.parquet_reader import ParquetFileSplitReader, parquet_check_input, parquet_infer_schema
from connectors.files.reader import FileSplitReader
from connectors.files.split import (
    MAX_FILE_OFFSET,
    MAX_FILES_PER_SPLIT,
    WHOLE_FILE,
    FileGroup,
    FileSplit,
    FileSplitSerializer,
    FileStat,
    discovered_split,
    group_location,
    group_position,
)
from source_support.api import (
    Boundedness,
    Source,
    SourceReaderContext,
    SplitEnumeratorContext,
)
from source_support.errors import ConfigError
from source_support.formats import (
    ARROW_ERRORS,
    JSON_LAYOUT_SAMPLE,
    AvroFormat,
    CsvFormat,
    FormatSpec,
    MissingColumns,
    ParquetFormat,
    ReadError,
    RecordFormat,
    canonical_encoding,
)
from source_support.formats.drift import SchemaDrift
from source_support.lines import MAX_RECORD_BYTES, UTF8_BOM, RecordFile, open_records
from source_support.reader_base import SourceReaderBase
from source_support.registry import BuildContext, Environment

SAMPLE_BYTES = 1 << 20
#: Headers checked when a run starts; a later file with a bad header fails its split.
MAX_HEADERS_CHECKED = 1000


def files_check_stop(config: object, stop: Mapping[str, Any]) -> None:
    """A watched files (or s3) source stops at a time or at latest, never at an entry id."""
    if stop.get("kind") == "position":
        raise ConfigError(
            "stop.at", "an entry id stops a stream; a files source stops at a time or at latest"
        )


class FileSource(Source[FileSplit]):
    #: Headers checked when a run starts (``check_input``).
    headers_checked = MAX_HEADERS_CHECKED

    def __init__(
        self,
        *,
        pattern: str,
        fmt: RecordFormat | AvroFormat | ParquetFormat,
        split_size: int,
        env: Environment,
        batch_size: int,
        open_cost: int = 0,
        watch: WatchOptions | None = None,
        stop: Mapping[str, Any] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.pattern = pattern
        self.fmt = fmt
        self.split_size = split_size
        #: What opening a file counts as, in bytes, when small files are packed together.
        self.open_cost = open_cost
        self.env = env
        self.batch_size = batch_size
        #: How a watched source looks for new files; None: the files there at the start.
        self.watch = watch
        #: The ``[stop]`` rule (``BuildContext.stop``) that ends a watched source.
        self.stop = stop or {}
        #: "Now" for a watched source's discovery interval, settle time and stop time.
        self.clock = clock

    @classmethod
    def from_config(
        cls,
        config: FilesSourceConfig,
        fmt: FormatSpec,
        context: BuildContext,
        *,
        clock: Callable[[], float] = time.time,
    ) -> FileSource:
        files_check_stop(config, context.stop)
        record_format = fmt.build(context.schema, env=context.env)
        if not isinstance(
            record_format, RecordFormat | AvroFormat | ParquetFormat
        ):  # build refuses fields already
            raise ConfigError("format.type", "this source reads files: use csv, jsonl, avro or parquet")
        return cls(
            pattern=config.path,
            fmt=record_format,
            split_size=max(1, int(config.split_size_mb * (1 << 20))),
            open_cost=int(config.open_cost_kb * 1024),
            env=context.env,
            batch_size=context.batch_size,
            watch=config.watch_options,
            stop=context.stop,
            clock=clock,
        )

    @property
    def boundedness(self) -> Boundedness:
        return Boundedness.BOUNDED if self.watch is None else Boundedness.CONTINUOUS_UNBOUNDED

    @property
    def split_serializer(self) -> FileSplitSerializer:
        return FileSplitSerializer()

    def create_enumerator(
        self, context: SplitEnumeratorContext[FileSplit]
    ) -> StaticFileEnumerator | ContinuousFileEnumerator:
        return self.restore_enumerator(context, None)

    def restore_enumerator(
        self, context: SplitEnumeratorContext[FileSplit], state: dict[str, Any] | None
    ) -> StaticFileEnumerator | ContinuousFileEnumerator:
        if self.watch is not None:
            return ContinuousFileEnumerator(
                context,
                pattern=self.pattern,
                split_size=self.split_size,
                splittable=self.layout,
                env=self.env,
                options=self.watch,
                stop=self.stop,
                clock=self.clock,
                state=state,
            )
        return StaticFileEnumerator(
            context,
            pattern=self.pattern,
            split_size=self.split_size,
            splittable=self.layout,
            env=self.env,
            state=state,
            open_cost=self.open_cost,
        )

    def create_reader(self, context: SourceReaderContext) -> SourceReaderBase[FileSplit]:
        if isinstance(self.fmt, AvroFormat):
            avro = AvroFileSplitReader(self.fmt, first_bad_record_only=context.bad_record_fails_split)
            return SourceReaderBase(context, avro, batch_size=self.batch_size)
        if isinstance(self.fmt, ParquetFormat):
            parquet = ParquetFileSplitReader(self.fmt, first_bad_record_only=context.bad_record_fails_split)
            return SourceReaderBase(context, parquet, batch_size=self.batch_size)
        split_reader = FileSplitReader(self.fmt, first_bad_record_only=context.bad_record_fails_split)
        return SourceReaderBase(context, split_reader, batch_size=self.batch_size)

    def format_position(self, position: int) -> str:
        """A byte offset; in a split of several small files, ``file:byte``: the file's index
        in the split (from 0) and the byte offset in that file."""
        index, offset = group_location(position)
        return f"{index}:{offset}" if index else str(offset)

    def parse_position(self, text: str) -> int:
        head, colon, tail = text.strip().partition(":")
        try:
            index, offset = (int(head), int(tail)) if colon else (0, int(head))
        except ValueError:
            index = offset = -1
        if not (0 <= index < MAX_FILES_PER_SPLIT and 0 <= offset < MAX_FILE_OFFSET):
            raise ValueError(
                f"{text!r} is not a position (a byte offset, or file:byte in a split of several "
                f"files; a byte offset below {MAX_FILE_OFFSET}, a file below {MAX_FILES_PER_SPLIT})"
            )
        return group_position(index, offset)

    def split_to_retry(self, split: FileSplit) -> FileSplit:
        """The split over the file as it is now: a file the user fixed is no longer the one
        discovered (size, mtime), and the range that ran to its end runs to its new end. What
        lies before the split's position must be as it was (the fix is at the failed record
        or after it); a file read in several ranges must keep its size, or the ranges after
        this one, read from the file as it was, would no longer meet it."""
        if split.group is not None:
            return _group_to_retry(split, split.group)
        try:
            info = os.stat(split.path)
        except OSError:
            return split  # gone: the reader says so
        whole = split.compressed or split.end == WHOLE_FILE  # gzip, or decoded from another encoding
        last = split.size is None or whole or split.end == split.size
        if split.size is not None and info.st_size != split.size and not last:
            raise ValueError(
                f"{split.path} changed size ({split.size} -> {info.st_size} bytes) and is read in "
                "several ranges, so the ranges after this one would no longer meet it"
            )
        end = info.st_size if last and not whole else split.end
        return discovered_split(
            split.path, split.start, end, FileStat.of(info), compressed=split.compressed
        ).at(split.position)

    def layout(self, path: str) -> str:
        """How a file is split: not at all in an encoding other than UTF-8 (its positions
        count decoded bytes) or when a record may span lines (multiline CSV, a JSON array or
        documents), else into byte ranges (Avro: ranges of its blocks; Parquet: of its row groups)."""
        if isinstance(self.fmt, AvroFormat | ParquetFormat):
            return BLOCKS
        if canonical_encoding(self.fmt.encoding) != "utf-8":
            return DECODED
        if self._format_of(path).multiline:
            return WHOLE
        return RANGES

    def _format_of(self, path: str) -> RecordFormat:
        assert isinstance(self.fmt, RecordFormat)
        if not self.fmt.chooses_by_head:
            return self.fmt
        try:
            with self.open_head(path) as f:
                return self.fmt.for_file(f.read(JSON_LAYOUT_SAMPLE))
        except OSError:
            return self.fmt  # gone or unreadable: its split says so

    def describe_found(self, splits: Sequence[FileSplit]) -> list[str]:
        """How many files (or objects) matched and their total size, then each with its size."""
        sizes: dict[str, int] = {}
        for split in splits:
            if split.group is not None:  # small files read together: each counted
                group = split.group
                sizes.update((group.path(i), group.sizes[i]) for i in range(len(group)))
            else:
                sizes.setdefault(split.path, split.size if split.size is not None else split.end)
        total = sum(sizes.values())
        lines = [f"{len(sizes)} files matched {self.pattern}, {total} bytes in all"]
        return lines + [f"{path}: {size} bytes" for path, size in sizes.items()]

    def listed_paths(self) -> Iterable[str]:
        """The paths the source reads, in order (sampled by ``infer_schema`` and
        ``check_input``)."""
        return list_files(self.pattern, self.env)

    def open_head(self, path: str) -> RecordFile:
        """The records of ``path`` for a look at its head (a sample, a header)."""
        assert isinstance(self.fmt, RecordFormat)
        return open_records(path, compressed=path.endswith(COMPRESSED_SUFFIXES), encoding=self.fmt.encoding)

    def infer_schema(self) -> pa.Schema | None:
        """The schema of the first non-empty file's first MiB (comment lines left out);
        None if there is no file. A sample that cannot be read raises ValueError naming the file.
        Avro and Parquet: the columns of the first file's schema."""
        if isinstance(self.fmt, AvroFormat):
            return avro_infer_schema(self.pattern, self.env, self.fmt)
        if isinstance(self.fmt, ParquetFormat):
            return parquet_infer_schema(self.pattern, self.env, self.fmt)
        for path in self.listed_paths():
            with self.open_head(path) as f:
                sample = f.read(SAMPLE_BYTES).removeprefix(UTF8_BOM)
            if self.fmt.comment:
                sample = b"".join(
                    line for line in sample.splitlines(keepends=True) if not line.startswith(self.fmt.comment)
                )
            if sample.strip():
                try:
                    return self.fmt.for_file(sample).infer_schema(sample)
                except (ValueError, *ARROW_ERRORS) as exc:
                    raise ValueError(f"{path}: {exc}") from None
        return None

    def check_input(self) -> None:
        """Refuses a CSV file whose header lacks a schema column, naming the file and the
        columns (the first ``MAX_HEADERS_CHECKED`` files; a later one fails its split); an
        Avro or Parquet file whose schema disagrees with a declared one, naming the column."""
        fmt = self.fmt
        if isinstance(fmt, AvroFormat):
            avro_check_input(self.pattern, self.env, fmt)
            return
        if isinstance(fmt, ParquetFormat):
            parquet_check_input(self.pattern, self.env, fmt)
            return
        if not (isinstance(fmt, CsvFormat) and fmt.has_header and fmt.schema is not None):
            return
        for count, path in enumerate(self.listed_paths()):
            if count >= self.headers_checked:
                return
            try:
                with self.open_head(path) as f:
                    header = f.readline(MAX_RECORD_BYTES).removeprefix(UTF8_BOM)
                    while fmt.comment and header.startswith(fmt.comment):
                        header = f.readline(MAX_RECORD_BYTES)
            except (OSError, ReadError):
                continue  # gone or unreadable: its split says so
            if not header.strip():
                continue
            try:
                fmt.bind_header(header)
            except MissingColumns as exc:
                raise ConfigError("format.schema", f"does not fit {path}: {exc}") from None
            except SchemaDrift:
                continue  # its split fails on it, and the run lists the change


def _group_to_retry(split: FileSplit, group: FileGroup) -> FileSplit:
    """A combined split over its files as they are now, from the file it stopped in on:
    the files before were read whole as they were, and a position names its file, so
    the sizes of the others do not matter."""
    index, _ = group_location(split.position)
    sizes, mtimes, inodes, devices = (
        list(group.sizes),
        list(group.mtimes_ns),
        list(group.inodes),
        list(group.devices),
    )
    for i in range(index, len(group)):
        try:
            info = os.stat(group.path(i))
        except OSError:
            continue  # gone: the reader says so
        sizes[i], mtimes[i], inodes[i], devices[i] = info.st_size, info.st_mtime_ns, info.st_ino, info.st_dev
    fresh = FileGroup(
        group.directory, group.names, tuple(sizes), tuple(mtimes), tuple(inodes), tuple(devices)
    )
    return replace(split, group=fresh)
