"""Lists a bucket's objects under a prefix and hands out their splits on request: once,
page by page (a bounded source), or again and again (``watch = true``).

A listing of millions of keys never sits in memory or in the backlog at once: a bounded
enumerator lists ``ListObjectsV2`` pages only while fewer than ``MAX_PENDING_SPLITS``
splits wait, and remembers the last key listed (``StartAfter``) to go on from there
(Iceberg's enumerator pauses its discovery so)."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from connectors.aws.session import AWS_ERRORS, aws_error_reason
from connectors.files.enumerator import file_splits
from connectors.files.split import FileStat
from connectors.s3.objects import object_url
from connectors.s3.split import S3Split
from source_support.api import SplitEnumeratorContext
from source_support.backlog import BacklogEnumerator
from source_support.connections import key_allowed

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

logger = logging.getLogger(__name__)

#: Listing pauses while this many splits wait for readers.
MAX_PENDING_SPLITS = 10_000
#: Keys per ListObjectsV2 page (S3's most).
PAGE_KEYS = 1000
#: With watch = true: how often the prefix is listed again for new objects.
DISCOVERY_INTERVAL_MS = 10_000
#: With watch = true: how much older than the newest object taken an object may be and
#: still be taken when it appears (Spark's maxFileAge); the keys taken within it are kept.
MAX_OBJECT_AGE_MS = 3600 * 1000


@dataclass(frozen=True)
class ObjectInfo:
    """An object as a listing shows it."""

    key: str
    size: int
    etag: str
    modified_ms: int


@dataclass(frozen=True)
class Listing:
    """Which objects of a bucket a source reads: keys under ``prefix`` whose rest matches
    ``pattern`` (and that the connection's ``key_patterns``, over ``bucket/key``, allow).
    Folder markers (``a/``) and hidden or marker objects (``.x``, ``_SUCCESS``) are left
    out, as Spark leaves such files out."""

    bucket: str
    prefix: str
    pattern: re.Pattern[str]
    key_patterns: tuple[str, ...] = ()

    def wanted(self, key: str) -> bool:
        name = key.rsplit("/", 1)[-1]
        if not name or name.startswith((".", "_")):
            return False
        if not self.pattern.fullmatch(key[len(self.prefix) :]):
            return False
        return key_allowed(f"{self.bucket}/{key}", self.key_patterns)

    def pages(self, client: S3Client, start_after: str = "") -> Iterator[tuple[list[ObjectInfo], str]]:
        """Each page's wanted objects, in key order, with the page's last key."""
        arguments: dict[str, Any] = {"Bucket": self.bucket, "Prefix": self.prefix, "MaxKeys": PAGE_KEYS}
        if start_after:
            arguments["StartAfter"] = start_after
        while True:
            page = client.list_objects_v2(**arguments)
            contents = page.get("Contents", [])
            objects = [
                ObjectInfo(
                    item.get("Key", ""),
                    item.get("Size", 0),
                    item.get("ETag", ""),
                    int(item["LastModified"].timestamp() * 1000) if "LastModified" in item else 0,
                )
                for item in contents
                if self.wanted(item.get("Key", ""))
            ]
            last = contents[-1].get("Key", start_after) if contents else start_after
            yield objects, last
            token = page.get("NextContinuationToken")
            if not page.get("IsTruncated") or not token:
                return
            arguments.pop("StartAfter", None)
            arguments["ContinuationToken"] = token

    def objects(self, client: S3Client) -> Iterator[ObjectInfo]:
        for objects, _ in self.pages(client):
            yield from objects


def object_splits(
    bucket: str, info: ObjectInfo, *, split_size: int, layout: Callable[[str], str]
) -> list[S3Split]:
    """The splits of an object by the files connector's rule (``file_splits``): none when
    it is empty, one when gzip or small, else byte ranges of ``split_size``."""
    path = object_url(bucket, info.key)
    stat = FileStat(info.size, info.modified_ms * 1_000_000, 0, 0)
    return [
        S3Split(
            split.path,
            split.start,
            split.end,
            split.position,
            compressed=split.compressed,
            size=info.size,
            etag=info.etag,
        )
        for split in file_splits(path, stat, split_size=split_size, splittable=layout)
    ]


class S3Enumerator(BacklogEnumerator[S3Split]):
    """Flink's file enumerators over a bucket: static (bounded) or continuous (``watch``).

    Bounded: lists page by page while the backlog is short, until the listing ends; a
    reader that asks when nothing waits and nothing is left to list is told there are no
    more splits. Watched: lists the prefix again every ``DISCOVERY_INTERVAL_MS`` and queues
    the objects not taken yet (a key is read at most once in a run, as a files path is:
    an object rewritten after it was taken is not read again); a reader that asks when the
    queue is empty waits for the next object found. The state keeps the newest
    ``LastModified`` taken and the keys taken within ``MAX_OBJECT_AGE_MS`` below it
    (Spark's ``FileStreamSource`` log, bounded the same way). A ``[stop]`` rule ends a
    watched source: ``latest`` takes the objects there at the first listing, ``time`` the
    objects modified up to the time.
    """

    def __init__(
        self,
        context: SplitEnumeratorContext[S3Split],
        *,
        client: Callable[[], S3Client],
        listing: Listing,
        split_size: int,
        layout: Callable[[str], str],
        watch: bool,
        stop: Mapping[str, Any],
        clock: Callable[[], float],
        state: dict[str, Any] | None,
    ) -> None:
        self.context, self.client, self.listing = context, client, listing
        self.split_size, self.layout, self.watch = split_size, layout, watch
        self.stop, self.clock = stop, clock
        state = state or {}
        self.listed_to: str = state.get("listed_to", "")
        self.listed_all: bool = state.get("listed_all", False)
        self.pending: int = state.get("pending", 0)
        self.objects_found: int = state.get("objects_found", 0)
        self.next_discovery_ms: int = state.get("next_discovery_ms", 0)
        self.mark_ms: int | None = state.get("mark_ms")
        self.seen: dict[str, int] = dict(state.get("seen", {}))
        self.awaiting: list[int] = list(state.get("awaiting", []))
        #: A stop rule took its last objects: nothing new will be listed.
        self.closed: bool = state.get("closed", False)

    def start(self) -> None:
        if self.watch:
            now_ms = int(self.clock() * 1000)
            if not self.closed and now_ms >= self.next_discovery_ms and self.pending < MAX_PENDING_SPLITS:
                self._discover_new(now_ms)
            self.serve_awaiting()
        elif not self.listed_all and self.pending < MAX_PENDING_SPLITS:
            self._list_more()

    def handle_split_request(self, subtask: int, requester_location: str = "") -> None:
        if not self.watch and not self.pending and not self.listed_all:
            self._list_more()
        given = self.assign_share(subtask)
        if given:
            if subtask in self.awaiting:
                self.awaiting.remove(subtask)
        elif self.is_exhausted():
            self.context.signal_no_more_splits(subtask)
        elif self.watch and subtask not in self.awaiting:
            self.awaiting.append(subtask)

    def snapshot_state(self) -> dict[str, Any]:
        return {
            "listed_to": self.listed_to,
            "listed_all": self.listed_all,
            "pending": self.pending,
            "objects_found": self.objects_found,
            "next_discovery_ms": self.next_discovery_ms,
            "mark_ms": self.mark_ms,
            "seen": self.seen,
            "awaiting": self.awaiting,
            "closed": self.closed,
        }

    def is_exhausted(self) -> bool:
        if self.watch:
            return self.closed and not self.pending
        return self.listed_all and not self.pending

    def pending_count(self) -> int:
        return self.pending

    def _queue(self, objects: Sequence[ObjectInfo]) -> None:
        splits = [
            split
            for info in objects
            for split in object_splits(
                self.listing.bucket, info, split_size=self.split_size, layout=self.layout
            )
        ]
        self.context.backlog().append(splits)
        self.pending += len(splits)
        self.objects_found += len(objects)

    def _list_more(self) -> None:
        """Lists pages from where the last listing stopped until enough splits wait; the
        server away, from there again at a later tick."""
        try:
            for objects, last in self.listing.pages(self.client(), self.listed_to):
                self._queue(objects)
                self.listed_to = last
                if self.pending >= MAX_PENDING_SPLITS:
                    return
        except AWS_ERRORS as exc:
            self._listing_failed(exc)
            return
        self.listed_all = True

    def _discover_new(self, now_ms: int) -> None:
        """Queues the objects not taken yet, oldest first, up to the backlog's cap (the
        rest are found by a later listing)."""
        latest = self.stop.get("kind") == "latest"
        until_ms: int | None = self.stop["time_ms"] if self.stop.get("kind") == "time" else None
        try:
            fresh = [
                info
                for info in self.listing.objects(self.client())
                if self._is_new(info) and (until_ms is None or info.modified_ms <= until_ms)
            ]
        except AWS_ERRORS as exc:
            self._listing_failed(exc)
            return
        fresh.sort(key=lambda info: (info.modified_ms, info.key))
        taken: list[ObjectInfo] = []
        for info in fresh:
            if self.pending + len(taken) >= MAX_PENDING_SPLITS:
                break
            taken.append(info)
        self._queue(taken)
        self._remember(taken)
        self.next_discovery_ms = now_ms + DISCOVERY_INTERVAL_MS
        if latest or (until_ms is not None and now_ms >= until_ms and len(taken) == len(fresh)):
            self.closed = True

    def _listing_failed(self, exc: BaseException) -> None:
        """The server is away or refused the listing: nothing is lost, a later tick lists
        from where this one stopped."""
        reason = aws_error_reason(exc)
        logger.warning(
            "listing %s failed (%s); listing again later",
            object_url(self.listing.bucket, self.listing.prefix),
            reason,
        )

    def _is_new(self, info: ObjectInfo) -> bool:
        if self.mark_ms is None:
            return True
        return info.key not in self.seen and info.modified_ms >= self.mark_ms - MAX_OBJECT_AGE_MS

    def _remember(self, taken: list[ObjectInfo]) -> None:
        if not taken:
            return
        self.seen.update((info.key, info.modified_ms) for info in taken)
        self.mark_ms = max([self.mark_ms or 0] + [info.modified_ms for info in taken])
        oldest = self.mark_ms - MAX_OBJECT_AGE_MS
        self.seen = {key: ms for key, ms in self.seen.items() if ms >= oldest}
