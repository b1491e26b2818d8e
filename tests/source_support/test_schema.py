"""Spark DDL schemas: parse_ddl, to_ddl and widen."""

from __future__ import annotations

import pyarrow as pa
import pytest

from source_support.errors import ConfigError
from source_support.schema import parse_ddl, to_ddl, widen

#: A field of each simple type, as ``parse_ddl`` reads "a TINYINT, b SMALLINT, ... k TIMESTAMP_NTZ".
SIMPLE_FIELDS = [
    ("a", pa.int8()),
    ("b", pa.int16()),
    ("c", pa.int32()),
    ("d", pa.int64()),
    ("e", pa.float32()),
    ("f", pa.float64()),
    ("g", pa.string()),
    ("h", pa.bool_()),
    ("i", pa.date32()),
    ("j", pa.timestamp("us", tz="UTC")),
    ("k", pa.timestamp("us")),
]


def test_parse_ddl_reads_every_simple_type():
    schema = parse_ddl(
        "a TINYINT, b SMALLINT, c INT, d BIGINT, e FLOAT, f DOUBLE, g STRING, h BOOLEAN, "
        "i DATE, j TIMESTAMP, k TIMESTAMP_NTZ, l LONG, m INTEGER, n VARCHAR"
    )

    assert schema == pa.schema([*SIMPLE_FIELDS, ("l", pa.int64()), ("m", pa.int32()), ("n", pa.string())])


def test_parse_ddl_ignores_case_and_spacing_of_types():
    schema = parse_ddl("  id   bigint ,\n  name  String  ")

    assert schema == pa.schema([("id", pa.int64()), ("name", pa.string())])


def test_parse_ddl_reads_decimal_precision_and_scale():
    schema = parse_ddl("price DECIMAL(12, 3), qty NUMERIC(5), plain DEC")

    assert schema == pa.schema(
        [
            ("price", pa.decimal128(12, 3)),
            ("qty", pa.decimal128(5, 0)),
            ("plain", pa.decimal128(10, 0)),
        ]
    )


def test_parse_ddl_accepts_varchar_length():
    assert parse_ddl("code VARCHAR(20)") == pa.schema([("code", pa.string())])


def test_parse_ddl_strips_backticks_and_keeps_spaces_in_names():
    schema = parse_ddl("`sensor id` BIGINT, `select` STRING")

    assert schema.names == ["sensor id", "select"]


@pytest.mark.parametrize("ddl", ["id INT,", "id BIGINT,, name STRING"])
def test_parse_ddl_refuses_an_empty_column(ddl):
    with pytest.raises(ConfigError, match="cannot read column ''"):
        parse_ddl(ddl)


def test_parse_ddl_refuses_names_that_differ_only_in_case():
    with pytest.raises(ConfigError, match="repeat: id"):
        parse_ddl("id INT, ID STRING")


@pytest.mark.parametrize(
    ("ddl", "fragments"),
    [
        ("", ["empty"]),
        ("   ", ["empty"]),
        ("\n", ["empty"]),
        ("id BIGINT, payload BLOB", ["'payload'", "'BLOB'"]),
        ("id INT(5)", ["'id'"]),
        ("id", ["expected 'name TYPE'"]),
        ("id BIGINT NOT NULL", ["expected 'name TYPE'"]),
        ("1id INT", ["expected 'name TYPE'"]),
        ("x DECIMAL(39, 2)", ["'x'"]),
        ("x DECIMAL(0)", ["'x'"]),
        ("x DECIMAL(5, 6)", ["'x'"]),
    ],
)
def test_parse_ddl_refuses_bad_ddl_naming_the_field_and_the_column(ddl, fragments):
    with pytest.raises(ConfigError) as excinfo:
        parse_ddl(ddl)

    assert excinfo.value.field == "format.schema"
    for fragment in fragments:
        assert fragment in excinfo.value.reason


def test_parse_ddl_refuses_repeated_column_names_naming_them():
    with pytest.raises(ConfigError) as excinfo:
        parse_ddl("id BIGINT, name STRING, id INT, `name` STRING, ok INT")

    assert excinfo.value.reason == "column names repeat: id, name"


def test_parse_ddl_errors_name_the_field_they_were_given():
    with pytest.raises(ConfigError) as excinfo:
        parse_ddl("id WHAT", field="flow.schema")

    assert excinfo.value.field == "flow.schema"
    assert str(excinfo.value).startswith("flow.schema: ")


def test_to_ddl_quotes_names_and_writes_spark_types():
    schema = pa.schema(
        [
            ("sensor id", pa.int64()),
            ("price", pa.decimal128(12, 3)),
            ("at", pa.timestamp("us", tz="UTC")),
            ("local", pa.timestamp("us")),
            ("day", pa.date32()),
            ("ok", pa.bool_()),
        ]
    )

    assert to_ddl(schema) == (
        "`sensor id` BIGINT, `price` DECIMAL(12,3), `at` TIMESTAMP, `local` TIMESTAMP_NTZ, "
        "`day` DATE, `ok` BOOLEAN"
    )


