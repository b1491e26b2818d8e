"""Bad configs are refused before a flow starts, naming the field and the reason."""

from __future__ import annotations

import copy
import os

import pytest

from dataflow.models import DataFlow, FlowRun
from dataflow.services.errors import FlowStateError
from dataflow.services.flows import flow_apply, flow_start
from source_support.errors import ConfigError
from tests.helpers import spec, write_csv


@pytest.fixture()
def good(dirs):
    write_csv(dirs.data / "a.csv", range(10))
    return spec("good", str(dirs.data / "*.csv"), str(dirs.out / "sink"))


def _refused(doc) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        flow_apply(spec=doc)
    return caught.value


def _edit(doc, section, **changes):
    doc = copy.deepcopy(doc)
    for key, value in changes.items():
        if value is None:
            doc[section].pop(key, None)
        else:
            doc[section][key] = value
    return doc


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("section", "changes", "field", "reason"),
    [
        ("source", {"path": None}, "source.path", "is required"),
        ("source", {"path": "/etc/*.conf"}, "source.path", "outside the allowed roots"),
        ("source", {"path": "data/../../etc/*"}, "source.path", "outside the allowed roots"),
        ("source", {"type": "ftp"}, "source.type", "unknown source type 'ftp'"),
        ("source", {"colour": "red"}, "source.colour", "is not a field of source"),
        ("source", {"split_size_mb": 0}, "source.split_size_mb", "greater than 0"),
        ("source", {"split_size_mb": "big"}, "source.split_size_mb", "must be a number"),
        ("source", {"split_size_mb": True}, "source.split_size_mb", "must be a number"),
        # TOML has nan and inf; a stored spec is JSON, which has neither
        ("source", {"split_size_mb": float("nan")}, "source.split_size_mb", "must be a finite number"),
        ("source", {"open_cost_kb": float("inf")}, "source.open_cost_kb", "must be a finite number"),
        ("sink", {"partition_by": "day"}, "sink.partition_by", "must be a list"),
        ("format", {"type": "xml"}, "format.type", "unknown format 'xml'"),
        ("format", {"schema": "id BIGNUM"}, "format.schema", "unknown type 'BIGNUM'"),
        ("format", {"schema": "id BIGINT, id STRING"}, "format.schema", "repeat"),
        ("format", {"delimiter": ";;"}, "format.delimiter", "single character"),
        ("format", {"header": "yes"}, "format.header", "must be a bool"),
        ("transform", {"sql": "SELEC sensor FROM source"}, "transform.sql", "does not parse"),
        ("transform", {"sql": "SELECT * FROM source WHERE ("}, "transform.sql", "does not parse"),
        (
            "transform",
            {"sql": "SELECT * FROM parquet.`/etc/passwd`"},
            "transform.sql",
            "only the view 'source'",
        ),
        ("transform", {"sql": "SELECT * FROM other_table"}, "transform.sql", "only the view 'source'"),
        ("transform", {"sql": "DROP TABLE source"}, "transform.sql", "one SELECT query"),
        ("transform", {"sql": None}, "transform.sql", "is required"),
        ("sink", {"path": "/tmp/elsewhere"}, "sink.path", "outside the allowed roots"),
        ("sink", {"type": "excel"}, "sink.type", "unknown sink type 'excel'"),
        ("sink", {"compression": "rar"}, "sink.compression", "must be one of"),
        ("flow", {"parallelism": 0}, "flow.parallelism", "between 1 and 256"),
        ("flow", {"batch_size": "many"}, "flow.batch_size", "must be an integer"),
        ("flow", {"name": "good\n"}, "flow.name", "lowercase"),
        ("flow", {"name": "Has Spaces"}, "flow.name", "lowercase"),
        ("flow", {"retries": 3}, "flow.retries", "is not a field of flow"),
    ],
)
def test_bad_config_is_refused_naming_the_field(good, section, changes, field, reason):
    error = _refused(_edit(good, section, **changes))

    assert error.field == field
    assert reason in error.reason
    assert not DataFlow.objects.exists()


@pytest.mark.django_db
def test_unknown_section_and_missing_section_are_refused(good):
    assert _refused({**good, "extra": {}}).field == "extra"
    missing = dict(good)
    del missing["sink"]
    assert _refused(missing).field == "sink"


@pytest.mark.django_db
def test_applying_the_same_name_updates_the_flow(good):
    flow, created = flow_apply(spec=good)
    again, created_again = flow_apply(spec=_edit(good, "flow", parallelism=2))

    assert (created, created_again) == (True, False)
    assert again.pk == flow.pk and again.parallelism == 2


