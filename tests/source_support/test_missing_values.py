"""One rule for missing values in every type (``[format] null_values``), and the datetime
patterns of ``date_format`` / ``timestamp_format``."""

from __future__ import annotations

import datetime as dt
import math

import pyarrow as pa
import pytest

from source_support.datetime_patterns import datetime_pattern
from source_support.errors import ConfigError
from source_support.formats import validate_format
from source_support.schema import parse_ddl

DDL = "id BIGINT, sex STRING, mass DOUBLE"


def csv_format(**options):
    return validate_format({"type": "csv", "schema": DDL, "header": False, **options}).build()


def json_format(ddl=DDL, **options):
    return validate_format({"type": "json", "schema": ddl, **options}).build()


def test_an_empty_field_is_null_in_every_type_string_included_quoted_or_not():
    table, bad = csv_format().parse(b'1,,\n2,"",""\n3,x,1.5\n', 0)

    assert bad == []
    assert table.to_pylist() == [
        {"id": 1, "sex": None, "mass": None},
        {"id": 2, "sex": None, "mass": None},
        {"id": 3, "sex": "x", "mass": 1.5},
    ]


@pytest.mark.parametrize("text", ["NA", "null", "N/A", "#N/A", "NULL", "none"])
def test_a_text_not_in_null_values_is_a_bad_record_in_a_double_column_not_a_null(text):
    block = f"1,male,3750\n2,female,{text}\n3,male,3800\n".encode()

    table, bad = csv_format().parse(block, 100)

    assert table.column("id").to_pylist() == [1, 3]
    assert len(bad) == 1
    assert bad[0].position == 100 + len(b"1,male,3750\n")
    assert bad[0].reason == f"column 3 'mass': invalid value {text!r} for DOUBLE"


def test_a_text_not_in_null_values_stays_text_in_a_string_column():
    table, bad = csv_format().parse(b"1,NA,1\n2,null,2\n", 0)

    assert bad == []
    assert table.column("sex").to_pylist() == ["NA", "null"]


def test_null_values_make_the_same_texts_null_in_every_type():
    fmt = csv_format(null_values=["", "NA"])

    table, bad = fmt.parse(b"1,NA,NA\n2,female,\nNA,male,4000\n", 0)

    assert bad == []
    assert table.to_pylist() == [
        {"id": 1, "sex": None, "mass": None},
        {"id": 2, "sex": "female", "mass": None},
        {"id": None, "sex": "male", "mass": 4000.0},
    ]


def test_an_empty_field_is_a_bad_record_when_null_values_leave_it_out():
    table, bad = csv_format(null_values=["NA"]).parse(b"1,a,\n2,NA,NA\n", 0)

    assert table.to_pylist() == [{"id": 2, "sex": None, "mass": None}]
    assert [b.reason for b in bad] == ["column 3 'mass': invalid value '' for DOUBLE"]


@pytest.mark.parametrize("text", ["NaN", "nan", "-nan", "NAN"])
def test_nan_reads_as_nan_in_a_double_column(text):
    table, bad = csv_format().parse(f"1,a,{text}\n".encode(), 0)

    assert bad == []
    assert math.isnan(table.column("mass")[0].as_py())


def test_the_slow_path_reads_nulls_and_nan_as_the_fast_one_does():
    # the bad record sends the whole block to the slow path
    table, bad = csv_format().parse(b'1,,NaN\n2,"",\n3,x,oops\n', 0)

    assert [b.reason for b in bad] == ["column 3 'mass': invalid value 'oops' for DOUBLE"]
    rows = table.to_pylist()
    assert rows[0]["sex"] is None and math.isnan(rows[0]["mass"])
    assert rows[1] == {"id": 2, "sex": None, "mass": None}


