"""Options declared once: the JSON Schemas, the field checks and the masking derived from them.

The formats' option contracts are here (``source_support.testing.OptionsContract``, which
each connector's ``test_config_options.py`` inherits too).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from source_support.errors import ConfigError
from source_support.formats import FORMATS
from source_support.options import (
    MASK,
    REQUIRED,
    Option,
    check_bounds,
    mask_config,
    option_types,
    options_json_schema,
    unmask_config,
)
from source_support.registry import (
    SINKS,
    SOURCES,
    Environment,
    connector_catalog,
    mask_section,
    section_options,
    unmask_section,
)
from source_support.testing.options_contract import OptionsContract, schema_errors

#: The keywords of an OpenAPI 3.0 Schema Object (also meaningful in draft 2020-12).
OPENAPI_30_KEYWORDS = {
    "title", "type", "description", "properties", "required", "additionalProperties", "default",
    "enum", "minimum", "maximum", "items", "anyOf", "writeOnly", "format", "example",
}  # fmt: skip
JSON_TYPES = {"string", "integer", "number", "boolean", "array", "object"}

DB = Option("db", int, "The database number.", default=0, minimum=0, maximum=15)
URL = Option("url", str, "The server.", default=None, secret="url")
PASSWORD = Option("password", str, "The password.", default=None, secret="value")
TOKEN = Option("token", str, "The token.", secret="value")
MODE = Option("mode", str, "How to write.", default="append", choices=("append", "replace"))
SIZE = Option("size", (int, float), "A size in MB.", default=64)
COLUMNS = Option("columns", list, "Column names.", default=[], items=str, example=["a"])
OPTIONS = (URL, PASSWORD, TOKEN, DB, MODE, SIZE, COLUMNS)


def openapi_30_problems(schema: Any, where: str = "schema") -> list[str]:
    """What in ``schema`` is not an OpenAPI 3.0 Schema Object (empty: nothing)."""
    if not isinstance(schema, dict):
        return [f"{where} is not an object"]
    problems = [
        f"{where}.{key} is not an OpenAPI 3.0 keyword" for key in schema if key not in OPENAPI_30_KEYWORDS
    ]
    if "type" in schema and schema["type"] not in JSON_TYPES:
        problems.append(f"{where}.type is {schema['type']!r}, not one JSON type")
    if schema.get("type") == "array" and "items" not in schema:
        problems.append(f"{where} is an array without items")
    if "required" in schema and not set(schema["required"]) <= set(schema.get("properties", {})):
        problems.append(f"{where}.required names an undeclared property")
    for name, sub in schema.get("properties", {}).items():
        problems += openapi_30_problems(sub, f"{where}.properties.{name}")
    for index, sub in enumerate(schema.get("anyOf", [])):
        problems += openapi_30_problems(sub, f"{where}.anyOf[{index}]")
    if schema.get("items"):
        problems += openapi_30_problems(schema["items"], f"{where}.items")
    return problems


@pytest.fixture()
def env(tmp_path) -> Environment:
    return Environment(allowed_roots=(tmp_path,), base_dir=tmp_path, redis_url="redis://127.0.0.1:6379/11")


class TestCsvFormatOptions(OptionsContract):
    section, type_name = "format", "csv"

    def full_table(self, env):
        return {
            "schema": "id BIGINT, name STRING",
            "header": False,
            "delimiter": ";",
            "quote": "'",
            "multiline": True,
            "null_values": ["", "NA"],
            "date_format": "yyyy/MM/dd",
            "timestamp_format": "dd/MM/yyyy HH:mm:ss",
            "encoding": "latin-1",
            "comment": "#",
            "field": "data",
            "on_schema_change": "rescue",
        }


class TestJsonLinesFormatOptions(OptionsContract):
    section, type_name = "format", "jsonl"

    def full_table(self, env):
        return {
            "schema": "id BIGINT, tags ARRAY<STRING>",
            "null_values": ["", "NA"],
            "date_format": "yyyy/MM/dd",
            "timestamp_format": "dd/MM/yyyy HH:mm:ss",
            "encoding": "utf-16",
            "comment": "//",
            "field": "data",
            "on_schema_change": "evolve",
        }


class TestFieldsFormatOptions(OptionsContract):
    section, type_name = "format", "fields"

    def full_table(self, env):
        return {
            "schema": "id BIGINT, customer STRING",
            "null_values": ["", "NA"],
            "date_format": "yyyy/MM/dd",
            "timestamp_format": "dd/MM/yyyy HH:mm:ss",
            "on_schema_change": "rescue",
        }


# The catalog ---------------------------------------------------------------------------


def _catalog_entries():
    catalog = connector_catalog()
    return [
        (kind, entry["type"], entry) for kind in ("sources", "formats", "sinks") for entry in catalog[kind]
    ]


def test_the_catalog_lists_every_registered_source_format_and_sink():
    catalog = connector_catalog()

    assert [e["type"] for e in catalog["sources"]] == sorted(SOURCES)
    assert [e["type"] for e in catalog["formats"]] == sorted(FORMATS)
    assert [e["type"] for e in catalog["sinks"]] == sorted(SINKS)
    assert {"files", "redis_streams", "sequence"} <= set(SOURCES)
    assert {"csv", "jsonl", "fields", "avro", "raw", "parquet"} == set(FORMATS)
    assert {"parquet", "csv", "json", "redis_stream"} <= set(SINKS)


@pytest.mark.parametrize(("kind", "type_name", "entry"), _catalog_entries(), ids=lambda v: str(v)[:20])
def test_every_catalog_schema_is_a_valid_json_schema_and_openapi_30_schema(kind, type_name, entry):
    schema = entry["schema"]

    Draft202012Validator.check_schema(schema)
    assert openapi_30_problems(schema) == []
    assert schema["properties"]["type"]["enum"] == [type_name]
    assert schema["additionalProperties"] is False
    assert entry["description"] and schema["description"] == entry["description"]


@pytest.mark.parametrize(("kind", "type_name", "entry"), _catalog_entries(), ids=lambda v: str(v)[:20])
def test_every_catalog_schema_declares_what_the_validator_checks(kind, type_name, entry):
    section = kind.removesuffix("s")
    options = section_options(section, type_name)

    assert options, f"{section} {type_name} declares no options"
    assert set(entry["schema"]["properties"]) == {"type", *option_types(options)}
    assert entry["schema"]["required"] == ["type", *(o.name for o in options if o.required)]


def test_the_catalog_says_which_sources_can_be_unbounded_and_which_sinks_append():
    catalog = connector_catalog()
    unbounded = {e["type"]: e["unbounded"] for e in catalog["sources"]}
    appends = {e["type"]: e["appends"] for e in catalog["sinks"]}

    assert {t: unbounded[t] for t in ("files", "redis_streams", "sequence")} == {
        "files": "config",
        "redis_streams": True,
        "sequence": False,
    }
    assert all(appends[t] for t in ("parquet", "csv", "json", "redis_stream"))


def test_section_options_of_an_unknown_section_or_type_are_empty():
    assert section_options("source", "ftp") == ()
    assert section_options("sink", "excel") == ()
    assert section_options("format", "xml") == ()
    assert section_options("transform", "sql") == ()
    assert section_options("source", None) == ()


def test_section_options_of_a_format_alias_are_those_of_its_format():
    assert (
        section_options("format", "ndjson") == section_options("format", "jsonl") == FORMATS["jsonl"].options
    )
    assert section_options("format", "JSON") == FORMATS["jsonl"].options


def test_the_catalog_marks_redis_urls_as_write_only_secrets():
    catalog = connector_catalog()
    redis_source = next(e for e in catalog["sources"] if e["type"] == "redis_streams")
    redis_sink = next(e for e in catalog["sinks"] if e["type"] == "redis_stream")

    for entry in (redis_source, redis_sink):
        assert entry["schema"]["properties"]["url"]["writeOnly"] is True
        assert "format" not in entry["schema"]["properties"]["url"]


# The schema of declared options --------------------------------------------------------


def test_the_schema_holds_types_defaults_bounds_choices_and_secrets():
    schema = options_json_schema(OPTIONS, title="demo sink", type_name="demo", description="A demo.")

    assert schema["title"] == "demo sink" and schema["description"] == "A demo."
    assert schema["required"] == ["type", "token"]
    props = schema["properties"]
    assert props["db"] == {
        "type": "integer",
        "description": "The database number.",
        "default": 0,
        "minimum": 0,
        "maximum": 15,
    }
    assert props["mode"]["enum"] == ["append", "replace"] and props["mode"]["default"] == "append"
    assert props["size"]["type"] == "number"
    assert props["columns"] == {
        "type": "array",
        "items": {"type": "string"},
        "description": "Column names.",
        "default": [],
        "example": ["a"],
    }
    assert props["token"] == {
        "type": "string",
        "description": "The token.",
        "writeOnly": True,
        "format": "password",
    }
    assert props["url"] == {"type": "string", "description": "The server.", "writeOnly": True}
    assert "default" not in props["password"]


def test_the_schema_refuses_what_is_out_of_bounds_or_not_a_choice():
    schema = options_json_schema(OPTIONS, title="demo sink", type_name="demo")

    errors = schema_errors(schema, {"type": "other", "token": "t", "db": 16, "mode": "merge", "size": True})

    assert sorted(e.split(":")[0] for e in errors) == ["db", "mode", "size", "type"]


def test_an_option_of_an_unknown_type_or_secret_kind_cannot_be_declared():
    with pytest.raises(TypeError, match="set"):
        Option("tags", set, "Tags.")
    with pytest.raises(ValueError, match="secret"):
        Option("key", str, "A key.", secret="yes")


def test_required_is_one_sentinel_that_survives_a_copy():
    option = Option("path", str, "A path.")

    assert option.required and not option.has_default
    assert copy.deepcopy(option).default is REQUIRED
    assert repr(REQUIRED) == "REQUIRED"
    assert option_types(OPTIONS)["size"] == (int, float)


@pytest.mark.parametrize(
    ("table", "field", "reason"),
    [
        ({"db": 16}, "demo.db", "must be between 0 and 15"),
        ({"db": -1}, "demo.db", "must be between 0 and 15"),
        ({"mode": "merge"}, "demo.mode", "must be one of append, replace"),
    ],
)
def test_check_bounds_refuses_a_value_out_of_its_declared_range_naming_the_field(table, field, reason):
    with pytest.raises(ConfigError) as caught:
        check_bounds("demo", OPTIONS, table)

    assert (caught.value.field, caught.value.reason) == (field, reason)


def test_check_bounds_accepts_the_ends_of_a_range():
    check_bounds("demo", OPTIONS, {"db": 0, "mode": "replace"})
    check_bounds("demo", OPTIONS, {"db": 15})


def test_check_bounds_with_one_end_says_which():
    low = Option("n", int, "A count.", minimum=1)
    high = Option("m", int, "A cap.", default=None, maximum=9)

    with pytest.raises(ConfigError, match="must be at least 1"):
        check_bounds("demo", (low,), {"n": 0})
    with pytest.raises(ConfigError, match="must be at most 9"):
        check_bounds("demo", (high,), {"m": 10})


# Masking -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "masked"),
    [
        ("redis://user:pw@h:1/0", "redis://user:****@h:1/0"),
        ("redis://:secret@host:6379/0", "redis://:****@host:6379/0"),
        ("rediss://default:p@ss@host:6380/2", "rediss://default:****@host:6380/2"),
        ("redis://token@host:6379", "redis://****@host:6379"),
        ("redis://host:6379/0?password=secret&db=1", "redis://host:6379/0?password=****&db=1"),
        ("unix://:pw@/run/redis.sock?db=0", "unix://:****@/run/redis.sock?db=0"),
        ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
        ("unix:///run/redis.sock?db=2", "unix:///run/redis.sock?db=2"),
    ],
)
def test_a_url_secret_is_shown_with_its_credentials_masked(url, masked):
    assert mask_config((URL,), {"url": url}) == {"url": masked}


def test_value_secrets_are_masked_and_other_options_are_kept():
    stored = {"url": "redis://:pw@h:1/0", "password": "hunter2", "token": "t0k", "db": 3}

    masked = mask_config(OPTIONS, stored)

    assert masked == {"url": "redis://:****@h:1/0", "password": MASK, "token": MASK, "db": 3}
    assert stored["password"] == "hunter2"  # a copy: the stored dict is untouched


def test_an_empty_or_absent_secret_is_not_shown_as_set():
    assert mask_config(OPTIONS, {"password": "", "db": 1}) == {"password": "", "db": 1}


def test_a_masked_config_sent_back_keeps_the_stored_secrets():
    stored = {"url": "redis://user:pw@h:1/0", "password": "hunter2", "token": "t0k", "db": 3}

    assert unmask_config(OPTIONS, mask_config(OPTIONS, stored), stored) == stored


def test_a_new_secret_sent_replaces_the_stored_one():
    stored = {"url": "redis://user:pw@h:1/0", "password": "hunter2", "db": 3}
    sent = {**mask_config(OPTIONS, stored), "password": "correct horse", "url": "redis://user:new@h:1/0"}

    assert unmask_config(OPTIONS, sent, stored) == {
        "url": "redis://user:new@h:1/0",
        "password": "correct horse",
        "db": 3,
    }


def test_a_url_edited_around_its_masked_password_does_not_carry_the_stored_password():
    stored = {"url": "redis://user:pw@h:1/0"}
    sent = {"url": "redis://user:****@elsewhere:1/0"}

    assert unmask_config(OPTIONS, sent, stored) == sent


def test_a_secret_left_out_stays_out():
    assert unmask_config(OPTIONS, {"db": 1}, {"password": "hunter2", "db": 1}) == {"db": 1}


def test_a_url_without_credentials_is_unchanged_by_the_round_trip():
    stored = {"url": "redis://127.0.0.1:6379/0"}

    assert mask_config(OPTIONS, stored) == stored
    assert unmask_config(OPTIONS, mask_config(OPTIONS, stored), stored) == stored


def test_mask_section_masks_by_the_type_of_the_table():
    source = {"type": "redis_streams", "streams": "orders:*", "url": "redis://:pw@redis:6379/0"}
    sink = {"type": "redis_stream", "key": "out", "url": "redis://app:pw@redis:6379/1"}

    assert mask_section("source", source) == {**source, "url": "redis://:****@redis:6379/0"}
    assert mask_section("sink", sink) == {**sink, "url": "redis://app:****@redis:6379/1"}
    assert mask_section("source", {"type": "ftp", "url": "ftp://u:pw@h"}) == {
        "type": "ftp",
        "url": "ftp://u:pw@h",
    }


def test_unmask_section_keeps_the_stored_secret_only_for_the_same_type():
    stored = {"type": "redis_stream", "key": "out", "url": "redis://app:pw@redis:6379/1"}

    assert unmask_section("sink", mask_section("sink", stored), stored) == stored
    other = {"type": "parquet", "path": "out", "url": "redis://app:****@redis:6379/1"}
    assert unmask_section("sink", other, stored) == other
