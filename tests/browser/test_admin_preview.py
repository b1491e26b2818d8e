"""A person previews a flow and tests its connections from the flow's admin page: the parsed
records, the bad records and the output side by side, then what the source and sink reach."""

from __future__ import annotations

import pytest

from dataflow.spark.session import spark_job
from tests.factories import PASSWORD, DataFlowFactory, UserFactory
from tests.helpers import write_csv

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]


def test_staff_click_preview_and_test_connection_on_a_flows_page(page, dirs):
    UserFactory(username="root", is_staff=True, is_superuser=True)
    path = dirs.data / "orders.csv"
    write_csv(path, range(6))
    with path.open("a") as f:
        f.write("seven,s1,1.0\n")
    with spark_job() as spark:  # warm: a cold session's start would outlast the page's load timeout
        spark.range(1).collect()
    flow = DataFlowFactory(
        name="orders", owner=None, source_path=str(path), sql="SELECT id * 2 AS twice FROM source"
    )

    page.get(f"/admin/login/?next=/admin/dataflow/dataflow/{flow.pk}/change/")
    page.wait_for("#id_username").send_keys("root")
    page.find("#id_password").send_keys(PASSWORD)
    page.click("input[type=submit]")

    page.click("#preview-flow")
    records = page.wait_for("#preview-records")
    assert [row.text.split()[0] for row in records.find_elements("css selector", "tbody tr")] == [
        "0",
        "1",
        "2",
        "3",
        "4",
        "5",
    ]
    assert "seven,s1,1.0" in page.find("#preview-bad-records").text
    output = page.find("#preview-output").text
    assert output.split()[1:] == ["TWICE", "0", "2", "4", "6", "8", "10"]
    page.screenshot("admin-flow-preview")

    page.get(f"/admin/dataflow/dataflow/{flow.pk}/change/")
    page.click("#check-flow")
    source = page.wait_for("#check-source").text
    assert "[source] files: OK" in source and "1 files matched" in source
    assert "[sink] parquet: OK" in page.find("#check-sink").text
    page.screenshot("admin-flow-check")
    assert page.console_errors() == []