def test_json_a_string_in_a_number_column_is_null_only_when_it_is_a_null_value():
    block = b'{"id": 1, "sex": "NA", "mass": "NA"}\n{"id": 2, "sex": "", "mass": null}\n'

    strict_table, strict_bad = json_format().parse(block, 0)
    table, bad = json_format(null_values=["", "NA"]).parse(block, 0)

    assert [b.reason for b in strict_bad] == ["field 'mass': expected DOUBLE, found a string \"NA\""]
    assert strict_table.to_pylist() == [{"id": 2, "sex": "", "mass": None}]
    assert bad == []
    # a STRING column keeps its JSON strings: JSON says null with null
    assert table.to_pylist() == [{"id": 1, "sex": "NA", "mass": None}, {"id": 2, "sex": "", "mass": None}]


def test_fields_values_follow_null_values():
    fmt = validate_format({"type": "fields", "schema": DDL, "null_values": ["NA"]}).build(entries=True)

    table, bad = fmt.convert(
        {"id": pa.array(["1", "2"]), "sex": pa.array(["NA", ""]), "mass": pa.array(["NA", ""])}, 2
    )

    assert table.to_pylist()[0] == {"id": 1, "sex": None, "mass": None}
    assert bad == {1: "field 'mass': invalid value '' for DOUBLE"}


def test_csv_dates_read_by_a_declared_spark_pattern():
    fmt = validate_format(
        {"type": "csv", "schema": "d DATE, v DOUBLE", "header": False, "date_format": "yyyy/MM/dd"}
    ).build()

    table, bad = fmt.parse(b"2012/01/01,1\n2012/12/31,2\n2012-01-03,3\n", 0)

    assert table.column("d").to_pylist() == [dt.date(2012, 1, 1), dt.date(2012, 12, 31)]
    assert [b.reason for b in bad] == ["column 1 'd': invalid value '2012-01-03' for DATE"]


def test_csv_dates_with_month_names():
    fmt = validate_format(
        {"type": "csv", "schema": "symbol STRING, d DATE", "header": False, "date_format": "MMM d yyyy"}
    ).build()

    table, bad = fmt.parse(b"MSFT,Jan 1 2000\nMSFT,Feb 1 2000\nIBM,Dec 31 2010\n", 0)

    assert bad == []
    assert table.column("d").to_pylist() == [dt.date(2000, 1, 1), dt.date(2000, 2, 1), dt.date(2010, 12, 31)]


def test_timestamps_read_by_a_declared_pattern_with_a_fraction_and_a_zone():
    with pytest.raises(ConfigError, match="must come last"):
        validate_format({"type": "csv", "timestamp_format": "dd/MM/yyyy HH:mm:ss.SSS yyyy"})
    fmt = validate_format(
        {
            "type": "csv",
            "schema": "t TIMESTAMP",
            "header": False,
            "timestamp_format": "dd/MM/yyyy HH:mm:ss.SSS",
        }
    ).build()

    table, bad = fmt.parse(b"05/03/2020 13:30:00.250\n05/03/2020 13:30:00\n", 0)

    assert table.column("t").to_pylist() == [dt.datetime(2020, 3, 5, 13, 30, 0, 250000, tzinfo=dt.UTC)]
    assert [b.reason for b in bad] == ["column 1 't': invalid value '05/03/2020 13:30:00' for TIMESTAMP"]


def test_json_reads_an_iso_date_into_a_declared_date_column():
    fmt = json_format("Name STRING, Year DATE")

    table, bad = fmt.parse(b'{"Name": "chevelle", "Year": "1970-01-01"}\n{"Name": "x", "Year": null}\n', 0)

    assert bad == []
    assert table.to_pylist() == [
        {"Name": "chevelle", "Year": dt.date(1970, 1, 1)},
        {"Name": "x", "Year": None},
    ]


def test_json_a_date_that_is_not_one_is_a_bad_record():
    fmt = json_format("Name STRING, Year DATE")

    table, bad = fmt.parse(b'{"Name": "a", "Year": "1970-01-01"}\n{"Name": "b", "Year": "1970"}\n', 0)

    assert table.column("Name").to_pylist() == ["a"]
    assert [b.reason for b in bad] == ["field 'Year': invalid value '1970' for DATE"]


