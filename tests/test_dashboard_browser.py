"""The dashboard in headless Chromium: pages load and show their numbers, links keep their
state, hostile links get friendly answers, and the browser logs no error.

One server (werkzeug, in a thread, on a seeded SQLite database) and one browser serve the
whole module. Chromium and chromedriver are Debian's (``/usr/bin``); ``scripts/test.sh``
installs them. Without them these tests fail, saying so: they do not skip.

Bootstrap's stylesheet comes from a CDN, which a test machine may not reach; the app is
started without it, so the browser only loads what the app serves itself.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import quote

import pytest
from browser import LAYOUT, Page, chromium
from dashboard_seed import (
    BAD,
    KNOWN,
    LATEST_NIGHT,
    LIGHT,
    NEW_TORCH,
    NODES,
    OLD_TORCH,
    paired_database,
    seeded_database,
)
from selenium import webdriver
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from werkzeug.serving import WSGIRequestHandler, make_server

from dash_app.app import create_app


class QuietHandler(WSGIRequestHandler):
    def log_request(self, *args: Any, **kwargs: Any) -> None:
        """No access log lines in the test output."""


@contextmanager
def serving(url: str) -> Iterator[str]:
    """The dashboard on ``url``, served in a thread: its base address."""
    app = create_app(url, stylesheets=[])
    httpd = make_server("127.0.0.1", 0, app.server, threaded=True, request_handler=QuietHandler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_port}"
    finally:
        httpd.shutdown()
        thread.join(timeout=10)
        app.server.extensions["scalebench"].dispose()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with (
        seeded_database("sqlite", tmp_path_factory.mktemp("dash-browser")) as url,
        serving(url) as base,
    ):
        yield base


@pytest.fixture(scope="module")
def browser() -> Iterator[webdriver.Chrome]:
    with chromium() as driver:
        yield driver


@pytest.fixture
def page(browser: webdriver.Chrome, server: str) -> Iterator[Page]:
    page = Page(browser, server)
    page.severe_logs()  # start clean: reading the log empties it
    yield page
    assert page.severe_logs() == [], "the browser logged errors"


PAGES = {
    "/": ("overview-content", ["Regression flagged", LATEST_NIGHT, KNOWN]),
    f"/scaling?sweep={KNOWN}": ("scaling-summary", ["1.82×", "3.23×", "80.6 %"]),
    f"/communication?sweep={KNOWN}": ("comm-phases", ["communication"]),
    f"/cost?sweep={KNOWN}": ("cost-prices", ["n1-standard-4", "2020-12-07", "$0.35/h"]),
    "/runs?q=peer": ("runs-table", ["failed", "peer went away"]),
    f"/run?id={KNOWN}-w2-r2": ("run-facts", ["50 s", "top1 accuracy ≥ 70 — reached"]),
    "/compare": ("compare-verdict", ["REGRESSION flagged by the nightly detector"]),
    "/trend": ("trend-flags", [LATEST_NIGHT, "+10.0 %"]),
}


@pytest.mark.parametrize("path", list(PAGES))
def test_every_page_loads_and_shows_its_values(page: Page, path: str) -> None:
    page.open(path)
    element, expected = PAGES[path]
    page.shows(element, *expected)
    body = page.driver.find_element(By.TAG_NAME, "body").text
    assert "Traceback" not in body and "Some of this link's settings" not in body


def test_figures_carry_the_numbers(page: Page) -> None:
    page.open(f"/scaling?sweep={KNOWN}")
    speedup = {t["name"]: t["y"] for t in page.traces("scaling-speedup")}
    assert speedup["speedup = TTA(1) / TTA(k)"] == pytest.approx([1.0, 100 / 55, 100 / 31])
    page.navigate(f"/communication?sweep={KNOWN}")
    assert [t["name"] for t in page.traces("comm-latency")] == [
        "gloo float16 ×2",
        "gloo float32 ×2",
    ]
    page.navigate("/trend")
    flagged = next(t for t in page.traces("trend-figure") if t["name"] == "flagged regression")
    assert flagged["y"] == pytest.approx([110.5])


# The Scaling figures' node boundary: the line's place and label, and the shapes on the axis
BOUNDARY = """
const plot = document.querySelector('#' + arguments[0] + ' .js-plotly-plot');
if (!plot || !plot.layout || !plot.querySelector('.xtick')) return null;
return {
  lines: (plot.layout.shapes || []).filter(s => s.yref === 'paper').map(s => s.x0),
  labels: Array.from(plot.querySelectorAll('.annotation-text')).map(e => e.textContent),
  ticks: Array.from(plot.querySelectorAll('.xtick text')).map(e => e.textContent),
};
"""


def test_scaling_marks_where_groups_start_to_cross_nodes(page: Page) -> None:
    page.open(f"/scaling?sweep={NODES}")
    for graph in ("scaling-tta", "scaling-speedup"):
        drawn = page.until(
            lambda graph=graph: page.driver.execute_script(BOUNDARY, graph), f"graph {graph}"
        )
        assert drawn["lines"] == [pytest.approx(32**0.5)]  # between 4 and 8 workers
        assert "node boundary (4 ranks per node)" in drawn["labels"]
        assert drawn["ticks"] == ["11×1", "21×2", "41×4", "82×4"]  # count, then nodes×ranks


def test_the_navbar_moves_between_pages(page: Page) -> None:
    page.open("/")
    page.click(By.ID, "nav-cost", "the navbar's cost link")
    page.until(lambda: page.url.startswith("/cost"), "the cost page")
    page.idle()
    page.shows("cost-prices", "n1-standard-4")


def test_a_chosen_sweep_survives_a_reload(page: Page) -> None:
    page.open(f"/scaling?sweep={KNOWN}")
    page.shows("scaling-summary", "1.82×")  # the page drawn, its sweep picker with it
    page.click(By.ID, "scaling-sweep", "the sweep picker")
    option = f"//label[@role='option'][.//input[@value='{LIGHT}']]"
    page.click(By.XPATH, option, "the sweep list")
    page.until(lambda: page.url == f"/scaling?sweep={LIGHT}", "the address to change")
    page.idle()
    page.shows("scaling-summary", "0.647×")
    page.driver.refresh()
    page.idle()
    assert page.url == f"/scaling?sweep={LIGHT}"
    # a busy machine may still be drawing the page when the renderer first goes idle
    page.until(lambda: page.driver.find_elements(By.ID, "scaling-sweep"), "the page, reloaded")
    assert LIGHT in page.text("scaling-sweep")
    page.shows("scaling-summary", "0.647×")


def test_filters_live_in_the_address(page: Page) -> None:
    page.open("/runs")
    search = page.driver.find_element(By.ID, "runs-q")
    search.send_keys("nan at epoch", Keys.ENTER)
    page.until(lambda: page.url == "/runs?q=nan+at+epoch", "the address to change")
    page.idle()
    page.shows("runs-table", "diverged")
    page.driver.refresh()
    page.idle()
    assert page.driver.find_element(By.ID, "runs-q").get_attribute("value") == "nan at epoch"
    page.shows("runs-count", "1 run(s)")

    page.open("/trend")
    page.click(By.XPATH, "//label[.//input[@value='samples_per_s']]", "the metric samples_per_s")
    page.until(lambda: "metric=samples_per_s" in page.url, "the address to change")
    page.idle()
    page.driver.refresh()
    page.idle()
    checked = page.driver.find_element(By.CSS_SELECTOR, "#trend-metric input[value=samples_per_s]")
    assert checked.is_selected()
    assert page.traces("trend-figure")[0]["y"] == pytest.approx([640.0] * 8)


# The Runs grid's cells: each row's value in one column, top to bottom, and its colour
CELLS = """
return Array.from(document.querySelectorAll(
  '#runs-table .ag-center-cols-container .ag-row .ag-cell[col-id="' + arguments[0] + '"]'
)).sort((a, b) => a.closest('.ag-row').getAttribute('row-index')
                - b.closest('.ag-row').getAttribute('row-index'))
  .map(c => [c.textContent, getComputedStyle(c).color, getComputedStyle(c).fontWeight,
             (c.querySelector('a') || {}).href || null]);