def test_to_ddl_writes_types_it_does_not_know_as_string():
    assert (
        to_ddl(pa.schema([("at", pa.time32("s")), ("big", pa.large_binary())])) == "`at` STRING, `big` STRING"
    )


def test_binary_columns_round_trip_as_binary():
    schema = pa.schema([("data", pa.binary())])
    assert to_ddl(schema) == "`data` BINARY"
    assert parse_ddl("data BINARY") == schema


@pytest.mark.parametrize(
    ("ddl", "arrow_type"),
    [
        (
            "STRUCT<name: STRING, tags: ARRAY<STRING>>",
            pa.struct([("name", pa.string()), ("tags", pa.list_(pa.string()))]),
        ),
        ("STRUCT<name STRING>", pa.struct([("name", pa.string())])),
        ("struct<`a b`:int>", pa.struct([("a b", pa.int32())])),
        ("ARRAY<BIGINT>", pa.list_(pa.int64())),
        ("MAP<STRING, BIGINT>", pa.map_(pa.string(), pa.int64())),
        ("ARRAY<DECIMAL(12, 2)>", pa.list_(pa.decimal128(12, 2))),
        (
            "MAP<STRING, ARRAY<STRUCT<at: TIMESTAMP, ok: BOOLEAN>>>",
            pa.map_(
                pa.string(),
                pa.list_(pa.struct([("at", pa.timestamp("us", tz="UTC")), ("ok", pa.bool_())])),
            ),
        ),
    ],
)
def test_parse_ddl_reads_spark_nested_types(ddl, arrow_type):
    schema = parse_ddl(f"id BIGINT, v {ddl}, after STRING")

    assert schema == pa.schema([("id", pa.int64()), ("v", arrow_type), ("after", pa.string())])
    assert parse_ddl(to_ddl(schema)) == schema


def test_to_ddl_writes_nested_types_as_spark_reads_them():
    schema = parse_ddl("user STRUCT<name: STRING, tags: ARRAY<STRING>>, m MAP<STRING, BIGINT>")

    assert to_ddl(schema) == ("`user` STRUCT<`name`: STRING, `tags`: ARRAY<STRING>>, `m` MAP<STRING, BIGINT>")


@pytest.mark.parametrize(
    ("ddl", "fragment"),
    [
        ("user STRUCT<name: STRING", "'user'"),
        ("user STRUCT<name: BLOB>", "'BLOB'"),
        ("tags ARRAY<>", "'tags'"),
        ("m MAP<STRING>", "'m'"),
        ("s STRUCT<a: INT, A: INT>", "'s'"),
        ("deep " + "ARRAY<" * 40 + "INT" + ">" * 40, "'deep'"),
    ],
)
def test_parse_ddl_refuses_bad_nested_types_naming_the_column(ddl, fragment):
    with pytest.raises(ConfigError) as excinfo:
        parse_ddl(ddl)

    assert fragment in excinfo.value.reason


def test_parse_ddl_reads_back_what_to_ddl_writes():
    schema = pa.schema([*SIMPLE_FIELDS, ("l m", pa.decimal128(38, 10))])

    assert parse_ddl(to_ddl(schema)) == schema


def test_widen_makes_numbers_wide_and_timestamps_utc():
    inferred = pa.schema(
        [
            ("small", pa.int8()),
            ("unsigned", pa.uint32()),
            ("half", pa.float32()),
            ("at", pa.timestamp("s")),
            ("at_tz", pa.timestamp("ms", tz="Europe/Paris")),
        ]
    )

    assert widen(inferred) == pa.schema(
        [
            ("small", pa.int64()),
            ("unsigned", pa.int64()),
            ("half", pa.float64()),
            ("at", pa.timestamp("us", tz="UTC")),
            ("at_tz", pa.timestamp("us", tz="UTC")),
        ]
    )


def test_widen_keeps_booleans_dates_and_strings():
    inferred = pa.schema([("ok", pa.bool_()), ("day", pa.date32()), ("name", pa.string())])

    assert widen(inferred) == inferred


def test_widen_turns_nulls_and_other_types_into_strings():
    inferred = pa.schema(
        [
            ("empty", pa.null()),
            ("big", pa.large_string()),
            ("price", pa.decimal128(5, 2)),
            ("time", pa.time32("s")),
        ]
    )

    assert widen(inferred) == pa.schema([(name, pa.string()) for name in inferred.names])


def test_widen_widens_inside_nested_types():
    inferred = pa.schema(
        [("user", pa.struct([("name", pa.string()), ("tags", pa.list_(pa.null())), ("n", pa.int8())]))]
    )

    assert widen(inferred) == pa.schema(
        [("user", pa.struct([("name", pa.string()), ("tags", pa.list_(pa.string())), ("n", pa.int64())]))]
    )
