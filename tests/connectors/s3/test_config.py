"""The ``[source]`` table of an s3 source: the issue's TOML as it is, every bad field
refused naming it, secrets masked; nothing here connects."""

from __future__ import annotations

import pytest

from connectors.s3 import sink_reads_back
from connectors.s3.config import S3SourceConfig, key_regex
from source_support.errors import ConfigError
from source_support.registry import mask_section, source_is_unbounded, validate_source

#: The table of issue 17, as a user writes it.
ISSUE_TABLE = {
    "type": "s3",
    "endpoint_url": "http://127.0.0.1:9000",
    "bucket": "events",
    "prefix": "2026/11/",
    "pattern": "**/*.csv.gz",
    "region": "us-east-1",
    "access_key_id": "AKIAEXAMPLE",
    "secret_access_key": "s3cr3t-key",
    "watch": False,
    "split_size_mb": 64,
}


def test_the_issues_table_is_taken_as_it_is(env):
    kind, stored = validate_source(ISSUE_TABLE, env)

    config = S3SourceConfig.from_dict(stored)
    assert kind == "s3"
    assert (config.bucket, config.prefix, config.pattern, config.split_size_mb) == (
        "events",
        "2026/11/",
        "**/*.csv.gz",
        64,
    )
    assert not source_is_unbounded("s3", stored)
    assert source_is_unbounded("s3", validate_source({**ISSUE_TABLE, "watch": True}, env)[1])


def test_secrets_are_masked(env):
    masked = mask_section("source", {"type": "s3", **validate_source(ISSUE_TABLE, env)[1]})
    assert "s3cr3t-key" not in str(masked) and "AKIAEXAMPLE" not in str(masked)
    assert masked["bucket"] == "events"


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"bucket": None}, "source.bucket"),
        ({"bucket": "Events!"}, "source.bucket"),
        ({"bucket": "ab"}, "source.bucket"),
        ({"bucket": 7}, "source.bucket"),
        ({"prefix": "/2026/"}, "source.prefix"),
        ({"prefix": "x" * 1025}, "source.prefix"),
        ({"pattern": ""}, "source.pattern"),
        ({"pattern": "/abs/*.csv"}, "source.pattern"),
        ({"endpoint_url": "ftp://127.0.0.1:9000"}, "source.endpoint_url"),
        ({"region": 5}, "source.region"),
        ({"access_key_id": None}, "source.access_key_id"),
        ({"secret_access_key": None}, "source.secret_access_key"),
        ({"watch": "yes"}, "source.watch"),
        ({"split_size_mb": 0}, "source.split_size_mb"),
        ({"split_size_mb": "big"}, "source.split_size_mb"),
        ({"connection": "lake"}, "source.endpoint_url"),
        ({"colour": "red"}, "source.colour"),
    ],
)
def test_a_bad_field_is_refused_naming_it(env, change, field):
    table = {k: v for k, v in {**ISSUE_TABLE, **change}.items() if v is not None}
    with pytest.raises(ConfigError) as caught:
        validate_source(table, env)
    assert caught.value.field == field, caught.value
    assert "s3cr3t-key" not in str(caught.value)


@pytest.mark.parametrize(
    ("pattern", "key", "matches"),
    [
        ("**/*.csv.gz", "a.csv.gz", True),
        ("**/*.csv.gz", "d/e/a.csv.gz", True),
        ("*.csv.gz", "d/a.csv.gz", False),
        ("*/*.csv", "d/a.csv", True),
        ("day-?/[ab].csv", "day-1/b.csv", True),
        ("day-?/[!ab].csv", "day-1/b.csv", False),
        ("**", "any/thing", True),
    ],
)
def test_the_pattern_is_a_glob_over_keys_below_the_prefix(pattern, key, matches):
    assert bool(key_regex(pattern).fullmatch(key)) is matches


def test_a_sink_writing_where_the_source_reads_is_named():
    source = {"bucket": "events", "prefix": "2026/"}
    assert "read its own output" in sink_reads_back(source, "parquet", {"path": "s3://events/2026/out"}, None)
    assert sink_reads_back(source, "parquet", {"path": "s3://events/out/"}, None) == ""
    assert sink_reads_back(source, "parquet", {"path": "s3://other/2026/"}, None) == ""
    assert sink_reads_back(source, "csv", {"path": "out/x"}, None) == ""