def test_inference_uses_null_values_and_the_declared_date_format():
    sample = b"date,mass,sex\n2012/01/01,NA,NA\n2012/01/02,3.5,male\n"

    strict = validate_format({"type": "csv"}).build().infer_schema(sample)
    told = validate_format({"type": "csv", "null_values": ["NA"], "date_format": "yyyy/MM/dd"}).build()

    assert strict == parse_ddl("date STRING, mass STRING, sex STRING")
    assert told.infer_schema(sample) == parse_ddl("date DATE, mass DOUBLE, sex STRING")


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        ("yyyy/MM/dd", "%Y/%m/%d"),
        ("MMM d yyyy", "%b %d %Y"),
        ("MMMM dd, yy", "%B %d, %y"),
        ("EEE, d MMM yyyy HH:mm:ss Z", "%a, %d %b %Y %H:%M:%S %z"),
        ("EEEE h:mm a", "%A %I:%M %p"),
        ("yyyy-MM-dd'T'HH:mm:ssXXX", "%Y-%m-%dT%H:%M:%S%z"),
        ("'day' D 'of' yyyy, 100%", "day %j of %Y, 100%%"),
    ],
)
def test_spark_patterns_translate_to_strptime(pattern, expected):
    assert datetime_pattern(pattern, field="format.date_format").strptime == expected


@pytest.mark.parametrize(
    ("table", "field", "words"),
    [
        ({"date_format": "yyyy-ww"}, "format.date_format", "letter 'w' is not supported"),
        ({"timestamp_format": "yyyy 'T"}, "format.timestamp_format", "not closed"),
        ({"date_format": ""}, "format.date_format", "is empty"),
        ({"null_values": ["", 3]}, "format.null_values", "must be"),
        ({"null_values": "NA"}, "format.null_values", "must be a list"),
        ({"encoding": "klingon"}, "format.encoding", "unknown text encoding"),
        ({"comment": ""}, "format.comment", "comment line starts with"),
        ({"comment": '"'}, "format.comment", "starts with the delimiter or the quote"),
        ({"comment": ";", "delimiter": ";"}, "format.comment", "starts with the delimiter or the quote"),
    ],
)
def test_bad_value_options_are_refused_naming_the_field(table, field, words):
    with pytest.raises(ConfigError) as caught:
        validate_format({"type": "csv", **table})

    assert caught.value.field.startswith(field)
    assert words in str(caught.value)


def test_json_nested_deeper_than_the_parser_reads_is_a_bad_record_not_a_crash():
    deep = b'{"id": ' + b"[" * 100_000 + b"]" * 100_000 + b"}\n"
    lines = json_format("id BIGINT")
    array = lines.for_file(b"[" + deep)

    _, bad = lines.parse(b'{"id": 1}\n' + deep, 0)
    table, in_array = array.parse(b'{"id": 1},\n' + deep, 1)

    assert [b.reason for b in bad] == ["JSON nested too deeply to read (Python's parser has a depth limit)"]
    assert table.column("id").to_pylist() == [1]
    assert [b.position for b in in_array] == [1 + len(b'{"id": 1},\n')]


def test_a_fraction_of_a_second_may_be_followed_by_a_zone():
    fmt = validate_format(
        {
            "type": "csv",
            "schema": "t TIMESTAMP",
            "header": False,
            "timestamp_format": "dd.MM.yyyy HH:mm:ss.SSSXXX",
        }
    ).build()

    table, bad = fmt.parse(b"05.03.2020 13:30:00.250+02:00\n05.03.2020 13:30:00.5Z\n", 0)

    assert bad == []
    assert table.column("t").to_pylist() == [
        dt.datetime(2020, 3, 5, 11, 30, 0, 250000, tzinfo=dt.UTC),
        dt.datetime(2020, 3, 5, 13, 30, 0, 500000, tzinfo=dt.UTC),
    ]
