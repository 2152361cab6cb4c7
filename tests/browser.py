"""Headless Chromium driving a Dash app: shared by the dashboard's browser tests and the
stack test. Chromium and chromedriver are Debian's (``/usr/bin``); ``scripts/test.sh``
installs them. Without them the tests that use them fail, saying so: they do not skip.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from selenium import webdriver
from selenium.common.exceptions import (
    ElementClickInterceptedException,
    ElementNotInteractableException,
    StaleElementReferenceException,
    TimeoutException,
)
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
TIMEOUT = 20  # seconds: the first page also loads plotly.js

# True once Dash has drawn the page's content and no callback is waiting or running (right
# after a load the queues are empty for a moment before the page's layout callback is asked).
IDLE = """
const store = window.store && window.store.getState();
const content = document.getElementById('_pages_content');
if (!store || store.isLoading || !content || !content.children.length) return false;
const queues = ['requested', 'prioritized', 'blocked', 'executing', 'watched', 'executed',
                'stored'];
return queues.every(name => !(store.callbacks[name] || []).length);
"""
# The traces of a dcc.Graph: [{name, y}]
TRACES = """
const plot = document.querySelector('#' + arguments[0] + ' .js-plotly-plot');
return plot && plot.data ? plot.data.map(t => ({name: t.name || '', y: Array.from(t.y || [])}))
                         : null;
"""


@contextmanager
def chromium() -> Iterator[webdriver.Chrome]:
    """A headless Chromium, quit on leaving."""
    missing = [path for path in (CHROMIUM, CHROMEDRIVER) if not os.access(path, os.X_OK)]
    if missing:
        pytest.fail(
            f"{' and '.join(missing)} missing: the dashboard's browser tests need Debian's "
            "chromium and chromium-driver (scripts/test.sh installs them with apt-get)."
        )
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-dev-shm-usage",
        "--window-size=1400,1000",
    ):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(TIMEOUT)
    try:
        yield driver
    finally:
        driver.quit()


class Page:
    """The browser, pointed at the test server, with waits that fail with a clear message."""

    def __init__(self, driver: webdriver.Chrome, base: str, timeout_s: float = TIMEOUT) -> None:
        self.driver = driver
        self.base = base
        self.timeout_s = timeout_s

    def open(self, path: str) -> None:
        self.driver.get(self.base + path)
        self.idle()

    def navigate(self, path: str) -> None:
        """Go to ``path`` inside the running app (history API, no reload), as links do."""
        self.driver.execute_script(
            "window.history.pushState({}, '', arguments[0]);"
            "window.dispatchEvent(new PopStateEvent('popstate'));",
            path,
        )
        self.idle()

    def until(self, condition: Callable[[], Any], what: str) -> Any:
        try:
            return WebDriverWait(self.driver, self.timeout_s, poll_frequency=0.05).until(
                lambda _: condition()
            )
        except TimeoutException:
            raise AssertionError(f"timed out waiting for {what} at {self.url}") from None

    def idle(self) -> None:
        self.until(lambda: self.driver.execute_script(IDLE), "Dash to finish its callbacks")

    def click(self, by: str, locator: str, what: str) -> None:
        """Click the element ``locator`` finds once it is there and the click reaches it: a
        click that lands on another element (the page still laying out, a graph re-rendering
        over an open menu) or on one a re-render replaced is tried again."""

        def clicked() -> bool:
            found = self.driver.find_elements(by, locator)
            if not found:
                return False
            try:
                found[0].click()
            except (
                ElementClickInterceptedException,
                ElementNotInteractableException,
                StaleElementReferenceException,
            ):
                return False
            return True

        self.until(clicked, what)

    @property
    def url(self) -> str:
        return self.driver.current_url.removeprefix(self.base)

    def text(self, element_id: str) -> str:
        return self.driver.find_element(By.ID, element_id).text

    def shows(self, element_id: str, *values: str) -> str:
        """The text of an element once it contains every one of ``values``; read again when a
        re-render (a responsive graph resizing as the page grows) replaces it mid-read."""

        def read(_: Any) -> list[str] | None:
            text = self.text(element_id)
            return [text] if all(v in text for v in values) else None

        try:
            (text,) = WebDriverWait(
                self.driver,
                self.timeout_s,
                poll_frequency=0.05,
                ignored_exceptions=(StaleElementReferenceException,),
            ).until(read)
        except TimeoutException:
            shown = self.driver.find_elements(By.ID, element_id)
            text = shown[0].text if shown else "(no such element)"
            missing = [v for v in values if v not in text]
            raise AssertionError(f"#{element_id} at {self.url} lacks {missing}: {text!r}") from None
        return text

    def traces(self, graph_id: str) -> list[dict[str, Any]]:
        return self.until(lambda: self.driver.execute_script(TRACES, graph_id), f"graph {graph_id}")

    def severe_logs(self) -> list[str]:
        return [e["message"] for e in self.driver.get_log("browser") if e["level"] == "SEVERE"]
