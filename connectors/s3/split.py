"""The unit of work of the S3 source: one object, or a byte range of a large one."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from connectors.files.split import FileSplit
from connectors.s3.objects import parse_object_url
from source_support.api import OffsetEntry, SplitSerializer


@dataclass(frozen=True)
class S3Split(FileSplit):
    """Records of object ``path`` (``s3://bucket/key``) whose first byte lies in
    ``[start, end)``, read up to ``position``: a files split over an object (the same
    formats and line rule read it), plus the ETag and size the object was discovered with.
    A gzip object is one split whose positions count uncompressed bytes.

    Its offset entry (the Aiven S3 source's ``S3OffsetManagerEntry``) is keyed by bucket,
    key and ETag: a position means nothing in another version of the object."""

    etag: str = ""

    @property
    def bucket(self) -> str:
        return parse_object_url(self.path)[0]

    @property
    def key(self) -> str:
        return parse_object_url(self.path)[1]

    @property
    def offset(self) -> OffsetEntry:
        return OffsetEntry(key=f"{self.split_id} {self.etag}", position=self.position)


#: The fields a serialized split holds (a files split's local identity has no meaning here).
SERIALIZED = ("path", "start", "end", "position", "compressed", "size", "etag")


class S3SplitSerializer(SplitSerializer[FileSplit]):
    def serialize(self, split: FileSplit) -> dict[str, Any]:
        return {name: getattr(split, name) for name in SERIALIZED}

    def deserialize(self, data: dict[str, Any]) -> S3Split:
        known = {f.name for f in fields(S3Split)}
        return S3Split(**{name: value for name, value in data.items() if name in known})
