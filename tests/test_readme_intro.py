"""The README's first paragraph says what the app reads and writes today: every source,
format and sink type the connectors register, in the words a reader knows them by."""

from __future__ import annotations

from pathlib import Path

import pytest

from source_support.formats.registry import FORMATS
from source_support.registry import SINKS, SOURCES

README = Path(__file__).resolve().parent.parent / "README.md"

#: A registered type -> the words the first paragraph names it with (None: not named, why).
NAMED = {
    "source": {
        "files": "files",
        "s3": "S3-compatible object storage",
        "redis_streams": "Redis streams",
        "nats_jetstream": "NATS JetStream",
        "kafka": "Kafka",
        "kinesis": "Amazon Kinesis",
        "postgres": "PostgreSQL tables",
        "sequence": None,  # numbers made up for trying a flow out, not a system one reads
    },
    "format": {
        "csv": "CSV",
        "jsonl": "JSON",
        "avro": "Avro",
        "parquet": "Parquet files",
        "raw": "raw text",
        "fields": "a stream entry's fields",
    },
    "sink": {
        "parquet": "Parquet",
        "csv": "CSV",
        "json": "JSON-lines",
        "redis_stream": "a Redis stream",
        "nats": "a NATS subject",
        "postgres": "a PostgreSQL table",
    },
}


def first_paragraph() -> str:
    text = README.read_text().split("\n\n")[1]  # after the title
    return " ".join(text.split())


@pytest.mark.parametrize(("kind", "registry"), [("source", SOURCES), ("format", FORMATS), ("sink", SINKS)])
def test_the_first_paragraph_names_every_type_the_app_has(kind, registry):
    named = NAMED[kind]
    assert sorted(named) == sorted(registry), f"a {kind} type was added or removed: say it in the README"
    paragraph = first_paragraph()
    missing = [f"{t} ({words!r})" for t, words in named.items() if words and words not in paragraph]
    assert missing == [], f"the README's first paragraph does not name these {kind}s"
