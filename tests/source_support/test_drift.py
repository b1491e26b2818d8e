"""format.on_schema_change at the format: what each policy lands of records that gained,
lost or retyped a column, and the changes it reports."""

from __future__ import annotations

import pyarrow as pa
import pytest

from source_support.errors import ConfigError
from source_support.formats import validate_format
from source_support.formats.drift import SchemaDrift

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string())])
JSON = b'{"id": 1, "name": "a"}\n{"id": 2, "name": "b", "tags": [1, 2]}\n'


def _format(kind: str, **options):
    return validate_format({"type": kind, **options}).build(SCHEMA)


def _seen(fmt) -> list[tuple]:
    return [(c.column, c.kind, c.position, c.records) for c in fmt.drift_seen]


@pytest.mark.parametrize(
    ("policy", "rows"),
    [
        ("evolve", [{"id": 1, "name": "a", "tags": None}, {"id": 2, "name": "b", "tags": "[1, 2]"}]),
        (
            "rescue",
            [
                {"id": 1, "name": "a", "_rescued": None},
                {"id": 2, "name": "b", "_rescued": '{"tags": "[1, 2]"}'},
            ],
        ),
        ("ignore", [{"id": 1, "name": "a"}, {"id": 2, "name": "b"}]),
    ],
)
def test_json_lines_gaining_a_field_land_as_the_policy_says(policy, rows):
    fmt = _format("jsonl", on_schema_change=policy)

    table, bad = fmt.parse(JSON, 100)

    assert (table.to_pylist(), bad) == (rows, [])
    assert _seen(fmt) == [("tags", "added", 123, 1)]  # the second record starts 23 bytes in


def test_json_lines_gaining_a_field_fail_naming_it_and_where():
    with pytest.raises(SchemaDrift) as failed:
        _format("jsonl", on_schema_change="fail").parse(JSON, 100)

    assert "new column 'tags'" in str(failed.value) and failed.value.change.position == 123


def test_a_declared_schema_without_the_option_selects_its_columns_as_before():
    fmt = _format("jsonl", schema="id BIGINT, name STRING")

    table, _ = fmt.parse(JSON, 0)

    assert table.column_names == ["id", "name"] and fmt.drift_seen == []


def test_a_csv_header_missing_a_column_fails_only_under_fail():
    header = b"id\n"
    with pytest.raises(SchemaDrift, match="the column 'name' \\(STRING\\) is missing"):
        _format("csv", on_schema_change="fail").bind_header(header)
    fmt = _format("csv", on_schema_change="ignore").bind_header(header)

    table, _ = fmt.parse(b"1\n2\n", 3)

    assert table.to_pylist() == [{"id": 1, "name": None}, {"id": 2, "name": None}]
    assert _seen(fmt) == [("name", "missing", -1, 2)]


def test_a_csv_value_of_another_type_is_rescued_not_a_bad_record():
    fmt = _format("csv", on_schema_change="rescue").bind_header(b"id,name\n")

    table, bad = fmt.parse(b"1,a\nx,b\n", 8)

    assert bad == []
    assert table.to_pylist() == [
        {"id": 1, "name": "a", "_rescued": None},
        {"id": None, "name": "b", "_rescued": '{"id": "x"}'},
    ]
    assert _seen(fmt) == [("id", "retyped", 12, 1)]


@pytest.mark.parametrize("value", ["merge", "", 1, True])
def test_a_bad_policy_is_refused_naming_the_field(value):
    with pytest.raises(ConfigError) as refused:
        validate_format({"type": "csv", "on_schema_change": value})

    assert refused.value.field == "format.on_schema_change"
