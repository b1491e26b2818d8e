"""The sequence source checks what it declares; its defaults are the declared ones."""

from __future__ import annotations

import pytest

from connectors.sequence.config import SequenceSourceConfig
from source_support.options import option_named
from source_support.registry import Environment
from source_support.testing.options_contract import OptionsContract


@pytest.fixture()
def env(tmp_path) -> Environment:
    return Environment(allowed_roots=(tmp_path,), base_dir=tmp_path)


class TestSequenceSourceOptions(OptionsContract):
    section, type_name = "source", "sequence"

    def full_table(self, env):
        return {"count": 100, "splits": 4}


def test_splits_left_out_is_the_declared_default(env):
    config = SequenceSourceConfig.parse({"count": 10}, env)

    assert config.splits == option_named(SequenceSourceConfig.OPTIONS, "splits").default == 1
    assert config.to_dict() == {"count": 10, "splits": 1}
