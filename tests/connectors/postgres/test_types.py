"""Every type Django's model fields make on PostgreSQL lands as the Arrow type of
``connectors.postgres.types`` and holds what psycopg reads from the same row; NULLs stay."""

from __future__ import annotations

import datetime as dt
import json
import uuid
from decimal import Decimal

import psycopg
import pyarrow as pa
import pytest
from psycopg import sql

from connectors.postgres.connection import TableName
from connectors.postgres.source import PostgresSource
from source_support.testing import SourceHarness

#: column -> (the SQL type Django's field makes, the Arrow type it lands as, a value).
COLUMNS = {
    "auto": ("integer", pa.int32(), "7"),  # AutoField, IntegerField, PositiveIntegerField
    "big": ("bigint", pa.int64(), "9000000000"),  # BigAutoField, BigIntegerField
    "small": ("smallint", pa.int16(), "-3"),  # SmallIntegerField
    "flag": ("boolean", pa.bool_(), "true"),  # BooleanField
    "chars": ("varchar(100)", pa.string(), "'héllo'"),  # CharField, EmailField, SlugField...
    "words": ("text", pa.string(), "'long text'"),  # TextField
    "day": ("date", pa.date32(), "'2024-02-29'"),  # DateField
    "instant": ("timestamp with time zone", pa.timestamp("us", tz="UTC"), "'2024-05-01 12:30:00.123456+02'"),
    "local": ("timestamp without time zone", pa.timestamp("us"), "'2024-05-01 12:30:00.5'"),  # USE_TZ=False
    "clock": ("time", pa.time64("us"), "'13:14:15.5'"),  # TimeField
    "took": ("interval", pa.duration("us"), "'3 days 04:05:06.7'"),  # DurationField
    "price": ("numeric(10,3)", pa.decimal128(10, 3), "1234567.891"),  # DecimalField
    "ratio": ("double precision", pa.float64(), "0.25"),  # FloatField
    "ident": ("uuid", pa.string(), "'6f1c0d52-4d2b-4a3e-9b0e-2f8d6f0b8c11'"),  # UUIDField
    "doc": ("jsonb", pa.string(), """'{"a": [1, 2], "b": null}'"""),  # JSONField
    "blob": ("bytea", pa.binary(), "'\\x00ff10'"),  # BinaryField
    "address": ("inet", pa.string(), "'192.168.0.1'"),  # GenericIPAddressField
    "numbers": ("integer[]", pa.list_(pa.int32()), "'{1,NULL,3}'"),  # ArrayField(IntegerField)
    "tags": ("varchar(20)[]", pa.list_(pa.string()), "'{a,b}'"),  # ArrayField(CharField)
    "mood": ("mood", pa.string(), "'happy'"),  # an enum (a Django field over a CREATE TYPE)
    "plain": ("numeric", pa.string(), "3.14159265358979323846264338327950288419716939937510"),
}


@pytest.fixture()
def typed_table(pg_url, schema):
    table = TableName(schema, "typed")
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
        conn.execute("CREATE TYPE mood AS ENUM ('sad', 'happy')")
        columns = sql.SQL(", ").join(
            sql.SQL("{} {}").format(sql.Identifier(name), sql.SQL(kind))
            for name, (kind, _, _) in COLUMNS.items()
        )
        conn.execute(sql.SQL("CREATE TABLE {} (id bigint PRIMARY KEY, {})").format(table.identifier, columns))
        values = sql.SQL(", ").join(sql.SQL(value) for _, _, value in COLUMNS.values())
        conn.execute(sql.SQL("INSERT INTO {} VALUES (1, {})").format(table.identifier, values))
        conn.execute(sql.SQL("INSERT INTO {} (id) VALUES (2)").format(table.identifier))  # every column NULL
    return table


def test_each_django_field_type_lands_as_its_arrow_type_with_psycopgs_values(pg_url, typed_table):
    source = PostgresSource(url=pg_url, table=typed_table, batch_size=10)
    harness = SourceHarness(source, readers=1)
    harness.run()
    landed = {row["id"]: row for row in harness.records()}
    with psycopg.connect(pg_url) as conn:
        read = conn.execute(sql.SQL("SELECT * FROM {} WHERE id = 1").format(typed_table.identifier))
        names = [d.name for d in read.description or []]
        expected = dict(zip(names, read.fetchone() or (), strict=True))

    schema = source.infer_schema()
    assert {name: schema.field(name).type for name in COLUMNS} == {n: t for n, (_, t, _) in COLUMNS.items()}
    row = landed[1]
    for name in ("auto", "big", "small", "flag", "chars", "words", "day", "instant", "local", "clock"):
        assert row[name] == expected[name], name
    assert row["took"] == expected["took"] == dt.timedelta(days=3, hours=4, minutes=5, seconds=6.7)
    assert row["price"] == expected["price"] == Decimal("1234567.891")
    assert row["ratio"] == expected["ratio"]
    assert row["ident"] == str(expected["ident"]) and isinstance(expected["ident"], uuid.UUID)
    assert json.loads(row["doc"]) == expected["doc"] == {"a": [1, 2], "b": None}
    assert row["blob"] == bytes(expected["blob"]) == b"\x00\xff\x10"
    assert row["address"] == str(expected["address"])
    assert row["numbers"] == expected["numbers"] == [1, None, 3]
    assert row["tags"] == expected["tags"] == ["a", "b"]
    assert row["mood"] == "happy"
    assert Decimal(row["plain"]) == expected["plain"]
    assert row["instant"] == dt.datetime(2024, 5, 1, 10, 30, 0, 123456, tzinfo=dt.UTC)
    assert all(value is None for name, value in landed[2].items() if name != "id"), "NULLs stay NULL"
