"""A person fills in a new flow's source in the admin and, before saving, clicks "Test
connection" beside it: what the directory holds now, or what is wrong, appears below."""

from __future__ import annotations

import pytest

from dataflow.models import DataFlow
from tests.factories import PASSWORD, UserFactory
from tests.helpers import write_csv

pytestmark = pytest.mark.timeout(90)


def test_staff_test_the_source_of_an_unsaved_flow(page, dirs):
    UserFactory(username="root", is_staff=True, is_superuser=True)
    write_csv(dirs.data / "a.csv", range(20))
    write_csv(dirs.data / "b.csv", range(5))
    size = sum(p.stat().st_size for p in (dirs.data / "a.csv", dirs.data / "b.csv"))

    page.get("/admin/login/?next=/admin/dataflow/dataflow/add/")
    page.wait_for("#id_username").send_keys("root")
    page.find("#id_password").send_keys(PASSWORD)
    page.click("input[type=submit]")
    page.wait_for("#id_source__files__path").send_keys(str(dirs.data / "*.csv"))

    page.click("#test-connection-source")
    found = page.wait_for("#test-connection-source-result #section-check-source").text
    assert "[source] files: OK" in found
    assert f"2 files matched {dirs.data / '*.csv'}, {size} bytes in all" in found
    page.screenshot("admin-flow-form-test-connection", full_page=False)

    path = page.find("#id_source__files__path")
    path.clear()
    path.send_keys("/etc/*.conf")
    page.click("#test-connection-source")
    page.wait_until(
        lambda: "source.path" in page.find("#test-connection-source-result").text,
        message="the refusal of a path outside the allowed roots",
    )
    assert "files matched" not in page.find("#test-connection-source-result").text
    assert DataFlow.objects.count() == 0  # nothing was saved
    assert page.console_errors() == []