@pytest.mark.django_db
def test_a_flow_cannot_start_twice(good, settings):
    flow, _ = flow_apply(spec=good)
    flow_start(flow=flow)

    with pytest.raises(FlowStateError, match="already running"):
        flow_start(flow=flow)
    assert FlowRun.objects.filter(flow=flow).count() == 1


@pytest.mark.django_db
def test_schema_is_inferred_from_the_first_file_when_not_given(good):
    del good["format"]["schema"]
    flow, _ = flow_apply(spec=good)

    run = flow_start(flow=flow)

    assert run.schema_ddl == "`id` BIGINT, `sensor` STRING, `temperature` DOUBLE"


@pytest.mark.django_db
def test_start_refuses_a_flow_whose_roots_were_narrowed(good, settings, dirs):
    flow, _ = flow_apply(spec=good)
    settings.DATAFLOW_ALLOWED_ROOTS = [dirs.out.resolve()]

    with pytest.raises(ConfigError) as caught:
        flow_start(flow=flow)
    assert caught.value.field == "source.path"
    assert not FlowRun.objects.exists()


# Size limits and nesting: clear messages, never a RecursionError


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("section", "changes", "field", "reason"),
    [
        ("flow", {"description": "x" * 100_000}, "flow.description", "at most 16,384"),
        (
            "transform",
            {"sql": "SELECT * FROM source WHERE " + "id > 0 AND " * 7000 + "true"},
            "transform.sql",
            "at most 65,536",
        ),
        ("source", {"path": "data/" + "a" * 5000}, "source.path", "at most 4,096"),
        ("sink", {"partition_by": ["p" * 4000] * 100}, "flow", "whole spec is too large"),
    ],
    ids=["description", "sql", "path", "spec"],
)
def test_oversized_config_is_refused_naming_the_field_and_the_limit(good, section, changes, field, reason):
    error = _refused(_edit(good, section, **changes))

    assert (error.field, reason in error.reason) == (field, True), error


@pytest.mark.django_db
def test_a_deeply_nested_value_is_refused_not_a_recursion_error(good):
    nested: list = []
    for _ in range(5000):
        nested = [nested]

    error = _refused(_edit(good, "sink", partition_by=nested))

    assert error.field.startswith("sink.partition_by") and "nested too deeply" in error.reason


@pytest.mark.django_db
@pytest.mark.parametrize(
    "sql",
    [
        # Within DATAFLOW_TRANSFORM_MAX_SQL_TOKENS, past the parser's recursion.
        "SELECT " + "(" * 400 + "1" + ")" * 400 + " FROM source",
        "SELECT " + "abs(" * 40 + "id" + ")" * 40 + " FROM source",
        "SELECT " + "NOT " * 400 + "true FROM source",
    ],
    ids=["parentheses", "calls", "not"],
)
def test_a_deeply_nested_sql_is_refused_not_a_recursion_error(good, sql):
    error = _refused(_edit(good, "transform", sql=sql))

    assert error.field == "transform.sql" and "nested too deeply" in error.reason


# Item 18: the transform is checked against a declared schema when the flow is saved


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("sql", "partition_by", "field", "reason"),
    [
        (
            "SELECT sensr, count(*) AS n FROM source GROUP BY sensr",
            None,
            "transform.sql",
            "column 'sensr', which the schema does not have; did you mean 'sensor'?",
        ),
        (
            "SELECT sensor, avg(temprature) AS t FROM source GROUP BY sensor",
            None,
            "transform.sql",
            "did you mean 'temperature'?",
        ),
        ("SELECT * FROM source", ["sensorr"], "sink.partition_by", "did you mean 'sensor'?"),
        (
            "SELECT sensor, count(*) AS n FROM source GROUP BY sensor",
            ["id"],
            "sink.partition_by",
            "'id', which the transform does not output (outputs: sensor, n)",
        ),
    ],
)
def test_a_transform_naming_an_unknown_column_is_refused_when_saved(good, sql, partition_by, field, reason):
    doc = _edit(good, "transform", sql=sql)
    if partition_by:
        doc = _edit(doc, "sink", partition_by=partition_by)

    error = _refused(doc)

    assert (error.field, reason in error.reason) == (field, True), error


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("sql", "partition_by"),
    [
        ("SELECT sensor, count(*) AS n FROM source GROUP BY sensor", ["n"]),
        ("SELECT * FROM source", ["SENSOR"]),
        ("WITH t AS (SELECT id AS k, sensor FROM source) SELECT k, upper(sensor) AS s FROM t", ["s"]),
        ("SELECT transform(array(id), x -> x + 1) AS xs, sensor FROM source", ["sensor"]),
        ("SELECT s.sensor, explode(array(s.id)) FROM source s", None),
    ],
)
def test_a_transform_that_fits_the_schema_is_accepted(good, sql, partition_by):
    doc = _edit(good, "transform", sql=sql)
    if partition_by:
        doc = _edit(doc, "sink", partition_by=partition_by)

    flow, _ = flow_apply(spec=doc)

    assert flow.transform_sql == sql