"""
RED = "rgb(176, 42, 55)"
# The runs grid's status cells drawn, as (row index, text, colour, weight), the grid's end
# scrolled into the window as a reader would (the grid draws every row of its page).
STATUS_CELLS = """
const grid = document.querySelector('#runs-table');
grid.scrollIntoView(false);
return Array.from(grid.querySelectorAll('.ag-center-cols-container .ag-row'))
  .map(row => [Number(row.getAttribute('row-index')),
               row.querySelector('.ag-cell[col-id="status"]')])
  .filter(([index, cell]) => cell)
  .map(([index, cell]) => [index, cell.textContent, getComputedStyle(cell).color,
                           getComputedStyle(cell).fontWeight]);
"""
# What the grid holds, in the order it shows it (its own API, whatever has been drawn yet).
HELD = """
const values = [];
dash_ag_grid.getApi(arguments[0]).forEachNodeAfterFilterAndSort(
  node => values.push(node.data[arguments[1]]));
return values;
"""


def test_runs_sort_on_the_server_page_and_keep_both_in_the_address(page: Page) -> None:
    """A click on a header sorts every run (not just the page shown) and goes into the
    address, the pager turns the page, a reload keeps both; a run that did not succeed shows
    its status in red and bold, and each run links to its page."""
    page.open("/runs")
    page.shows("runs-count", "42 run(s); page 1 of 2")
    header = '#runs-table .ag-header-cell[col-id="time_to_accuracy_s"]'
    page.click(By.CSS_SELECTOR, f"{header} .ag-header-cell-label", "the time-to-accuracy header")
    page.until(lambda: page.url == "/runs?sort=time_to_accuracy_s&order=asc", "the address")
    page.idle()

    def sorted_rows() -> list[Any] | None:  # the grid draws the new rows after Dash is idle
        # (HELD says the page holds 25)
        cells = page.driver.execute_script(CELLS, "time_to_accuracy_s")
        held = page.driver.execute_script(HELD, "runs-table", "run")
        return cells if cells and cells[0][0] == "1.83 s" and len(held) == 25 else None

    cells = page.until(sorted_rows, "the rows sorted by time to accuracy")
    assert cells[0][0] == "1.83 s"  # the real 1-worker light run first, of a page of 25
    page.click(By.XPATH, "//*[@id='runs-pages']//a[normalize-space()='2']", "the link to page 2")
    page.until(lambda: page.url.endswith("order=asc&page=1"), "the address to name page 2")
    page.idle()
    page.driver.refresh()
    page.idle()
    page.shows("runs-count", "42 run(s); page 2 of 2")
    arrow = f"{header}[aria-sort=ascending]"
    page.until(lambda: page.driver.find_elements(By.CSS_SELECTOR, arrow), "the header's arrow")
    held = page.until(
        lambda: (
            (held := page.driver.execute_script(HELD, "runs-table", "status"))
            and len(held) == 17
            and held
        ),
        "the second page's 17 statuses",
    )
    assert set(held) > {"succeeded"}
    statuses = page.until(  # the last rows, where the failed runs are drawn
        lambda: (
            (rows := page.driver.execute_script(STATUS_CELLS))
            and len(rows) == len(held)  # every row of the page drawn
            and any(text != "succeeded" for _, text, *_ in rows)
            and rows
        ),
        "a status drawn that is not 'succeeded'",
    )
    for index, text, color, weight in statuses:
        assert text == held[index], (index, text, held)
        assert (color == RED and weight == "700") == (text != "succeeded"), (text, color)
    links = page.driver.execute_script(CELLS, "run")
    assert all(href == f"{page.base}/run?id={text}" for text, _, _, href in links), links[0]


HOSTILE = [
    "<script>alert(1)</script>",
    "'; DROP TABLE run; --",
    "../../etc/passwd",
    "%00",
    "%0A%0D",
    "a" * 2000,
    "☃",
    "-1",
    "1e309",
    "NaN",
    "[]",
    "{}",
    "$(reboot)",
    "javascript:alert(1)",
    "%25",
    "%E2%80%AE",
    "\\",
    "null",
    "0x10",
    "99999999999999999999",
    "%F0%9F%92%A9",
    "+",
    "%2e%2e%2f",
    "<img src=x onerror=alert(1)>",
    "${7*7}",
    "{{7*7}}",
    '"',
    "'",
    "`",
    "|",
]
NAMES = [
    "sweep",
    "allreduce",
    "dtype",
    "gpu",
    "instance",
    "q",
    "status",
    "task",
    "sort",
    "order",
    "page",
    "id",
    "a",
    "b",
    "metric",
    "nights",
    "unknown",
]


@pytest.mark.slow  # eight page renders
def test_fuzzed_links_get_friendly_messages(page: Page) -> None:
    """Every hostile value in a link, under every name in turn: a link per page, each with
    every eighth value, quoted and raw by turns."""
    paths = ["/", "/scaling", "/communication", "/cost", "/runs", "/run", "/compare", "/trend"]
    page.open("/")
    for index, path in enumerate(paths):
        chosen = range(index, len(HOSTILE), len(paths))
        names = [NAMES[v % len(NAMES)] for v in chosen]
        query = "&".join(
            f"{name}={quote(HOSTILE[v], safe='%') if v % 2 else HOSTILE[v]}"
            for name, v in zip(names, chosen, strict=True)
        )
        link = f"{path}?{query}"
        page.navigate(link) if index % 3 else page.open(link)
        body = page.driver.find_element(By.TAG_NAME, "body").text
        assert "Traceback" not in body, link
        assert "unexpected error" not in body, link
        assert page.driver.find_elements(By.CSS_SELECTOR, "h2"), link  # a page, not a blank
        if path != "/" and set(names) != {"q"}:
            assert page.driver.find_elements(By.CLASS_NAME, "url-problems"), link
        assert page.severe_logs() == [], link


def test_the_projection_draws_to_64_workers_with_its_check(page: Page) -> None:
    """The recorded light sweep projected with the recorded all-reduce sweep's host fit."""
    page.open(f"/scaling?sweep={LIGHT}")
    traces = {t["name"]: t for t in page.traces("scaling-projection")}
    line = next(t for name, t in traces.items() if name.startswith("host: projected"))
    assert "leave-one-out error ≤" in line["name"]
    assert len(line["y"]) == 7  # 1, 2, 4, …, 64 workers
    assert len(traces["host: measured"]["y"]) == 2  # 1 and 2 workers
    page.shows("scaling-projection-table", "projected: compute from 2 worker(s) on host")
    page.navigate(f"/communication?sweep={LIGHT}")
    page.shows("comm-fits", "α (per ring step)", "β (per link)", "gloo cpu float32, 2 workers")


