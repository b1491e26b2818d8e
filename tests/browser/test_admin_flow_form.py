"""A person adds a flow in the admin: the options of the chosen source type appear, a valid
flow saves, and the list shows it."""

from __future__ import annotations

import pytest
from selenium.webdriver.support.ui import Select

from dataflow.models import DataFlow
from tests.factories import PASSWORD, UserFactory
from tests.helpers import SCHEMA, write_csv

pytestmark = pytest.mark.timeout(90)


def _visible(page, css: str) -> bool:
    return page.find(css).is_displayed()


def test_staff_adds_a_flow_whose_source_options_follow_the_chosen_type(page, dirs):
    UserFactory(username="root", is_staff=True, is_superuser=True)
    write_csv(dirs.data / "orders.csv", range(20))

    page.get("/admin/login/?next=/admin/dataflow/dataflow/add/")
    page.wait_for("#id_username").send_keys("root")
    page.find("#id_password").send_keys(PASSWORD)
    page.click("input[type=submit]")
    page.wait_for("#id_source_type")

    source_type = Select(page.find("#id_source_type"))
    source_type.select_by_value("redis_streams")
    assert _visible(page, "#id_source__redis_streams__streams")
    assert not _visible(page, "#id_source__files__path")
    page.screenshot("admin-flow-add-redis-streams", full_page=False)

    source_type.select_by_value("files")
    assert _visible(page, "#id_source__files__path")
    assert not _visible(page, "#id_source__redis_streams__streams")
    page.find("#id_name").send_keys("orders-from-admin")
    page.find("#id_source__files__path").send_keys(str(dirs.data / "*.csv"))
    Select(page.find("#id_format_type")).select_by_value("csv")
    page.find("#id_format__csv__schema").send_keys(SCHEMA)
    page.find("#id_transform_sql").send_keys("SELECT * FROM source")
    Select(page.find("#id_sink_type")).select_by_value("parquet")
    page.find("#id_sink__parquet__path").send_keys(str(dirs.out / "orders"))
    page.screenshot("admin-flow-add-files")
    page.click("input[name=_save]")

    page.wait_for("#result_list")
    assert "orders-from-admin" in page.find("#result_list").text
    assert DataFlow.objects.get(name="orders-from-admin").source_config["path"] == str(dirs.data / "*.csv")
    page.screenshot("admin-flow-list", full_page=False)
    assert page.console_errors() == []
