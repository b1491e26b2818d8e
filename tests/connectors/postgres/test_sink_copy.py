"""The binary COPY stream the sink builds from Arrow, read back by a real PostgreSQL: every
wire type, nulls, sliced batches, and decimals at the edges of their precision and scale."""

from __future__ import annotations

import datetime
import decimal

import psycopg
import pyarrow as pa
import pytest

from connectors.postgres.binary_copy import copy_stream, wire_type
from tests.connectors.postgres.conftest import postgres_url


def round_trip(table: pa.Table, columns: str, select: str) -> list[tuple]:
    with psycopg.connect(postgres_url(), autocommit=True) as conn:
        conn.execute("SET timezone = 'UTC'")
        conn.execute(f"CREATE TEMP TABLE copied ({columns})")
        with conn.cursor().copy("COPY copied FROM STDIN (FORMAT binary)") as copy:
            for chunk in copy_stream(table.to_batches(max_chunksize=2)):
                copy.write(chunk)
        return conn.execute(f"SELECT {select} FROM copied").fetchall()


@pytest.mark.parametrize(
    ("precision", "scale", "values"),
    [
        (12, 2, ["1.25", "-3.10", "0.00", "9999999999.99", "-0.01"]),
        (18, 1, ["99999999999999999.9", "-12345678901234567.8", "0.1"]),
        (18, 0, ["999999999999999999", "-1", "0"]),
        (10, 5, ["0.12345", "12345.00001", "-0.00001"]),
        (6, 6, ["0.999999", "-0.000001"]),
        (30, 4, ["12345678901234567890123456.7890", "-1.0001"]),  # wider than an int64: as text
    ],
)
def test_decimals_arrive_exactly(precision, scale, values):
    sent = [decimal.Decimal(v) for v in values] + [None]
    table = pa.table({"n": pa.array(sent, pa.decimal128(precision, scale))}).slice(0)

    got = round_trip(
        table, f"n {wire_type(table.schema.field('n').type)}", f"n::numeric({precision},{scale})"
    )

    assert [row[0] for row in got] == sent


def test_every_wire_type_and_null_arrives_as_sent():
    at = datetime.datetime(2024, 1, 1, 12, 0, 0, 5, tzinfo=datetime.UTC)
    table = pa.table(
        {
            "i": pa.array([1, None, -3], pa.int64()),
            "small": pa.array([1, 2, None], pa.int16()),
            "s": ["a", None, "héllo"],
            "f": [1.5, 2.0, None],
            "d": pa.array([datetime.date(2024, 1, 2), None, datetime.date(1960, 1, 1)]),
            "ts": pa.array(
                [at, None, datetime.datetime(1999, 1, 1, tzinfo=datetime.UTC)], pa.timestamp("us", tz="UTC")
            ),
            "local": pa.array([datetime.datetime(2024, 5, 6, 7, 8, 9), None, None], pa.timestamp("ms")),
            "b": [True, None, False],
            "by": pa.array([b"\x00\x01", None, b""]),
            "l": pa.array([[1, 2], None, [None, 3]]),
            "st": pa.array([{"x": 1}, None, {"x": None}]),
        }
    ).slice(0, 3)
    columns = ", ".join(
        f"{name} {wire_type(field.type)}"
        for name, field in zip(table.column_names, table.schema, strict=True)
    )

    got = round_trip(table, columns, "i, small, s, f, d, ts, local, b, by, l::int[], st::jsonb")

    assert got == [
        (
            1,
            1,
            "a",
            1.5,
            datetime.date(2024, 1, 2),
            at,
            datetime.datetime(2024, 5, 6, 7, 8, 9),
            True,
            b"\x00\x01",
            [1, 2],
            {"x": 1},
        ),
        (None, 2, None, 2.0, None, None, None, None, None, None, None),
        (
            -3,
            None,
            "héllo",
            None,
            datetime.date(1960, 1, 1),
            datetime.datetime(1999, 1, 1, tzinfo=datetime.UTC),
            None,
            False,
            b"",
            [None, 3],
            {"x": None},
        ),
    ]
