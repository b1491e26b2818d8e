"""Record formats: parsing blocks, finding bad records, inferring schemas, validating [format]."""

from __future__ import annotations

import datetime as dt
import json

import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.json as pa_json
import pytest

from source_support.errors import ConfigError
from source_support.formats import CsvFormat, FieldsFormat, FormatSpec, JsonLinesFormat, validate_format
from source_support.formats.avro import AvroFormat
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
        {"id": 3, "name": None, "temperature": 0.0},
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


# Zoned timestamps (issue 7 item 6)


def test_csv_zoned_and_naive_timestamps_read_as_the_instants_they_name():
    fmt = CsvFormat(schema=parse_ddl("id BIGINT, at TIMESTAMP"), header=False)
    block = b"1,2013-01-01T10:00:00Z\n2,2013-01-01T10:00:00+02:00\n3,2013-01-01 10:00:00\n4,\n"

    table, bad = fmt.parse(block, 0)

    assert bad == []
    utc = dt.UTC
    assert table.column("at").to_pylist() == [
        dt.datetime(2013, 1, 1, 10, tzinfo=utc),
        dt.datetime(2013, 1, 1, 8, tzinfo=utc),
        dt.datetime(2013, 1, 1, 10, tzinfo=utc),
        None,
    ]


def test_csv_a_column_of_zoned_timestamps_is_parsed_natively_after_its_first_block():
    fmt = CsvFormat(schema=parse_ddl("at TIMESTAMP"), header=False)
    fmt.parse(b"2013-01-01T10:00:00Z\n", 0)
    calls = _count_calls(fmt, "_locate")

    table, bad = fmt.parse(b"2013-01-02T10:00:00+01:00\n", 0)

    assert (bad, calls) == ([], [])
    assert table.column("at").to_pylist() == [dt.datetime(2013, 1, 2, 9, tzinfo=dt.UTC)]


def test_csv_infers_a_column_of_zoned_or_mixed_timestamps_as_timestamp():
    sample = b"a,b\n2013-01-01T10:00:00Z,2013-01-01T10:00:00Z\n2013-01-01T11:00:00+02:00,2013-01-01 10:00\n"

    schema = CsvFormat(header=True).infer_schema(sample)

    assert schema == pa.schema([("a", pa.timestamp("us", tz="UTC")), ("b", pa.timestamp("us", tz="UTC"))])


def test_jsonl_zoned_and_naive_timestamps_read_as_instants():
    block = b'{"at": "2013-01-01T10:00:00Z"}\n{"at": "2013-01-01T10:00:00-01:00"}\n{"at": "2013-01-01 10:00:00"}\n'

    table, bad = JsonLinesFormat(parse_ddl("at TIMESTAMP")).parse(block, 0)

    assert bad == []
    assert [v.hour for v in table.column("at").to_pylist()] == [10, 11, 10]


def test_a_value_that_is_not_a_timestamp_is_a_bad_record():
    fmt = CsvFormat(schema=parse_ddl("id BIGINT, at TIMESTAMP"), header=False)

    table, bad = fmt.parse(b"1,2013-01-01T10:00:00Z\n2,yesterday\n", 0)

    assert table.column("id").to_pylist() == [1]
    assert [b.reason for b in bad] == ["column 2 'at': invalid value 'yesterday' for TIMESTAMP"]


# Nested JSON (issue 7 item 6)


def test_jsonl_infers_nested_objects_as_structs_and_reads_them():
    sample = (
        b'{"id": 1, "user": {"name": "u0", "tags": []}}\n{"id": 2, "user": {"name": "u1", "tags": ["a"]}}\n'
    )
    fmt = JsonLinesFormat(None)

    schema = fmt.infer_schema(sample)
    table, bad = fmt.with_schema(schema).parse(sample, 0)

    assert schema.field("user").type == pa.struct([("name", pa.string()), ("tags", pa.list_(pa.string()))])
    assert bad == []
    assert table.column("user").to_pylist() == [{"name": "u0", "tags": []}, {"name": "u1", "tags": ["a"]}]


def test_jsonl_reads_declared_nested_types_and_maps():
    fmt = JsonLinesFormat(parse_ddl("user STRUCT<name STRING, tags: ARRAY<STRING>>, m MAP<STRING, BIGINT>"))
    block = b'{"user": {"name": "u0", "tags": ["x"]}, "m": {"a": 1, "b": 2}}\n{"user": null}\n'

    table, bad = fmt.parse(block, 0)

    assert bad == []
    assert table.to_pylist() == [
        {"user": {"name": "u0", "tags": ["x"]}, "m": [("a", 1), ("b", 2)]},
        {"user": None, "m": None},
    ]


