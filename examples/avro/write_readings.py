"""Writes data/avro/readings.avro: 10,000 sensor readings in an Avro object container file
(deflate, blocks of about 16 KB), as a producer using fastavro would. Used by the README's
Avro example."""

import datetime as dt
from pathlib import Path

import fastavro

SCHEMA = {
    "type": "record",
    "name": "Reading",
    "namespace": "example.sensors",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "sensor", "type": {"type": "enum", "name": "Sensor", "symbols": ["north", "south", "east"]}},
        {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "temperature", "type": ["null", "double"]},
        {
            "name": "place",
            "type": {
                "type": "record",
                "name": "Place",
                "fields": [{"name": "lat", "type": "double"}, {"name": "lon", "type": "double"}],
            },
        },
    ],
}
START = dt.datetime(2026, 3, 1, tzinfo=dt.UTC)


def reading(i: int) -> dict:
    return {
        "id": i,
        "sensor": SCHEMA["fields"][1]["type"]["symbols"][i % 3],
        "ts": START + dt.timedelta(seconds=i),
        "temperature": None if i % 100 == 0 else round((12, 21, 16)[i % 3] + (i % 37) * 0.25, 2),
        "place": {"lat": 48.85 + (i % 3) / 100, "lon": 2.35},
    }


if __name__ == "__main__":
    path = Path("data/avro/readings.avro")
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        fastavro.writer(
            f, fastavro.parse_schema(SCHEMA), (reading(i) for i in range(10_000)), codec="deflate"
        )
    with open(path, "rb") as f:
        blocks = sum(1 for _ in fastavro.block_reader(f))
    print(f"wrote 10000 readings to {path} in {blocks} blocks")
