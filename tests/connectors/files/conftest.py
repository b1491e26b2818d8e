"""A data directory under the test's tmp_path, and an Environment that allows only it."""

from __future__ import annotations

from pathlib import Path

import pytest

from source_support.registry import Environment


@pytest.fixture()
def data(tmp_path) -> Path:
    data = tmp_path / "data"
    data.mkdir()
    return data.resolve()


@pytest.fixture()
def env(tmp_path, data) -> Environment:
    return Environment(allowed_roots=(data,), base_dir=tmp_path)