def test_jsonl_a_nested_value_of_the_wrong_type_is_a_bad_record_naming_the_field():
    fmt = JsonLinesFormat(parse_ddl("user STRUCT<name: STRING, tags: ARRAY<STRING>>"))
    block = b'{"user": {"name": "u0", "tags": []}}\n{"user": {"name": "u1", "tags": [1]}}\n'

    table, bad = fmt.parse(block, 0)

    assert table.num_rows == 1
    assert [(b.position, b.reason) for b in bad] == [
        (37, "field 'user.tags[0]': expected STRING, found a number 1")
    ]


def test_csv_refuses_a_nested_schema():
    with pytest.raises(ConfigError, match="CSV value cannot hold a nested type"):
        validate_format({"type": "csv", "schema": "user STRUCT<name: STRING>"})


# Bad records cost about one parse (issue 7 item 7)


def _count_calls(fmt, name: str) -> list:
    calls: list = []
    method = getattr(fmt, name)

    def counted(*args, **kwargs):
        calls.append(args)
        return method(*args, **kwargs)

    setattr(fmt, name, counted)
    return calls


def _arrow_reads(monkeypatch) -> list:
    reads: list = []
    for module, name in ((pa_csv, "read_csv"), (pa_json, "read_json")):
        original = getattr(module, name)

        def counted(*args, _original=original, _name=name, **kwargs):
            reads.append(_name)
            return _original(*args, **kwargs)

        monkeypatch.setattr(module, name, counted)
    return reads


ALL_BAD_CSV = b"".join(b"%d,s%d,hot\n" % (i, i % 7) for i in range(20_000))
ALL_BAD_JSON = b"".join(b'{"id": %d, "name": "s", "temperature": "hot"}\n' % i for i in range(20_000))


@pytest.mark.parametrize(("fmt", "block"), [(csv(), ALL_BAD_CSV), (JsonLinesFormat(SCHEMA), ALL_BAD_JSON)])
def test_a_block_of_20000_bad_records_is_located_in_about_one_parse(monkeypatch, fmt, block):
    reads = _arrow_reads(monkeypatch)

    table, bad = fmt.parse(block, 100)

    assert table.num_rows == 0
    assert len(bad) == 20_000
    assert len(reads) <= 2  # the fast parse that failed, then one parse as text (CSV)
    assert bad[1].position == 100 + block.index(b"\n") + 1
    assert "'temperature'" in bad[0].reason and "hot" in bad[0].reason


@pytest.mark.parametrize(("fmt", "block"), [(csv(), ALL_BAD_CSV), (JsonLinesFormat(SCHEMA), ALL_BAD_JSON)])
def test_first_only_stops_at_the_first_bad_record(monkeypatch, fmt, block):
    reads = _arrow_reads(monkeypatch)
    good = b"1,a,1.5\n" if isinstance(fmt, CsvFormat) else b'{"id": 1}\n'

    table, bad = fmt.parse(good + block, 0, first_only=True)

    assert [b.position for b in bad] == [len(good)]
    assert len(reads) <= 2


def test_a_block_with_one_bad_record_keeps_every_good_one_in_order(monkeypatch):
    rows = [b"%d,s,%d.5\n" % (i, i) for i in range(20_000)]
    rows[12_345] = b"12345,s,\xff\xfe\n"
    rows[777] = b"777,s\n"
    reads = _arrow_reads(monkeypatch)

    table, bad = csv().parse(b"".join(rows), 0)

    assert table.column("id").to_pylist() == [i for i in range(20_000) if i not in (777, 12_345)]
    assert [b.reason for b in bad][0] == "expected 3 columns, found 2"
    assert "column 3 'temperature'" in bad[1].reason
    assert len(reads) == 2


def test_csv_column_numbers_count_from_one_and_name_the_column():
    _, bad = csv().parse(b"1,a,1.5\n2,b,warm\nx,c,3\n", 0)

    assert [b.reason for b in bad] == [
        "column 3 'temperature': invalid value 'warm' for DOUBLE",
        "column 1 'id': invalid value 'x' for BIGINT",
    ]


# Columns by header name (issue 7 item 5)


def test_csv_columns_are_found_by_header_name_whatever_their_order():
    fmt = CsvFormat(schema=parse_ddl("a BIGINT, b STRING"), header=True)

    first, _ = fmt.bind_header(b"a,b\n").parse(b"1,x\n", 0)
    second, _ = fmt.bind_header(b"b,extra,A\r\n").parse(b"x,ignored,1\n", 0)

    assert first.to_pylist() == second.to_pylist() == [{"a": 1, "b": "x"}]


