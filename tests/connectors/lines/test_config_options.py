import pytest

from source_support.registry import Environment
from source_support.testing.options_contract import OptionsContract


@pytest.fixture()
def env(tmp_path) -> Environment:
    (tmp_path / "data" / "notes").mkdir(parents=True)
    return Environment(allowed_roots=(tmp_path / "data",), base_dir=tmp_path)


class TestLinesSourceOptions(OptionsContract):
    section, type_name = "source", "lines"

    def full_table(self, env):
        return {"path": "data/notes"}
