"""Connectors are found through the entry-point group ``activedataflow.connectors``: the
built-in ones from this checkout's pyproject.toml, others from installed packages; a plugin
that fails is reported naming its entry point and registers nothing."""

from __future__ import annotations

import logging

import pytest

from source_support.errors import ConfigError
from source_support.formats import FORMATS, validate_format
from source_support.plugins import OWN_PYPROJECT, connector_entry_points, load_connectors
from source_support.registry import FAILED_PLUGINS, SINKS, SOURCES, Environment, validate_source


@pytest.fixture()
def env(tmp_path) -> Environment:
    return Environment(allowed_roots=(tmp_path,), base_dir=tmp_path)


def test_the_built_in_connectors_are_entry_points_of_this_projects_pyproject():
    found = {ep.name: ep.value for ep in connector_entry_points()}

    assert OWN_PYPROJECT.name == "pyproject.toml"
    assert {name: found[name] for name in ("files", "nats", "redis_streams", "sequence")} == {
        "files": "connectors.files:register",
        "nats": "connectors.nats:register",
        "redis_streams": "connectors.redis_streams:register",
        "sequence": "connectors.sequence:register",
    }
    assert {"files", "nats_jetstream", "redis_streams", "sequence"} <= set(SOURCES)
    assert {"parquet", "csv", "json", "nats", "redis_stream"} <= set(SINKS)


def test_another_projects_pyproject_declares_nothing_of_this_one(tmp_path):
    other = tmp_path / "pyproject.toml"
    other.write_text(
        '[project]\nname = "someone-else"\n[project.entry-points."activedataflow.connectors"]\n'
        'x = "nowhere:register"\n'
    )

    names = {ep.name for ep in connector_entry_points(other)}

    assert "x" not in names and "files" not in names  # this checkout is not installed here


def test_an_installed_connector_package_registers_its_source_and_format(connector_package, env):
    connector_package()

    assert load_connectors() == []

    assert SOURCES["tiny_numbers"].options[0].name == "count"
    assert validate_source({"type": "tiny_numbers", "count": 3}, env) == ("tiny_numbers", {"count": 3})
    assert FORMATS["tiny_json"].description.startswith("JSON lines")
    assert validate_format({"type": "tiny_json", "schema": "value BIGINT"}).type == "tiny_json"


def test_each_entry_point_is_loaded_once(connector_package):
    connector_package()
    load_connectors()

    assert load_connectors() == []  # registering tiny_numbers again would fail


def test_a_plugin_that_fails_is_reported_by_its_entry_point_and_registers_nothing(
    connector_package, env, caplog
):
    connector_package({"tiny_broken": "tiny_connector:broken", "gone": "no_such_module:register"})

    logger = logging.getLogger("source_support.plugins")
    logger.addHandler(caplog.handler)  # the service's loggers do not propagate to the root
    try:
        failures = load_connectors()
    finally:
        logger.removeHandler(caplog.handler)

    assert [(f.entry_point, f.reason) for f in failures] == [
        (
            "tiny_broken = tiny_connector:broken",
            "RuntimeError: the tiny connector's server library is missing",
        ),
        ("gone = no_such_module:register", "ModuleNotFoundError: No module named 'no_such_module'"),
    ]
    assert "half_done" not in SOURCES  # registered before the failure, taken back
    assert {"files", "redis_streams", "sequence"} <= set(SOURCES)  # the others stay usable
    assert list(FAILED_PLUGINS) == ["tiny_broken = tiny_connector:broken", "gone = no_such_module:register"]
    assert [(r.levelname, r.exc_info is not None) for r in caplog.records] == [("ERROR", True)] * 2
    assert [r.getMessage() for r in caplog.records] == [
        "connector plugin tiny_broken = tiny_connector:broken (entry point group activedataflow.connectors) "
        "failed to load",
        "connector plugin gone = no_such_module:register (entry point group activedataflow.connectors) "
        "failed to load",
    ]
    with pytest.raises(ConfigError) as refused:
        validate_source({"type": "half_done", "count": 1}, env)
    assert refused.value.field == "source.type"
    assert refused.value.reason.endswith(
        "; connector plugins that failed to load: tiny_broken = tiny_connector:broken, "
        "gone = no_such_module:register)"
    )


def test_a_plugin_that_registers_a_type_taken_already_fails_naming_the_type(connector_package):
    connector_package({"again": "connectors.sequence:register"})

    failures = load_connectors()

    assert [(f.entry_point, f.reason) for f in failures] == [
        ("again = connectors.sequence:register", "ValueError: source type 'sequence' is registered already")
    ]


def test_an_entry_point_to_a_module_registers_by_importing_it(connector_package):
    connector_package({"tiny_module": "tiny_connector"})

    assert load_connectors() == []
    assert "tiny_numbers" not in SOURCES  # the module registers in register(), not on import
