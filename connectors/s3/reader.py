"""Reads S3 object splits with the files connector's reader, over ranged GETs."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from connectors.files.reader import FileSplitReader
from connectors.files.split import FileSplit
from connectors.s3.objects import ObjectChanged, ObjectUnavailable, open_object, parse_object_url
from connectors.s3.split import S3Split
from source_support.api import RecordBatch
from source_support.errors import SplitFailed
from source_support.formats import RecordFormat
from source_support.gunzip import RawFile
from source_support.lines import RawOpener, RecordBlockReader

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

logger = logging.getLogger(__name__)


class S3SplitReader(FileSplitReader):
    """Reads held object splits one after the other, as files are read; each object
    through GETs that name the ETag it was discovered with.

    The server gone for longer than an object's own retries (``ObjectUnavailable``):
    the split's open object is dropped and nothing is returned now; the next ``fetch``
    opens it again at the split's position, the last one handed out, so no record is
    lost or read twice. An object rewritten under its key, or deleted once it was opened,
    fails its split at once (one deleted before it was opened is a bad record, as a
    deleted file is)."""

    def __init__(
        self, fmt: RecordFormat, client: Callable[[], S3Client], *, first_bad_record_only: bool = False
    ) -> None:
        super().__init__(fmt, first_bad_record_only=first_bad_record_only)
        self.client = client
        self.woken = threading.Event()

    def raw_opener(self, split: FileSplit) -> RawOpener:
        etag = split.etag if isinstance(split, S3Split) and split.etag else None
        client = self.client()

        def open_raw(path: str) -> RawFile:
            bucket, key = parse_object_url(path)
            return open_object(client, bucket, key, etag=etag, size=split.size)

        return open_raw

    def fetch(self, max_records: int, timeout_s: float) -> list[RecordBatch]:
        split_id = next(iter(self.splits), "")
        try:
            return super().fetch(max_records, timeout_s)
        except (ObjectChanged, FileNotFoundError) as exc:
            # Deleted while read (a 404 is not transient: never tried again), or rewritten.
            self.close_split(split_id)
            raise SplitFailed(str(exc), split_id=split_id) from None
        except ObjectUnavailable as exc:
            logger.warning("%s; reading it again later from its last position", exc)
            self.close_split(split_id)  # reopened at the split's position by the next fetch
            self.woken.wait(timeout_s)
            self.woken.clear()
            return []

    def wake_up(self) -> None:
        self.woken.set()

    def _check_unchanged(self, split: FileSplit, reader: RecordBlockReader) -> None:
        """Every GET names the object's ETag (If-Match): the server itself refuses another
        version (``ObjectChanged``)."""

    def _path_unchanged(self, split: FileSplit) -> bool:
        """A parked open object is taken back by a later slice: its parking key holds the
        split's ETag, and each of its GETs names that ETag (If-Match), so a rewritten
        object still fails its split, and a gzip object is not inflated from its start
        again at each slice."""
        return True
