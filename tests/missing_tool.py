"""Skips for a tool the machine lacks (a program, a server's version, a Python package), and
the pytest plugin that fails them under ``CI=true``.

On a developer's machine such a test skips. On CI, ``.ci/run`` installs every tool the suite
uses, so a missing one means CI did not run what it says it ran: the skip is reported as a
failure. A skip that is right by design (a conformance-kit case that does not apply to a
connector) uses plain ``pytest.skip`` and stays a skip everywhere.

Loaded by ``tests/conftest.py`` (``pytest_plugins``); ``-p tests.missing_tool`` loads it elsewhere.
"""

from __future__ import annotations

import os
import shutil
from typing import NoReturn

import pytest

#: What a missing tool's skip reason starts with; the plugin knows such a skip by it.
MISSING_TOOL = "missing tool: "
#: ``pytest.importorskip``'s reason: a package requirements-dev.txt should have installed.
MISSING_MODULE = "could not import "


def missing_tool(what: str) -> NoReturn:
    """Skips the test for want of ``what`` (say how to get it); a failure under ``CI=true``."""
    pytest.skip(MISSING_TOOL + what)


def require_tool(program: str, package: str) -> str:
    """The path of ``program`` on the PATH; skips the test as :func:`missing_tool` when it is
    not there, naming the Debian ``package`` that installs it."""
    path = shutil.which(program)
    if path is None:
        missing_tool(f"{program} is not on the PATH (apt-get install {package}; .ci/run does)")
    return path


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("true", "1")


def skip_reason(report: pytest.TestReport) -> str:
    """The reason of a skipped report (``pytest.skip`` and skip marks alike)."""
    if isinstance(report.longrepr, tuple):
        reason = report.longrepr[2]
        return reason.removeprefix("Skipped: ")
    return str(report.longrepr)


def is_missing_tool(reason: str) -> bool:
    return reason.startswith((MISSING_TOOL, MISSING_MODULE))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> pytest.TestReport:
    report: pytest.TestReport = yield
    if report.skipped and not hasattr(report, "wasxfail") and in_ci():
        reason = skip_reason(report)
        if is_missing_tool(reason):
            report.outcome = "failed"
            report.longrepr = (
                f"CI=true, and this test skips for want of a tool: {reason.removeprefix(MISSING_TOOL)}\n"
                "CI must run every test: .ci/run installs and starts what the suite uses "
                "(check it installs this one)."
            )
    return report