def test_a_header_without_a_schema_column_is_refused_naming_the_columns():
    fmt = CsvFormat(schema=parse_ddl("a BIGINT, b STRING, c DOUBLE"), header=True)

    with pytest.raises(ValueError, match=r"lacks the columns b, c \(header: a, d\)"):
        fmt.bind_header(b"a,d\n")


# Large records (issue 7 item 19)


@pytest.mark.parametrize("kind", ["csv", "jsonl"])
def test_a_4_mb_record_parses(kind):
    big = "x" * (4 << 20)
    if kind == "csv":
        fmt, block = csv(), f"1,a,1.5\n2,{big},2.5\n".encode()
    else:
        fmt, block = JsonLinesFormat(SCHEMA), f'{{"id": 1}}\n{{"id": 2, "name": "{big}"}}\n'.encode()

    table, bad = fmt.parse(block, 0)

    assert bad == []
    assert table.column("id").to_pylist() == [1, 2]
    assert len(table.column("name")[1].as_py()) == 4 << 20


# Inference messages (issue 7 item 20)


def test_jsonl_inference_names_the_line_of_a_truncated_record():
    sample = b'{"a": 1}\n' * 777 + b'{"a": \n{"a": 2}\n'

    with pytest.raises(ValueError, match=r"^line 778 is not valid JSON"):
        JsonLinesFormat(None).infer_schema(sample)


def test_jsonl_inference_names_the_line_of_a_type_change():
    sample = b'{"a": 1}\n' * 3 + b"\n" + b'{"a": "x"}\n'

    with pytest.raises(ValueError, match=r"^line 5: .*changed from number to string"):
        JsonLinesFormat(None).infer_schema(sample)


# The fields format (stream entries) and the field option


def test_fields_is_a_format_with_an_optional_schema():
    assert validate_format({"type": "fields"}) == FormatSpec("fields", {})
    spec = validate_format({"type": "fields", "schema": "id BIGINT"})

    assert spec.build(entries=True).schema == parse_ddl("id BIGINT")


@pytest.mark.parametrize(
    ("table", "field"),
    [
        ({"type": "fields", "header": True}, "format.header"),
        ({"type": "fields", "field": "data"}, "format.field"),
        ({"type": "fields", "schema": "tags ARRAY<STRING>"}, "format.schema"),
        ({"type": "json", "field": ""}, "format.field"),
        ({"type": "json", "field": 3}, "format.field"),
    ],
)
def test_fields_format_mistakes_name_their_field(table, field):
    with pytest.raises(ConfigError) as caught:
        validate_format(table)

    assert caught.value.field == field


def test_json_and_csv_take_the_field_that_holds_the_record():
    for kind in ("json", "csv"):
        fmt = validate_format({"type": kind, "field": "data", "schema": "id BIGINT"}).build(entries=True)

        assert fmt.record_field == "data"


def test_a_source_of_lines_refuses_the_fields_format_and_the_field_option():
    for table, field in (
        ({"type": "fields"}, "format.type"),
        ({"type": "csv", "field": "data"}, "format.field"),
    ):
        with pytest.raises(ConfigError) as caught:
            validate_format(table).build()

        assert caught.value.field == field


def test_fields_values_are_cast_to_the_schema_and_absent_or_empty_fields_are_null():
    fmt = FieldsFormat(parse_ddl("id BIGINT, name STRING, t TIMESTAMP, ok BOOLEAN, d DATE, p DECIMAL(6,2)"))
    texts = {
        "id": pa.array([b"1", b"", None], pa.binary()),
        "name": pa.array([b"a", b"", None], pa.binary()),
        "t": pa.array([b"2024-01-01T00:00:00Z", b"1704067200000", b"2024-01-01 00:00:00"], pa.binary()),
        "ok": pa.array([b"true", b"0", None], pa.binary()),
        "d": pa.array([b"2024-01-02", None, None], pa.binary()),
    }

    table, bad = fmt.convert(texts, 3)

    new_year = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
    assert bad == {}
    assert table.to_pylist() == [
        {"id": 1, "name": "a", "t": new_year, "ok": True, "d": dt.date(2024, 1, 2), "p": None},
        {"id": None, "name": None, "t": new_year, "ok": False, "d": None, "p": None},
        {"id": None, "name": None, "t": new_year, "ok": None, "d": None, "p": None},
    ]


def test_fields_values_that_do_not_cast_are_bad_records_with_the_reason():
    fmt = FieldsFormat(parse_ddl("id BIGINT, amount DOUBLE, name STRING"))
    texts = {
        "id": pa.array([b"1", b"x", b"3"], pa.binary()),
        "amount": pa.array([b"1.5", b"2", b"lots"], pa.binary()),
        "name": pa.array([b"a", b"b", b"\xff"], pa.binary()),
    }

    _, bad = fmt.convert(texts, 3)

    assert bad == {
        1: "field 'id': invalid value 'x' for BIGINT",
        2: "field 'amount': invalid value 'lots' for DOUBLE",
    }


