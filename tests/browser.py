"""Headless Chromium driving a Dash app: shared by the dashboard's browser tests and the
stack test. Chromium and chromedriver are Debian's (``/usr/bin``); ``scripts/test.sh``
installs them. Without them the tests that use them fail, saying so: they do not skip.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Sequence
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

# Every grid's cells and headers and every figure's labels, as drawn: a text drawn outside its
# cell (wider or taller than it: cut, or over its neighbour; a cell whose column shows the full
# value on hover may be cut), a header's word broken across lines, two cells or headers over
# one another, a point's or a bar's label outside the plot area, the legend over an axis's
# title, an annotation or a title outside the figure. Returns the grids and
# figures checked and what is wrong, each in words.
LAYOUT = """
const near = 1;  // px of rounding allowed
const box = e => e.getBoundingClientRect();
const drawn = e => { const r = document.createRange(); r.selectNodeContents(e);
                     return r.getBoundingClientRect(); };
const inside = (a, b) => a.left >= b.left - near && a.right <= b.right + near
                         && a.top >= b.top - near && a.bottom <= b.bottom + near;
const over = (a, b) => Math.min(a.right, b.right) - Math.max(a.left, b.left) > near
                       && Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top) > near;
const owner = e => (e.parentElement.closest('[id]') || {id: '?'}).id;
const size = r => `${Math.round(r.width)}×${Math.round(r.height)}`;
const pen = document.createElement('canvas').getContext('2d');
const widest = e => { pen.font = getComputedStyle(e).font;  // a word broken across lines
                      return Math.max(0, ...e.textContent.split(/\\s+/)
                                               .map(w => pen.measureText(w).width)); };
const found = {grids: [], plots: [], problems: []};
for (const grid of document.querySelectorAll('.ag-root-wrapper')) {
  const id = owner(grid);
  found.grids.push(id);
  const api = dash_ag_grid.getApi(id);
  const hover = colId => { const c = api.getColumn(colId); const d = c && c.getColDef();
                           return !!(d && (d.tooltipField || d.tooltipValueGetter)); };
  const cells = [];
  for (const cell of grid.querySelectorAll('.ag-header-cell, .ag-cell')) {
    const header = cell.classList.contains('ag-header-cell');
    const text = cell.querySelector(header ? '.ag-header-cell-text' : '.ag-cell-value') || cell;
    const colId = cell.getAttribute('col-id');
    const row = header ? 'header' : 'row ' + cell.closest('.ag-row').getAttribute('row-index');
    const what = `${id} ${row} "${colId}" (${text.textContent.slice(0, 40)})`;
    const outer = box(cell);
    if (!outer.width || !outer.height) continue;
    cells.push([outer, what]);
    const ink = drawn(text);
    const cut = text.scrollWidth > text.clientWidth + near
                || text.scrollHeight > text.clientHeight + near
                || (header && widest(text) > text.clientWidth + near);
    if ((cut || (ink.width && !inside(ink, outer))) && (header || !hover(colId))) {
      found.problems.push(`text outside its cell: ${what}: text ${size(ink)} in ${size(outer)}`);
    }
  }
  for (let i = 0; i < cells.length; i++) {
    for (let j = i + 1; j < cells.length; j++) {
      if (over(cells[i][0], cells[j][0])) {
        found.problems.push(`cells over one another: ${cells[i][1]} and ${cells[j][1]}`);
      }
    }
  }
}
for (const plot of document.querySelectorAll('.js-plotly-plot')) {
  const id = owner(plot);
  found.plots.push(id);
  const area = plot.querySelector('.draglayer .nsewdrag');  // the plot area
  const figure = box(plot.querySelector('svg.main-svg'));
  for (const label of plot.querySelectorAll('.textpoint text, text.bartext')) {
    if (label.textContent && area && !inside(box(label), box(area))) {
      found.problems.push(`label outside the plot: ${id} "${label.textContent}"`);
    }
  }
  const legend = plot.querySelector('.legend .bg');
  for (const title of plot.querySelectorAll('.xtitle, .ytitle')) {
    if (legend && title.textContent && over(box(legend), box(title))) {
      found.problems.push(`legend over an axis title: ${id} "${title.textContent}"`);
    }
  }
  for (const text of plot.querySelectorAll('.annotation-text, .gtitle')) {
    if (text.textContent && !inside(box(text), figure)) {
      found.problems.push(`text outside the figure: ${id} "${text.textContent.slice(0, 60)}"`);
    }
  }
}
return found;
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

    def layout(self, grids: Sequence[str], timeout_s: float = 8.0) -> dict[str, Any]:
        """What :data:`LAYOUT` finds once the grids ``grids`` are drawn and nothing is wrong,
        or, after ``timeout_s`` (columns are fitted to their text after the rows are drawn,
        and rows grow as their text wraps), what is still wrong."""
        deadline = time.monotonic() + timeout_s
        while True:
            found: dict[str, Any] = self.driver.execute_script(LAYOUT)
            ready = set(grids) <= set(found["grids"])
            if (ready and not found["problems"]) or time.monotonic() > deadline:
                return found
            time.sleep(0.1)

    def severe_logs(self) -> list[str]:
        return [e["message"] for e in self.driver.get_log("browser") if e["level"] == "SEVERE"]
