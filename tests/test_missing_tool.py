"""A skip for want of a tool fails the run under CI=true; a skip by design stays a skip."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

SKIPS = """
import pytest

from tests.missing_tool import missing_tool, require_tool


@pytest.fixture()
def browser():
    return require_tool("no-such-browser-adf", "no-such-browser")


def test_a_program_not_on_the_path():
    require_tool("no-such-program-adf", "no-such-package")


def test_a_server_too_old():
    missing_tool("Redis 7 at REDIS_URL")


@pytest.mark.skipif(True, reason="missing tool: a marked one")
def test_marked():
    pass


def test_a_python_package():
    pytest.importorskip("no_such_module_adf")


def test_in_a_fixture(browser):
    pass


def test_a_case_that_does_not_apply():
    pytest.skip("the connector acknowledges nothing upstream")


def test_that_runs():
    pass
"""


def run(pytester: pytest.Pytester) -> pytest.RunResult:
    pytester.makepyfile(test_skips=SKIPS)
    # Not pytest-django: the outer session has set up Django's test environment already.
    return pytester.runpytest_inprocess("-p", "tests.missing_tool", "-p", "no:django", "-rsfE")


def test_without_ci_a_missing_tool_is_a_skip(pytester, monkeypatch):
    monkeypatch.delenv("CI", raising=False)

    result = run(pytester)

    result.assert_outcomes(passed=1, skipped=6)
    assert result.ret == pytest.ExitCode.OK


def test_under_ci_a_missing_tool_fails_the_run_and_a_skip_by_design_stays(pytester, monkeypatch):
    monkeypatch.setenv("CI", "true")

    result = run(pytester)

    result.assert_outcomes(passed=1, skipped=1, failed=3, errors=2)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [
            "*CI=true, and this test skips for want of a tool: no-such-program-adf is not on the PATH*",
            "*.ci/run installs and starts what the suite uses*",
        ]
    )
    result.stdout.fnmatch_lines(["SKIPPED * the connector acknowledges nothing upstream"])
    for name in ("a_program_not_on_the_path", "a_server_too_old", "a_python_package"):
        result.stdout.fnmatch_lines([f"FAILED test_skips.py::test_{name}*"])
    # A skip mark and a fixture act in the test's setup, where pytest calls a failure an error.
    for name in ("marked", "in_a_fixture"):
        result.stdout.fnmatch_lines([f"ERROR test_skips.py::test_{name}*"])
