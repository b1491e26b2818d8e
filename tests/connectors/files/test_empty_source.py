"""A files source that matches no file says so (source.path), unless allow_empty is set."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from connectors.files.config import validate_files_source
from connectors.files.source import FileSource
from source_support.errors import ConfigError
from source_support.formats import FormatSpec
from source_support.registry import Environment
from tests.source_support.fakes import RecordingContext


@pytest.fixture()
def env(tmp_path) -> Environment:
    data = tmp_path / "data"
    data.mkdir()
    return Environment(allowed_roots=(data.resolve(),), base_dir=tmp_path)


def source(env: Environment, path: str, **config) -> FileSource:
    config = validate_files_source({"path": path, **config}, env)
    fmt = FormatSpec("csv", {"schema": "id BIGINT"})
    return FileSource.from_config(config, fmt, env=env, batch_size=10)


def discovered_state(files: FileSource) -> dict:
    """The enumerator state a run saves after discovery, as it comes back from the database."""
    enumerator = files.create_enumerator(RecordingContext(), None)
    enumerator.start()
    return json.loads(json.dumps(enumerator.snapshot_state()))


def test_a_glob_that_matches_nothing_is_named_with_source_path(env):
    files = source(env, "data/typo*.csv")

    problem = files.empty_input(discovered_state(files))

    assert isinstance(problem, ConfigError)
    assert problem.field == "source.path"
    assert str(problem).startswith(f"source.path: no file matches {env.base_dir / 'data' / 'typo*.csv'}")
    assert "allow_empty = true" in str(problem)


def test_allow_empty_accepts_a_source_that_matches_nothing(env):
    files = source(env, "data/typo*.csv", allow_empty=True)

    assert files.allow_empty is True
    assert files.empty_input(discovered_state(files)) is None


def test_empty_files_are_files_found(env):
    (Path(env.base_dir) / "data" / "empty.csv").write_text("")
    files = source(env, "data/*.csv")

    assert files.empty_input(discovered_state(files)) is None


def test_a_source_with_files_has_no_empty_input_problem(env):
    (Path(env.base_dir) / "data" / "a.csv").write_text("id\n1\n")
    files = source(env, "data")

    assert files.empty_input(discovered_state(files)) is None


def test_before_discovery_nothing_is_known_to_be_empty(env):
    files = source(env, "data/typo*.csv")

    assert files.empty_input(None) is None
    assert files.empty_input(files.create_enumerator(RecordingContext(), None).snapshot_state()) is None


def test_allow_empty_defaults_to_false(env):
    assert source(env, "data").allow_empty is False


@pytest.mark.parametrize("value", ["yes", 1, None])
def test_allow_empty_must_be_a_boolean(env, value):
    with pytest.raises(ConfigError, match=r"^source\.allow_empty: must be"):
        validate_files_source({"path": "data", "allow_empty": value}, env)
