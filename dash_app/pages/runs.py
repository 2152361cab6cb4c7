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

import dash
import dash_bootstrap_components as dbc
from dash import Dash, Input, Output, ctx, dcc, html

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
# The server sorts: the grid keeps the rows in the order they are sent (every pair equal).
KEEP_ORDER = {"comparator": {"function": "0"}}
# A run that did not succeed: its status in red and bold.
NOT_SUCCEEDED = {"color": "#b02a37", "fontWeight": "bold"}
STATUS_STYLE = {
    "styleConditions": [{"condition": "params.value != 'succeeded'", "style": NOT_SUCCEEDED}]
}
COLUMNS = [
    {
        **ui.column(field, header, link=field == "run"),
        **KEEP_ORDER,
        **({"cellStyle": STATUS_STYLE} if field == "status" else {}),
    }
    for field, header in (
        ("run", "run"),
        ("sweep", "sweep"),
        ("task", "task"),
        ("workers", "workers"),
        ("repeat", "repeat"),
        ("status", "status"),
        ("time_to_accuracy_s", "time to accuracy"),
        ("samples_per_s", "samples/s"),
        ("communication_ratio", "communication ratio"),
        ("started", "started"),
        ("reason", "reason"),
    )
]


def sorted_columns(sort: str, order: str) -> list[dict[str, Any]]:
    """:data:`COLUMNS`, ``sort`` shown sorted in ``order`` (its arrow in the header)."""
    return [{**c, "sort": order} if c["field"] == sort else c for c in COLUMNS]


def column_state(sort: str, order: str) -> list[dict[str, Any]]:
    """The grid's column state with ``sort`` sorted in ``order``, every column in place."""
    return [{"colId": c["field"], "sort": order if c["field"] == sort else None} for c in COLUMNS]


def sort_of(state: Any) -> tuple[str, str]:
    """The sorted column and its order in the grid's column state; the newest first when no
    column it names is sorted (or the state is not the grid's)."""
    for entry in state if isinstance(state, list) else []:
        if isinstance(entry, dict) and entry.get("sort") in ("asc", "desc"):
            column = entry.get("colId")
            if isinstance(column, str) and column in tables.RUN_SORT_KEYS:
                return column, entry["sort"]
    return "started", "desc"


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
    grid = ui.grid(
        "runs-table",
        sorted_columns(state.sort, state.order),
        [],
        columnState=column_state(state.sort, state.order),
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
    return ui.page(
        TITLE,
        INTRO,
        ui.location("runs"),
        ui.refresher("runs"),
        controls,
        html.Div(id="runs-count", className="text-muted mb-2"),
        grid,
        pager,
        problems=problems,
    )


OUTPUTS = {
    "search": Output("runs-url", "search"),
    "count": Output("runs-count", "children"),
    "rows": Output("runs-table", "rowData"),
    "page_count": Output("runs-pages", "max_value"),
    "page_current": Output("runs-pages", "active_page"),
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
    columns: list[dict[str, Any]] | None,
    page: int | None,
    new_filter: bool = False,
) -> dict[str, Any]:
    """The named :data:`OUTPUTS`: URL search, count line, grid rows, page count, current
    page (the pager's, from 1), refresh.

    ``columns``: the grid's column state, which names the sorted column; ``page``: the
    pager's page, from 1. ``new_filter``: a filter changed, so the grid goes back to its
    first page.
    """
    sort, order = sort_of(columns)
    state = RunsState(
        q=(q or "")[:100],
        status=status or "all",
        task=task or None,
        sort=sort,
        order=order,
        page=0 if new_filter else max(0, (page or 1) - 1),
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
        page_current=state.page + 1,
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
            Input("runs-table", "columnState"),
            Input("runs-pages", "active_page"),
            Input("runs-refresh", "n_intervals"),
        ],
    )(wired)


def wired(q: Any, status: Any, task: Any, columns: Any, page: Any, _tick: Any) -> dict[str, Any]:
    """The callback: :func:`update`, told whether a filter (not the grid or pager) changed."""
    return update(q, status, task, columns, page, ctx.triggered_id in FILTERS)
