"""Runs: every run, searchable and sortable; each links to its own page.

URL: ``/runs?q=<text>&status=<status>&task=<task>&sort=<column>&order=asc|desc&page=<n>``.
Sorting and paging happen on the server, so only one page of rows is sent: a click on a
column's header changes the grid's column state, which the callback reads; the pager below
the grid picks the page.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import dash_bootstrap_components as dbc
from dash import Dash, Input, dcc, html

from dash_app import components as ui
from dash_app import data, tables
from dash_app.pages.runs import figures
from dash_app.state import SORTABLE_RUN_COLUMNS, Query, to_search
from dash_app.wiring import Outputs, Page, cleared, kept, message, tick, values
from scalebench.statuses import RUN_STATUSES, RUNNING

PAGE = Page(
    __name__,
    "/runs",
    "Runs",
    "Every training group at one worker count and repeat, newest first.",
    order=4,
)
PAGE_SIZE = 25
FILTERS = ("runs-q", "runs-status", "runs-task")
LIMIT = 5000  # newest runs searched; narrow with the filters to reach older ones
# -- the page's URL state -----------------------------------------------------------


@dataclass(frozen=True)
class RunsState:
    """Runs table: a search text, status and task filters, a sort and a page (0-based)."""

    q: str = ""
    status: str = "all"
    task: str | None = None
    sort: str = "started"
    order: str = "desc"
    page: int = 0


def parse_runs(params: Mapping[str, Any]) -> tuple[RunsState, list[str]]:
    query = Query(params)
    state = RunsState(
        q=query.text("q"),
        status=query.choice("status", ("all", *RUN_STATUSES), "all"),
        task=query.identifier("task", "task"),
        sort=query.choice("sort", SORTABLE_RUN_COLUMNS, "started"),
        order=query.choice("order", ("asc", "desc"), "desc"),
        page=query.integer("page", 0, 0, 100_000),
    )
    return state, query.problems()


def build(state: RunsState, problems: list[str]) -> html.Div:
    """The page for ``state``: its filters, the grid sorted as asked (its rows are
    :func:`update`'s) and the pager."""
    tasks = data.current().tasks()
    if not tasks:
        return PAGE.empty(problems)
    task = state.task
    if task is not None and task not in tasks:
        problems = [*problems, f"task: no runs of task {task!r}; showing every task."]
        task = None
    controls = dbc.Row(
        [
            dbc.Col(
                [
                    dbc.Label("Search (run, task or failure reason)", html_for="runs-q"),
                    dbc.Input(
                        id="runs-q",
                        value=state.q,
                        type="search",
                        debounce=True,
                        maxLength=100,
                        placeholder="e.g. w4 or peer",
                    ),
                ],
                md=5,
            ),
            dbc.Col(
                [
                    dbc.Label("Status", html_for="runs-status"),
                    dcc.Dropdown(
                        id="runs-status",
                        options=["all", *RUN_STATUSES],
                        value=state.status,
                        clearable=False,
                    ),
                ],
                md=3,
            ),
            dbc.Col(
                [
                    dbc.Label("Task", html_for="runs-task"),
                    dcc.Dropdown(
                        id="runs-task", options=tasks, value=task, placeholder="every task"
                    ),
                ],
                md=4,
            ),
        ],
        className="mb-3",
    )
    grid = ui.grid(
        "runs-table",
        figures.sorted_columns(state.sort, state.order),
        [],
        columnState=figures.column_state(state.sort, state.order),
    )
    pager = dbc.Pagination(
        id="runs-pages",
        active_page=state.page + 1,
        max_value=1,
        first_last=True,
        previous_next=True,
        fully_expanded=False,
        size="sm",
        className="mt-2",
    )
    return PAGE(
        ui.location("runs"),
        ui.refresher("runs"),
        controls,
        html.Div(id="runs-count", className="text-muted mb-2"),
        grid,
        pager,
        problems=problems,
    )


OUTPUTS = Outputs.of_page(
    "runs",
    count=message("runs-count"),
    rows=cleared("runs-table", "rowData", []),
    page_count=cleared("runs-pages", "max_value", 1),
    page_current=kept("runs-pages", "active_page"),
)


def update(
    q: str | None,
    status: str | None,
    task: str | None,
    columns: list[dict[str, Any]] | None,
    page: int | None,
    _tick: int | None = None,
    triggered: str | None = None,
) -> dict[str, Any]:
    """The named :data:`OUTPUTS`: URL search, count line, grid rows, page count, current
    page (the pager's, from 1), refresh.

    ``columns``: the grid's column state, which names the sorted column; ``page``: the
    pager's page, from 1. ``triggered``: the element whose change called it; a filter's
    sends the grid back to its first page.
    """
    sort, order = figures.sort_of(columns)
    state = RunsState(
        q=(q or "")[:100],
        status=status or "all",
        task=task or None,
        sort=sort,
        order=order,
        page=0 if triggered in FILTERS else max(0, (page or 1) - 1),
    )
    runs = data.current().runs(
        search=state.q or None,
        status=None if state.status == "all" else state.status,
        task=state.task,
        limit=LIMIT,
    )
    rows, pages = tables.run_rows(runs, state.sort, state.order, state.page, PAGE_SIZE)
    state = RunsState(**{**state.__dict__, "page": min(state.page, pages - 1)})
    shown = f"{len(runs):,} run(s)" + (f" (the newest {LIMIT:,})" if len(runs) == LIMIT else "")
    count = f"{shown}; page {state.page + 1} of {pages}."
    running = any(row["status"] == RUNNING for row in rows)
    return OUTPUTS.answer(
        search=to_search(state),
        count=count,
        rows=rows,
        page_count=pages,
        page_current=state.page + 1,
        refresh_off=not running,
    )


def register(app: Dash) -> None:
    PAGE.register(parse_runs, build)
    OUTPUTS.wire(
        app,
        update,
        *values("runs-q", "runs-status", "runs-task"),
        Input("runs-table", "columnState"),
        Input("runs-pages", "active_page"),
        tick("runs"),
        told=True,
    )
