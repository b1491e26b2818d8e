"""Bad configs are refused before a flow starts, naming the field and the reason."""

from __future__ import annotations

import copy

import pytest

from dataflow.models import DataFlow, FlowRun
from dataflow.services.flows import FlowStateError, flow_apply, flow_start
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
        ("flow", {"batch_size": "many"}, "flow.batch_size", "must be a int"),
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
