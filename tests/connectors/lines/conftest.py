"""The ``lines`` connector of docs/writing-a-connector.md, kept as the page shows it (the
package ``tests.connectors.lines.connector`` is the page's ``connectors.lines``). Its entry
point is not declared, so the service does not list it: its tests register it themselves,
and take it back after."""

from __future__ import annotations

import pytest

from source_support.registry import SOURCES
from tests.connectors.lines.connector import register


@pytest.fixture(autouse=True)
def lines_registered():
    register()
    yield
    SOURCES.pop("lines")
