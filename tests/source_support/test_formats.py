"""Record formats: parsing blocks, finding bad records, inferring schemas, validating [format]."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest

from source_support.errors import ConfigError
from source_support.formats import CsvFormat, FormatSpec, JsonLinesFormat, validate_format
from source_support.schema import parse_ddl

SCHEMA = parse_ddl("id BIGINT, name STRING, temperature DOUBLE")


def csv(**options) -> CsvFormat:
    return CsvFormat(schema=SCHEMA, header=False, **options)


def test_csv_parses_a_good_block_into_the_schema():
    table, bad = csv().parse(b"1,a,1.5\n2,b,-2\n3,,0\n", 0)

    assert bad == []
    assert table.schema == SCHEMA
    assert table.to_pylist() == [
        {"id": 1, "name": "a", "temperature": 1.5},
        {"id": 2, "name": "b", "temperature": -2.0},
        {"id": 3, "name": "", "temperature": 0.0},
    ]


def test_csv_parses_crlf_line_endings():
    table, bad = csv().parse(b"1,a,1.5\r\n2,b,2.5\r\n", 0)

    assert bad == []
    assert table.column("name").to_pylist() == ["a", "b"]


def test_csv_parses_a_last_record_without_newline():
    table, bad = csv().parse(b"1,a,1.5\n2,b,2.5", 0)

    assert bad == []
    assert table.column("id").to_pylist() == [1, 2]


def test_a_blank_block_parses_to_an_empty_table_of_the_schema():
    table, bad = csv().parse(b"\n  \n", 40)

    assert bad == []
    assert table.num_rows == 0
    assert table.schema == SCHEMA


def test_csv_bad_records_are_found_with_their_byte_position_and_raw_text():
    block = b"1,a,1.5\n2,b,oops\n3,c,3.5\n4,d,4.5\n5,e,not-a-number\n6,f,6.5\n"

    table, bad = csv().parse(block, 1000)

    assert table.column("id").to_pylist() == [1, 3, 4, 6]
    assert [(b.position, b.raw) for b in bad] == [(1008, "2,b,oops"), (1033, "5,e,not-a-number")]
    assert "invalid value 'oops'" in bad[0].reason


def test_csv_bad_record_reason_does_not_mention_arrow_row_numbers():
    _, bad = csv().parse(b"1,a,1\n2,b,2\nx,c,3\n", 0)

    assert [b.raw for b in bad] == ["x,c,3"]
    assert "Row #" not in bad[0].reason
    assert not bad[0].reason.startswith("Invalid:")


def test_csv_every_bad_record_of_a_large_block_is_found_in_order():
    lines = [f"{i},n{i},{i}.5\n" if i % 97 else f"{i},n{i},bad{i}\n" for i in range(2000)]
    block = "".join(lines).encode()
    offsets = [sum(len(line) for line in lines[:i]) for i in range(len(lines))]

    table, bad = csv().parse(block, 7)

    bad_ids = [i for i in range(2000) if i % 97 == 0]
    assert [b.position for b in bad] == [7 + offsets[i] for i in bad_ids]
    assert [b.raw for b in bad] == [lines[i].rstrip("\n") for i in bad_ids]
    assert table.column("id").to_pylist() == [i for i in range(2000) if i % 97]


@pytest.mark.parametrize("row", [b"4,d", b"4,d,4.5,extra"])
def test_csv_a_row_with_the_wrong_column_count_is_a_bad_record(row):
    block = b"1,a,1.5\n" + row + b"\n5,e,5.5\n"

    table, bad = csv().parse(block, 0)

    assert table.column("id").to_pylist() == [1, 5]
    assert [(b.position, b.raw) for b in bad] == [(8, row.decode())]
    assert "expected 3 columns" in bad[0].reason


def test_csv_a_bad_record_with_crlf_is_reported_without_the_line_ending():
    _, bad = csv().parse(b"1,a,1\r\nx,b,2\r\n", 0)

    assert [(b.position, b.raw) for b in bad] == [(7, "x,b,2")]


def test_csv_multiline_record_ends_only_outside_quotes():
    block = b'1,"a\nb",1\n2,"say ""hi""\nthere",2\n3,c,3\n'

    ends = csv(multiline=True).record_ends(block)

    assert ends.tolist() == [10, 33, 39]
    assert csv().record_ends(block).tolist() == [5, 10, 24, 33, 39]


def test_csv_multiline_parses_quoted_newlines_into_values():
    table, bad = csv(multiline=True).parse(b'1,"a\nb",1\n2,"c ""q""\nd",2\n', 0)

    assert bad == []
    assert table.column("name").to_pylist() == ["a\nb", 'c "q"\nd']


def test_csv_multiline_bad_record_spans_its_lines():
    block = b'1,"a\nb",1\n2,"c\nd",oops\n3,e,3\n'

    table, bad = csv(multiline=True).parse(block, 50)

    assert table.column("id").to_pylist() == [1, 3]
    assert [(b.position, b.raw) for b in bad] == [(60, '2,"c\nd",oops')]


def test_csv_delimiter_and_quote_options_are_used():
    fmt = csv(delimiter=";", quote="'")

    table, bad = fmt.parse(b"1;'a;b';1.5\n2;\"q\";2\n", 0)

    assert bad == []
    assert table.column("name").to_pylist() == ["a;b", '"q"']


def test_csv_tab_delimiter_reads_commas_as_text():
    table, bad = csv(delimiter="\t").parse(b"1\ta,b\t1.5\n", 0)

    assert bad == []
    assert table.column("name").to_pylist() == ["a,b"]


def test_csv_timestamp_without_zone_counts_as_utc():
    fmt = CsvFormat(schema=parse_ddl("at TIMESTAMP"), header=False)

    table, bad = fmt.parse(b"2024-03-01 12:30:00\n", 0)

    assert bad == []
    assert table.schema.field("at").type == pa.timestamp("us", tz="UTC")
    assert table.column("at").to_pylist() == [dt.datetime(2024, 3, 1, 12, 30, tzinfo=dt.UTC)]


def test_csv_infer_schema_reads_the_header_and_widens_types():
    sample = b"id,name,temperature,day,ok\n1,a,1.5,2024-01-01,true\n2,b,2,2024-01-02,false\n3,trunc"

    schema = CsvFormat(header=True).infer_schema(sample)

    assert schema == pa.schema(
        [
            ("id", pa.int64()),
            ("name", pa.string()),
            ("temperature", pa.float64()),
            ("day", pa.date32()),
            ("ok", pa.bool_()),
        ]
    )


def test_csv_infer_schema_without_header_names_columns_like_spark():
    schema = CsvFormat(header=False).infer_schema(b"1,a\n2,b\n")

    assert schema == pa.schema([("_c0", pa.int64()), ("_c1", pa.string())])


def test_csv_infer_schema_ignores_a_cut_off_last_line():
    # The sample ends mid-record: "3,4" would otherwise read as a column of its own.
    schema = CsvFormat(header=True).infer_schema(b"id,name\n1,a\n2,b\n3,4")

    assert schema.names == ["id", "name"]
    assert schema.field("name").type == pa.string()


def test_jsonl_parses_a_good_block_ignoring_unknown_fields_and_missing_ones_as_null():
    block = b'{"id": 1, "name": "a", "temperature": 1.5, "extra": true}\n{"id": 2}\n'

    table, bad = JsonLinesFormat(SCHEMA).parse(block, 0)

    assert bad == []
    assert table.schema == SCHEMA
    assert table.to_pylist() == [
        {"id": 1, "name": "a", "temperature": 1.5},
        {"id": 2, "name": None, "temperature": None},
    ]


def test_jsonl_bad_records_are_found_with_their_byte_position_and_raw_text():
    lines = [
        b'{"id": 1, "name": "a"}\n',
        b'{"id": "one"}\n',
        b'{"id": 3, "name": "c"}\n',
        b"not json at all\n",
        b'{"id": 5}\n',
    ]

    table, bad = JsonLinesFormat(SCHEMA).parse(b"".join(lines), 300)

    assert table.column("id").to_pylist() == [1, 3, 5]
    assert [(b.position, b.raw) for b in bad] == [
        (300 + len(lines[0]), '{"id": "one"}'),
        (300 + len(b"".join(lines[:3])), "not json at all"),
    ]


def test_jsonl_infer_schema_widens_types_and_makes_nulls_strings():
    sample = b'{"a": 1, "b": "x", "c": true, "d": null, "e": 1.5}\n{"a": 2, "b": "y", "c": false, "d": null, "e": 2}\n{"a":'

    schema = JsonLinesFormat(None).infer_schema(sample)

    assert schema == pa.schema(
        [
            ("a", pa.int64()),
            ("b", pa.string()),
            ("c", pa.bool_()),
            ("d", pa.string()),
            ("e", pa.float64()),
        ]
    )


def test_with_schema_gives_a_copy_and_leaves_the_original_alone():
    fmt = CsvFormat(header=True, delimiter="|")

    typed = fmt.with_schema(SCHEMA)

    assert typed.schema == SCHEMA
    assert (typed.delimiter, typed.has_header) == ("|", True)
    assert fmt.schema is None


def test_validate_format_accepts_csv_options_and_builds_the_format():
    spec = validate_format(
        {
            "type": "csv",
            "schema": "id BIGINT, name STRING",
            "header": False,
            "delimiter": ";",
            "quote": "'",
            "multiline": True,
        }
    )

    fmt = spec.build()
    assert isinstance(fmt, CsvFormat)
    assert fmt.schema == parse_ddl("id BIGINT, name STRING")
    assert (fmt.has_header, fmt.delimiter, fmt.quote, fmt.multiline) == (False, ";", "'", True)


@pytest.mark.parametrize("alias", ["json", "JSONL", "ndjson"])
def test_validate_format_reads_json_aliases_as_jsonl(alias):
    spec = validate_format({"type": alias})

    assert spec == FormatSpec("jsonl", {})
    assert isinstance(spec.build(SCHEMA), JsonLinesFormat)


def test_a_given_schema_wins_over_the_ddl_of_the_spec():
    spec = validate_format({"type": "csv", "schema": "x INT"})

    assert spec.build(SCHEMA).schema == SCHEMA


def test_validate_format_requires_a_type():
    with pytest.raises(ConfigError) as excinfo:
        validate_format({"schema": "id INT"})

    assert excinfo.value.field == "format.type"


def test_validate_format_refuses_an_unknown_type():
    with pytest.raises(ConfigError) as excinfo:
        validate_format({"type": "xml"})

    assert excinfo.value.field == "format.type"
    assert "'xml'" in excinfo.value.reason


@pytest.mark.parametrize(
    ("table", "field"),
    [
        ({"type": "csv", "separator": ","}, "format.separator"),
        ({"type": "jsonl", "header": True}, "format.header"),
        ({"type": "jsonl", "delimiter": ","}, "format.delimiter"),
    ],
)
def test_validate_format_refuses_an_unknown_option_naming_it(table, field):
    with pytest.raises(ConfigError) as excinfo:
        validate_format(table)

    assert excinfo.value.field == field
    assert "is not an option" in excinfo.value.reason


@pytest.mark.parametrize(
    ("table", "field"),
    [
        ({"type": "csv", "header": "yes"}, "format.header"),
        ({"type": "csv", "multiline": 1}, "format.multiline"),
        ({"type": "csv", "delimiter": 44}, "format.delimiter"),
        ({"type": "csv", "schema": ["id INT"]}, "format.schema"),
    ],
)
def test_validate_format_refuses_an_option_of_the_wrong_type(table, field):
    with pytest.raises(ConfigError) as excinfo:
        validate_format(table)

    assert excinfo.value.field == field
    assert excinfo.value.reason.startswith("must be a ")


@pytest.mark.parametrize(
    ("table", "field"),
    [
        ({"type": "csv", "delimiter": ";;"}, "format.delimiter"),
        ({"type": "csv", "delimiter": ""}, "format.delimiter"),
        ({"type": "csv", "quote": "''"}, "format.quote"),
    ],
)
def test_validate_format_refuses_a_delimiter_or_quote_longer_than_one_character(table, field):
    with pytest.raises(ConfigError) as excinfo:
        validate_format(table)

    assert excinfo.value.field == field
    assert excinfo.value.reason == "must be a single character"


def test_validate_format_refuses_a_bad_schema_naming_format_schema():
    with pytest.raises(ConfigError) as excinfo:
        validate_format({"type": "jsonl", "schema": "id BIGINT, id STRING"})

    assert excinfo.value.field == "format.schema"


def test_validate_format_does_not_change_the_table_it_is_given():
    table = {"type": "csv", "header": True}

    validate_format(table)

    assert table == {"type": "csv", "header": True}