@pytest.mark.django_db
def test_without_a_declared_schema_columns_are_left_to_the_run(good):
    del good["format"]["schema"]

    flow_apply(spec=_edit(good, "transform", sql="SELECT contry FROM source"))


# Items 3, 9, 10: sink and source paths, after symlinks


def _paths(good, source, sink):
    doc = _edit(good, "source", path=str(source))
    return _edit(doc, "sink", path=str(sink))


@pytest.mark.django_db
def test_a_sink_equal_to_the_source_directory_is_refused(good, dirs):
    (dirs.data / "in").mkdir()

    error = _refused(_paths(good, dirs.data / "in", dirs.data / "sub" / ".." / "in"))

    assert error.field == "sink.path" and "is the source directory" in error.reason


@pytest.mark.django_db
def test_a_sink_inside_a_globbed_source_is_refused(good, dirs):
    error = _refused(_paths(good, dirs.data / "**" / "*.csv", dirs.data / "result"))

    assert error.field == "sink.path" and "lies inside the source directory" in error.reason


@pytest.mark.django_db
def test_a_sink_containing_the_source_is_refused(good, dirs):
    error = _refused(_paths(good, dirs.out / "result" / "in" / "*.csv", dirs.out / "result"))
    assert error.field == "sink.path" and "contains the source directory" in error.reason


@pytest.mark.django_db
def test_a_sink_reaching_the_source_through_a_symlink_is_refused(good, dirs):
    os.symlink(dirs.data, dirs.out / "to-data")

    error = _refused(_paths(good, dirs.data / "*.csv", dirs.out / "to-data" / "result"))

    assert error.field == "sink.path" and "lies inside the source directory" in error.reason
    assert str(dirs.data.resolve() / "result") in error.reason


@pytest.mark.django_db
def test_a_source_reaching_the_sink_through_a_symlink_is_refused(good, dirs):
    (dirs.out / "result").mkdir()
    os.symlink(dirs.out / "result", dirs.data / "to-result")

    error = _refused(_paths(good, dirs.data / "to-result" / "*.csv", dirs.out / "result"))

    assert error.field == "sink.path" and "is the source directory" in error.reason


@pytest.mark.django_db
def test_a_sink_through_a_symlink_out_of_the_roots_is_refused(good, dirs, tmp_path):
    outside = tmp_path / "outside" / "keep"
    outside.mkdir(parents=True)
    (outside / "file.txt").write_text("precious")
    os.symlink(tmp_path / "outside", dirs.out / "evil")

    error = _refused(_paths(good, dirs.data, dirs.out / "evil" / "keep"))

    assert error.field == "sink.path"
    assert "through a symlink" in error.reason and "outside the allowed roots" in error.reason
    assert (outside / "file.txt").read_text() == "precious"


@pytest.mark.django_db
def test_a_source_directory_that_is_a_symlink_out_of_the_roots_is_refused(good, dirs, tmp_path):
    (tmp_path / "elsewhere").mkdir()
    write_csv(tmp_path / "elsewhere" / "a.csv", range(3))
    os.symlink(tmp_path / "elsewhere", dirs.data / "linked")

    for path in (dirs.data / "linked", dirs.data / "linked" / "*.csv"):
        error = _refused(_paths(good, path, dirs.out / "sink"))

        assert error.field == "source.path"
        assert "through a symlink" in error.reason and "outside the allowed roots" in error.reason


@pytest.mark.django_db
def test_a_sink_path_that_is_an_existing_file_is_refused(good, dirs):
    (dirs.out / "afile").write_text("not a directory")

    error = _refused(_paths(good, dirs.data, dirs.out / "afile"))

    assert error.field == "sink.path" and "is an existing file" in error.reason


