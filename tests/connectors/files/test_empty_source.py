"""``allow_empty`` in a files ``[source]``: what a run that reads nothing does is tested end
to end in tests/e2e/test_bad_input.py."""

from __future__ import annotations

import pytest

from connectors.files.config import FilesSourceConfig
from source_support.errors import ConfigError
from source_support.registry import Environment


@pytest.fixture()
def env(tmp_path) -> Environment:
    data = tmp_path / "data"
    data.mkdir()
    return Environment(allowed_roots=(data.resolve(),), base_dir=tmp_path)


def test_allow_empty_defaults_to_false(env):
    assert FilesSourceConfig.parse({"path": "data"}, env).to_dict()["allow_empty"] is False


@pytest.mark.parametrize("value", ["yes", 1, None])
def test_allow_empty_must_be_a_boolean(env, value):
    with pytest.raises(ConfigError, match=r"^source\.allow_empty: must be"):
        FilesSourceConfig.parse({"path": "data", "allow_empty": value}, env)
