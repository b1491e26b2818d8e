"""The files source and the parquet/csv/json sinks check what they declare, and their
defaults and bounds are the declared ones."""

from __future__ import annotations

import pytest

from connectors.files.config import WATCH_FIELDS, FilesSourceConfig
from source_support.errors import ConfigError
from source_support.options import option_named
from source_support.registry import section_options, validate_sink
from source_support.testing.options_contract import OptionsContract


class TestFilesSourceOptions(OptionsContract):
    section, type_name = "source", "files"

    def full_table(self, env):
        return {
            "path": "data/sensors/*.csv",
            "split_size_mb": 0.5,
            "open_cost_kb": 8,
            "allow_empty": True,
            "watch": True,
            "discovery_interval_ms": 500,
            "settle_ms": 0,
            "max_file_age_ms": 60_000,
        }


#: An s3:// path and how to reach it: the fields a file sink has beside its own.
S3_FIELDS = {
    "path": "s3://lake/data/out",
    "endpoint_url": "http://127.0.0.1:9000",
    "region": "eu-west-1",
    "access_key_id": "key-id",
    "secret_access_key": "secret-key",
}


class S3OrConnection:
    """The full table writes an s3:// path with a typed endpoint and key pair; ``connection``
    (which excludes them) is checked in a table of its own."""

    def test_the_full_table_sets_every_declared_option(self, env):
        assert set(self.full_table(env)) | {"connection"} == {option.name for option in self.options}

    def test_a_table_with_a_connection_instead_of_the_typed_fields_is_accepted(self, env):
        table = {k: v for k, v in self.full_table(env).items() if k not in S3_FIELDS or k == "path"}

        stored = self.validate({**table, "connection": "lake"}, env)

        assert stored["connection"] == "lake" and "endpoint_url" not in stored


class TestParquetSinkOptions(S3OrConnection, OptionsContract):
    section, type_name = "sink", "parquet"

    def full_table(self, env):
        return {**S3_FIELDS, "compression": "zstd", "partition_by": ["country"]}


class TestCsvSinkOptions(S3OrConnection, OptionsContract):
    section, type_name = "sink", "csv"

    def full_table(self, env):
        return {
            **S3_FIELDS,
            "compression": "gzip",
            "partition_by": [],
            "header": False,
            "delimiter": ";",
        }


class TestJsonSinkOptions(S3OrConnection, OptionsContract):
    section, type_name = "sink", "json"

    def full_table(self, env):
        return {**S3_FIELDS, "compression": "none", "partition_by": ["day", "country"]}


def test_a_source_without_options_takes_and_stores_the_declared_defaults(env):
    config = FilesSourceConfig.parse({"path": "data"}, env)

    defaults = {option.name: option.default for option in FilesSourceConfig.OPTIONS[1:]}
    assert {name: getattr(config, name) for name in defaults} == defaults
    assert config.to_dict() == {"path": str(env.base_dir / "data"), **defaults}


def test_a_source_stored_by_an_older_version_without_its_defaults_loads_with_them(env):
    # Before issue 16 a files source stored only the fields not at their defaults.
    stored = {"path": str(env.base_dir / "data"), "split_size_mb": 0.5}

    config = FilesSourceConfig.from_dict(stored)

    assert config.split_size_mb == 0.5 and config.watch is False and config.settle_ms == 1_000
    assert config.to_dict() == FilesSourceConfig.parse({"path": "data", "split_size_mb": 0.5}, env).to_dict()


@pytest.mark.parametrize("name", WATCH_FIELDS)
def test_a_watch_option_is_accepted_at_the_ends_of_its_declared_range(env, name):
    option = option_named(FilesSourceConfig.OPTIONS, name)

    for value in (option.minimum, option.maximum):
        config = FilesSourceConfig.parse({"path": "data", "watch": True, name: value}, env)
        assert getattr(config.watch_options, name) == value


@pytest.mark.parametrize("name", WATCH_FIELDS)
def test_a_watch_option_past_its_declared_range_is_refused_naming_it(env, name):
    option = option_named(FilesSourceConfig.OPTIONS, name)

    for value in (option.minimum - 1, option.maximum + 1):
        with pytest.raises(ConfigError) as caught:
            FilesSourceConfig.parse({"path": "data", "watch": True, name: value}, env)
        assert caught.value.field == f"source.{name}"
        assert caught.value.reason == f"must be between {option.minimum} and {option.maximum}"


def test_a_watch_option_without_watch_is_refused_before_its_range(env):
    with pytest.raises(ConfigError) as caught:
        FilesSourceConfig.parse({"path": "data", "settle_ms": -5}, env)

    assert caught.value.field == "source.settle_ms"
    assert caught.value.reason == "applies only to a watched source (watch = true)"


@pytest.mark.parametrize("kind", ["parquet", "csv", "json"])
def test_a_sink_stores_the_declared_default_compression(env, kind):
    declared = option_named(section_options("sink", kind), "compression")

    _, stored = validate_sink({"type": kind, "path": "data/out"}, env)

    assert stored["compression"] == declared.default == ("snappy" if kind == "parquet" else "none")


@pytest.mark.parametrize("kind", ["parquet", "csv", "json"])
def test_a_sink_refuses_a_compression_it_does_not_declare(env, kind):
    declared = option_named(section_options("sink", kind), "compression")

    with pytest.raises(ConfigError) as caught:
        validate_sink({"type": kind, "path": "data/out", "compression": "rar"}, env)

    assert caught.value.field == "sink.compression"
    assert caught.value.reason == f"must be one of {', '.join(declared.choices)}"


def test_only_the_csv_sink_declares_header_and_delimiter():
    names = {kind: {o.name for o in section_options("sink", kind)} for kind in ("parquet", "csv", "json")}

    assert names["csv"] - names["parquet"] == {"header", "delimiter"}
    assert (
        names["parquet"] == names["json"] == {"path", "compression", "partition_by", "connection", *S3_FIELDS}
    )