@pytest.mark.django_db
def test_start_refuses_a_sink_whose_symlink_now_leads_out_of_the_roots(good, dirs, tmp_path):
    (dirs.out / "real").mkdir()
    (tmp_path / "outside").mkdir()
    os.symlink(dirs.out / "real", dirs.out / "link")
    flow, _ = flow_apply(spec=_paths(good, dirs.data, dirs.out / "link" / "keep"))
    assert flow.sink_config["path"] == str(dirs.out.resolve() / "real" / "keep")
    flow.sink_config["path"] = str(dirs.out / "link" / "keep")  # as typed, e.g. in the admin
    flow.save()
    os.remove(dirs.out / "link")
    os.symlink(tmp_path / "outside", dirs.out / "link")

    with pytest.raises(ConfigError) as caught:
        flow_start(flow=flow)

    assert caught.value.field == "sink.path" and "outside the allowed roots" in caught.value.reason
    assert not FlowRun.objects.exists()


@pytest.mark.django_db
def test_start_refuses_a_source_that_now_overlaps_the_sink(good, dirs):
    flow, _ = flow_apply(spec=_paths(good, dirs.data / "in", dirs.out / "sink"))
    flow.sink_config["path"] = str(dirs.data / "in" / "sink")
    flow.save()

    with pytest.raises(ConfigError) as caught:
        flow_start(flow=flow)

    assert caught.value.field == "sink.path"


def _stream_flow(sink: dict) -> dict:
    return {
        "flow": {"name": "loop"},
        "source": {"type": "redis_streams", "streams": "orders:*"},
        "format": {"type": "fields", "schema": "id BIGINT"},
        "transform": {"sql": "SELECT * FROM source"},
        "sink": sink,
    }


def test_a_stream_sink_the_source_would_read_back_is_refused(dirs):
    refused = _refused(_stream_flow({"type": "redis_stream", "key": "orders:out"}))

    assert refused.field == "sink.key"
    assert "matches source.streams 'orders:*' on the same Redis" in refused.reason


@pytest.mark.parametrize(
    "sink",
    [
        {"type": "redis_stream", "key": "results:out"},  # outside the pattern
        {"type": "redis_stream", "key": "orders:out", "url": "redis://127.0.0.1:6399/3"},  # another Redis
    ],
)
@pytest.mark.django_db
def test_a_stream_sink_outside_the_source_pattern_or_on_another_redis_is_accepted(dirs, sink):
    flow, created = flow_apply(spec=_stream_flow(sink))

    assert created and flow.sink_config["key"] == sink["key"]


@pytest.mark.django_db
def test_a_flow_name_that_is_an_api_endpoint_is_refused(good):
    refused = _refused(_edit(good, "flow", name="validate"))

    assert refused.field == "flow.name"
    assert "reserved" in str(refused)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("source", "stop", "field", "reason"),
    [
        (
            {"watch": True},
            {"at": "1700000000000-0"},
            "stop.at",
            "a files source stops at a time or at latest",
        ),
        (
            {"type": "nats_jetstream", "servers": "nats://127.0.0.1:4222", "stream": "ORDERS"},
            {"at": "1700000000000-0"},
            "stop.at",
            "a NATS stream's position is a sequence number",
        ),
        (
            {"type": "kafka", "bootstrap_servers": "127.0.0.1:9092", "topics": ["orders"]},
            {"at": "42"},
            "stop.at",
            "a Kafka stop is per partition",
        ),
        (
            {
                "type": "kafka",
                "bootstrap_servers": "127.0.0.1:9092",
                "topics": ["orders"],
                "stop_offsets": {"orders:0": 10},
            },
            {"at": "latest"},
            "source.stop_offsets",
            "not both",
        ),
    ],
    ids=["files", "nats", "kafka-position", "kafka-both"],
)
def test_a_stop_rule_the_source_refuses_is_refused_when_the_flow_is_saved(good, source, stop, field, reason):
    # Before, only building the source at a run's start refused it: applyflows took the flow.
    doc = _edit(good, "source", **source)
    if "type" in source:  # a stream source instead of the files
        doc["source"] = source
        doc["format"] = {"type": "json", "schema": "id BIGINT"}
        doc["transform"]["sql"] = "SELECT id FROM source"
    doc["stop"] = stop

    refused = _refused(doc)

    assert (refused.field, reason in str(refused)) == (field, True), str(refused)
    assert not DataFlow.objects.exists()