# Every page, with the grids each must show: no text outside its cell or over another's, no
# label outside its plot (Compare of the failed sweep against the known one: its verdicts say
# why, in sentences that wrap; Scaling's projection table: its basis of several lines).
LAYOUT_PAGES = {
    "/": [],
    f"/scaling?sweep={KNOWN}": ["scaling-table", "scaling-projection-rows"],
    f"/communication?sweep={LIGHT}": ["comm-fits-table"],
    f"/cost?sweep={KNOWN}": ["cost-price-table"],
    "/runs": ["runs-table"],
    f"/run?id={KNOWN}-w2-r2": ["run-events-table"],
    f"/compare?a={BAD}&b={KNOWN}": ["compare-deltas"],
    "/trend": ["trend-flag-table"],
}


@pytest.mark.slow  # eight page renders
@pytest.mark.parametrize("width", [1280, 1920])
def test_grids_and_figures_keep_their_text_inside_them(page: Page, width: int) -> None:
    """At a laptop's and a desktop's width, every grid's columns fit their text and headers
    (or wrap it, rows as tall as their lines), no two cells overlap, and every figure's
    labels lie inside its plot."""
    page.driver.set_window_size(width, 1000)
    try:
        for path, grids in LAYOUT_PAGES.items():
            page.open(path)
            found = page.layout(grids)
            assert set(grids) <= set(found["grids"]), (path, found["grids"])
            assert found["problems"] == [], (width, path)
        assert "cost-pareto" in found["plots"] or path != f"/cost?sweep={KNOWN}"
    finally:
        page.driver.set_window_size(1400, 1000)