def test_fields_schema_inference_takes_the_narrowest_type_of_each_field():
    texts = {
        "id": pa.array([b"1", b"2", None], pa.binary()),
        "amount": pa.array([b"1.5", b"2", b""], pa.binary()),
        "ok": pa.array([b"true", b"false", None], pa.binary()),
        "at": pa.array([b"2024-01-01T00:00:00Z", None, None], pa.binary()),
        "name": pa.array([b"a", b"1", None], pa.binary()),
    }

    schema = FieldsFormat(None).infer_schema(texts)

    assert schema == parse_ddl("id BIGINT, amount DOUBLE, ok BOOLEAN, at TIMESTAMP, name STRING")


def test_csv_parses_a_record_longer_than_arrows_threaded_pieces(monkeypatch):
    # Arrow refuses a record longer than the piece its threads parse ("straddles two
    # block boundaries"); the block is then read whole, losing nothing.
    monkeypatch.setattr("source_support.formats.csv.THREADED_BLOCK_BYTES", 1 << 10)
    long_name = "x" * 5000
    block = b"".join(f"{i},{long_name if i == 7 else 'n'},{i}.5\n".encode() for i in range(2000))

    table, bad = csv().parse(block, 0)

    assert bad == []
    assert table["id"].to_pylist() == list(range(2000))
    assert table["name"][7].as_py() == long_name
    assert table["temperature"][1999].as_py() == 1999.5


# The same values as each format writes them: a date-only text, a timestamp, a column of
# both, a time of day, a day that does not exist, whole numbers, decimals, text, booleans.
SAME_VALUES = {
    "day": ["1970-01-01", "2026-11-28", None],
    "at": ["2026-11-28 10:00:00", "2026-11-28T10:00:00Z", None],
    "day_or_at": ["2026-11-28", "2026-11-28 10:00:00", "2026-11-29"],
    "clock": ["10:00:00", "11:30:00", None],
    "not_a_day": ["2026-02-30", "2026-02-28", None],
    "n": [1, 2, 3],
    "x": [1.5, 2.0, 3.25],
    "name": ["acme", "globex", "hooli"],
    "ok": [True, False, True],
}


def _same_values_as(kind: str) -> bytes:
    rows = [{k: v[i] for k, v in SAME_VALUES.items()} for i in range(3)]
    if kind == "jsonl":
        return "".join(json.dumps(row) + "\n" for row in rows).encode()
    if kind == "json array":
        return json.dumps(rows, indent=1).encode() + b"\n"

    def text(value) -> str:
        return "" if value is None else str(value).lower() if isinstance(value, bool) else str(value)

    header = ",".join(SAME_VALUES) + "\n"
    return (header + "".join(",".join(text(row[k]) for k in SAME_VALUES) + "\n" for row in rows)).encode()


def test_the_same_text_is_inferred_as_the_same_type_in_every_format():
    schemas = {}
    for kind in ("csv", "jsonl", "json array"):
        sample = _same_values_as(kind)
        fmt = validate_format({"type": "csv" if kind == "csv" else "json"}).build()
        schemas[kind] = fmt.for_file(sample).infer_schema(sample)  # an array is read as one

    assert schemas["csv"] == pa.schema(
        [
            ("day", pa.date32()),
            ("at", pa.timestamp("us", tz="UTC")),
            ("day_or_at", pa.timestamp("us", tz="UTC")),
            ("clock", pa.string()),
            ("not_a_day", pa.string()),
            ("n", pa.int64()),
            ("x", pa.float64()),
            ("name", pa.string()),
            ("ok", pa.bool_()),
        ]
    )
    assert schemas["jsonl"] == schemas["csv"]
    assert schemas["json array"] == schemas["csv"]
    # Avro says its types itself: a date is its logical type date, read as DATE too.
    avro = {
        "type": "record",
        "name": "r",
        "fields": [{"name": "day", "type": {"type": "int", "logicalType": "date"}}],
    }
    assert AvroFormat(writer_schema=avro).schema == pa.schema([("day", pa.date32())])


def test_a_json_date_inferred_as_date_reads_as_dates():
    sample = b'{"day": "1970-01-01"}\n{"day": "2026-11-28"}\n'
    fmt = JsonLinesFormat(None)

    table, bad = fmt.with_schema(fmt.infer_schema(sample)).parse(sample, 0)

    assert bad == []
    assert table.column("day").to_pylist() == [dt.date(1970, 1, 1), dt.date(2026, 11, 28)]
