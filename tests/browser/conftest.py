"""A headless Chromium (Debian's ``chromium`` and ``chromium-driver``) driven by Selenium
against pytest-django's live server; screenshots go to the test's ``tmp_path`` and to
``var/screenshots/`` (git-ignored) for a person to look at."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.ui import WebDriverWait

from dataflow.web import views as dashboard_views
from tests.missing_tool import require_tool

SCREENSHOTS = Path(__file__).resolve().parents[2] / "var" / "screenshots"
WIDTH, HEIGHT = 1440, 900


@pytest.fixture(scope="module")
def browser():
    chromium = require_tool("chromium", "chromium")
    chromedriver = require_tool("chromedriver", "chromium-driver")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for argument in (
        "--headless=new",
        "--no-sandbox",  # root in a container has no user namespace for the sandbox
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--hide-scrollbars",
        f"--window-size={WIDTH},{HEIGHT}",
        "--lang=en-US",
    ):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(chromedriver))
    driver.set_page_load_timeout(20)
    yield driver
    driver.quit()


class Page:
    """The browser on the live server: go to a path, wait for something, take a screenshot,
    read the console's errors."""

    def __init__(self, driver, base_url: str, out: Path) -> None:
        self.driver = driver
        self.base_url = base_url
        self.out = out

    def get(self, path: str) -> None:
        self.driver.get(self.base_url + path)

    #: Generous: a loaded CI machine runs Chromium, the live server and Spark on 2 cores.
    WAIT_S = 30

    def wait_for(self, css: str, timeout: float = WAIT_S):
        return WebDriverWait(self.driver, timeout).until(
            ec.visibility_of_element_located((By.CSS_SELECTOR, css))
        )

    def wait_until(self, condition, timeout: float = WAIT_S, message: str = ""):
        # A part that a poll redraws goes stale between finding it and reading it: ask again.
        wait = WebDriverWait(self.driver, timeout, ignored_exceptions=(StaleElementReferenceException,))
        return wait.until(lambda driver: condition(), message)

    def click(self, css: str, timeout: float = WAIT_S) -> None:
        """Click what ``css`` finds once it is visible. A part that a poll redraws (the flow
        list, the run panels) can replace the element between finding and clicking it: find
        it again and click the new one."""

        def clicked(driver) -> bool:
            try:
                element = driver.find_element(By.CSS_SELECTOR, css)
                if not element.is_displayed():
                    return False
                element.click()
            except StaleElementReferenceException:
                return False
            return True

        WebDriverWait(self.driver, timeout).until(clicked, f"could not click {css}")

    def find(self, css: str):
        return self.driver.find_element(By.CSS_SELECTOR, css)

    def find_all(self, css: str):
        return self.driver.find_elements(By.CSS_SELECTOR, css)

    def points(self, chart_id: str) -> int | None:
        """How many samples a chart drew; None while the page that has it is not there yet
        (a wait may ask in the middle of a navigation)."""
        return self.js(
            "var el = document.getElementById(arguments[0]);"
            "return el && el.dataset.points ? Number(el.dataset.points) : null;",
            chart_id,
        )

    def js(self, script: str, *args):
        return self.driver.execute_script(script, *args)

    def console_errors(self) -> list[str]:
        """Console messages at level SEVERE since the last call (uncaught errors, failed loads,
        a missing /favicon.ico among them)."""
        return [entry["message"] for entry in self.driver.get_log("browser") if entry["level"] == "SEVERE"]

    def screenshot(self, name: str, *, width: int = WIDTH, full_page: bool = True) -> Path:
        """A PNG of the page at ``width`` CSS pixels (all of it, or the first screen), in
        ``tmp_path`` and ``var/screenshots/``."""
        metrics = {"width": width, "height": HEIGHT, "deviceScaleFactor": 1, "mobile": False}
        self.driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", metrics)
        try:
            if full_page:
                # The page reflows at the new width before its height is measured.
                height = self.js("return document.documentElement.scrollHeight")
                metrics["height"] = max(HEIGHT, height)
                self.driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", metrics)
            path = self.out / f"{name}.png"
            self.driver.save_screenshot(str(path))
        finally:
            self.driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, SCREENSHOTS / path.name)
        return path


@pytest.fixture()
def page(browser, live_server, transactional_db, tmp_path, monkeypatch):
    # Pages poll every second here: a test waits less for what a poll brings.
    monkeypatch.setattr(dashboard_views, "POLL_MS", 1000)
    # Off the last test's page first (to a page without scripts on the same server, whose
    # cookies are the ones deleted): a poll of that page still in flight could set a CSRF
    # cookie after the cookies were deleted, and a login form's token was refused (403).
    browser.get(live_server.url + "/healthz")
    browser.delete_all_cookies()
    browser.get_log("browser")  # drop what an earlier test left
    return Page(browser, live_server.url, tmp_path)