def test_the_layout_check_sees_a_cut_header_and_a_label_outside(page: Page) -> None:
    """The check above is not blind: a column dragged narrower than its header's word (the
    grid leaves a column a reader resized as it is), and a figure zoomed in below its highest
    label, are reported."""
    page.open(f"/cost?sweep={KNOWN}")
    assert page.layout(["cost-price-table"])["problems"] == []
    page.driver.execute_script(
        "dash_ag_grid.getApi('cost-price-table')"
        ".setColumnWidths([{key: 'preemptible', newWidth: 40}], true, 'uiColumnResized');"
        "const plot = document.querySelector('#cost-pareto .js-plotly-plot');"
        "return Plotly.relayout(plot, {'yaxis.range': [0, 0.0065]});"
    )

    def broken() -> list[str] | None:
        problems: list[str] = page.driver.execute_script(LAYOUT)["problems"]
        header = any('header "preemptible"' in p for p in problems)
        label = any(p.startswith("label outside the plot: cost-pareto") for p in problems)
        return problems if header and label else None

    problems = page.until(broken, "the check to report the narrowed header and the zoomed plot")
    assert len(problems) == 3, problems  # the header, and the labels of 4 and 2 workers


def test_a_findings_link_shows_its_change_and_a_click_triages_it(
    browser: webdriver.Chrome, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The link a nightly's message carries, on paired nights judged by the paired nightly:
    the page draws the series with its change point and shows what changed (torch); a
    click on a triage button stores the state, with the note, and the page shows it."""
    from results_db.service.nightly import findings

    with (
        paired_database("sqlite", tmp_path_factory.mktemp("dash-paired")) as url,
        serving(url) as base,
    ):
        stack = next(f for f in findings(url, None, None) if f.attribution == "stack")
        page = Page(browser, base)
        page.severe_logs()
        page.open(f"/nightly?finding={stack.id}")
        names = [t["name"] for t in page.traces("nightly-figure")]
        assert "tonight / reference, 1 worker" in names
        assert any(name.startswith("change point") for name in names)
        page.shows("nightly-diff-table", "torch", OLD_TORCH, NEW_TORCH)
        page.shows("nightly-finding-state", "open")
        page.driver.find_element(By.ID, "nightly-note").send_keys("bisecting torch")
        page.click(By.ID, "nightly-triage-acknowledged", "the acknowledged button")
        page.shows("nightly-triage-message", f"Finding {stack.id} is now acknowledged.")
        page.shows("nightly-finding-state", "acknowledged")
        stored = next(f for f in findings(url, None, None) if f.id == stack.id)
        assert (stored.state, stored.note) == ("acknowledged", "bisecting torch")
        assert page.severe_logs() == [], "the browser logged errors"
