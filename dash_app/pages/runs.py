"""Runs: every run, searchable and sortable; each links to its own page.

URL: ``/runs?q=<text>&status=<status>&task=<task>&sort=<column>&order=asc|desc&page=<n>``.
Sorting and paging happen on the server, so only one page of rows is sent.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import dash
import dash_bootstrap_components as dbc
from dash import Dash, Input, Output, ctx, dash_table, dcc, html

from dash_app import components as ui
from dash_app import data, tables
from dash_app.state import SORTABLE_RUN_COLUMNS, Query, to_search
from scalebench.statuses import RUN_STATUSES

PATH = "/runs"
TITLE = "Runs"
INTRO = "Every training group at one worker count and repeat, newest first."
PAGE_SIZE = 25
FILTERS = ("runs-q", "runs-status", "runs-task")
LIMIT = 5000  # newest runs searched; narrow with the filters to reach older ones
COLUMNS = [
    {"name": "run", "id": "run", "presentation": "markdown"},
    {"name": "sweep", "id": "sweep"},
    {"name": "task", "id": "task"},
    {"name": "workers", "id": "workers"},
    {"name": "repeat", "id": "repeat"},
    {"name": "status", "id": "status"},
    {"name": "time to accuracy", "id": "time_to_accuracy_s"},
    {"name": "samples/s", "id": "samples_per_s"},
    {"name": "communication ratio", "id": "communication_ratio"},
    {"name": "started", "id": "started"},
    {"name": "reason", "id": "reason"},
]


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


def layout(**params: Any) -> html.Div:
    state, problems = parse_runs(params)
    return _layout(state, problems)


@ui.guarded(lambda message: ui.page(TITLE, INTRO, ui.error_alert(message)))
def _layout(state: RunsState, problems: list[str]) -> html.Div:
    tasks = data.current().tasks()
    if not tasks:
        return ui.page(TITLE, INTRO, ui.empty_database(), problems=problems)
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
    grid = dash_table.DataTable(
        id="runs-table",
        columns=COLUMNS,
        data=[],
        sort_action="custom",
        sort_mode="single",
        sort_by=[{"column_id": state.sort, "direction": state.order}],
        page_action="custom",
        page_current=state.page,
        page_size=PAGE_SIZE,
        page_count=1,
        markdown_options={"link_target": "_self"},
        style_table={"overflowX": "auto"},
        style_cell={
            "fontFamily": "inherit",
            "fontSize": "0.85rem",
            "textAlign": "left",
            "padding": "4px 8px",
            "maxWidth": "28rem",
            "whiteSpace": "normal",
            "height": "auto",
        },
        style_header={"fontWeight": "bold", "backgroundColor": "#f4f6f8"},
        style_data_conditional=[
            {
                "if": {"filter_query": '{status} != "succeeded"', "column_id": "status"},
                "color": "#b02a37",
                "fontWeight": "bold",
            },
        ],
    )
    return ui.page(
        TITLE,
        INTRO,
        ui.location("runs"),
        ui.refresher("runs"),
        controls,
        html.Div(id="runs-count", className="text-muted mb-2"),
        grid,
        problems=problems,
    )


OUTPUTS = {
    "search": Output("runs-url", "search"),
    "count": Output("runs-count", "children"),
    "rows": Output("runs-table", "data"),
    "page_count": Output("runs-table", "page_count"),
    "page_current": Output("runs-table", "page_current"),
    "refresh_off": Output("runs-refresh", "disabled"),
}


def failure(message: str) -> dict[str, Any]:
    return ui.unchanged(
        OUTPUTS, count=ui.error_alert(message), rows=[], page_count=1, refresh_off=True
    )


@ui.guarded(failure)
def update(
    q: str | None,
    status: str | None,
    task: str | None,
    sort_by: list[dict[str, str]] | None,
    page: int | None,
    new_filter: bool = False,
) -> dict[str, Any]:
    """The named :data:`OUTPUTS`: URL search, count line, table rows, page count, current
    page, refresh.

    ``new_filter``: a filter changed, so the table goes back to its first page.
    """
    sort = (sort_by or [{}])[0]
    sort_column = sort.get("column_id")
    state = RunsState(
        q=(q or "")[:100],
        status=status or "all",
        task=task or None,
        sort=sort_column if sort_column in tables.RUN_SORT_KEYS else "started",
        order="asc" if sort.get("direction") == "asc" else "desc",
        page=0 if new_filter else max(0, page or 0),
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
    running = any(row["status"] == "running" for row in rows)
    return ui.unchanged(
        OUTPUTS,
        search=to_search(state),
        count=count,
        rows=rows,
        page_count=pages,
        page_current=state.page,
        refresh_off=not running,
    )


def register(app: Dash) -> None:
    dash.register_page(
        __name__, path=PATH, name=TITLE, title=f"scalebench · {TITLE}", layout=layout, order=4
    )
    app.callback(
        output=OUTPUTS,
        inputs=[
            Input("runs-q", "value"),
            Input("runs-status", "value"),
            Input("runs-task", "value"),
            Input("runs-table", "sort_by"),
            Input("runs-table", "page_current"),
            Input("runs-refresh", "n_intervals"),
        ],
    )(wired)


def wired(q: Any, status: Any, task: Any, sort_by: Any, page: Any, _tick: Any) -> dict[str, Any]:
    """The callback: :func:`update`, told whether a filter (not the table) changed."""
    return update(q, status, task, sort_by, page, ctx.triggered_id in FILTERS)
