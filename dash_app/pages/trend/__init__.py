"""Nightly trend: time to accuracy or throughput of every nightly (scheduled) sweep per worker
count, with the nights the regression detector flagged marked.

URL: ``/trend?task=<task>&metric=time_to_accuracy_s|samples_per_s&nights=<n>``
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import dash_bootstrap_components as dbc
from dash import Dash, dcc, html

from dash_app import components as ui
from dash_app import data, tables
from dash_app.choices import is_allreduce
from dash_app.pages.trend import figures
from dash_app.state import TREND_METRICS, Query, to_search
from dash_app.wiring import Outputs, Page, blank_figure, message, tick, values
from scalebench import units
from scalebench.statuses import RUNNING

PAGE = Page(
    __name__,
    "/trend",
    "Nightly trend",
    "Every nightly run of the regression suite, night after night; red crosses are flagged.",
    order=7,
)
METRICS = [
    {"label": "time to accuracy", "value": "time_to_accuracy_s"},
    {"label": "throughput (samples/s)", "value": "samples_per_s"},
]
NO_NIGHTLY = (
    "No nightly (scheduled) sweep yet. The nightly DAG (dags/, Airflow) runs the regression "
    "suite every night; its sweeps appear here."
)


# -- the page's URL state -----------------------------------------------------------


@dataclass(frozen=True)
class TrendState:
    """Nightly trend of one task: a metric over the newest ``nights`` scheduled sweeps."""

    task: str | None = None
    metric: str = "time_to_accuracy_s"
    nights: int = 90


def parse_trend(params: Mapping[str, Any]) -> tuple[TrendState, list[str]]:
    query = Query(params)
    state = TrendState(
        task=query.identifier("task", "task"),
        metric=query.choice("metric", TREND_METRICS, TrendState.metric),
        nights=query.integer("nights", 90, 2, 3650),
    )
    return state, query.problems()


def build(state: TrendState, problems: list[str]) -> html.Div:
    """The page for ``state``: its controls, figure and flagged nights (filled by
    :func:`update`)."""
    source = data.current()
    nightly = [s for s in source.latest_per_task("scheduled") if not is_allreduce(s.task)]
    if not nightly:
        empty = ui.empty_database() if not source.tasks() else dbc.Alert(NO_NIGHTLY, color="info")
        return PAGE(empty, problems=problems)
    tasks = [s.task for s in nightly]
    task = state.task
    if task not in tasks:
        if task is not None:
            problems = [*problems, f"task: no nightly sweeps of {task!r}; showing {tasks[0]}."]
        task = tasks[0]
    controls = dbc.Row(
        [
            dbc.Col(
                [
                    dbc.Label("Task", html_for="trend-task"),
                    dcc.Dropdown(id="trend-task", options=tasks, value=task, clearable=False),
                ],
                md=4,
            ),
            dbc.Col(
                [
                    dbc.Label("Measure", html_for="trend-metric"),
                    dcc.RadioItems(
                        id="trend-metric",
                        options=METRICS,
                        value=state.metric,
                        inline=True,
                        inputClassName="me-1",
                        labelClassName="me-3",
                    ),
                ],
                md=4,
            ),
            dbc.Col(
                [
                    dbc.Label("Nights", html_for="trend-nights"),
                    dbc.Input(
                        id="trend-nights",
                        type="number",
                        min=2,
                        max=3650,
                        step=1,
                        value=state.nights,
                        debounce=True,
                    ),
                ],
                md=2,
            ),
        ],
        className="mb-2",
    )
    return PAGE(
        ui.location("trend"),
        ui.refresher("trend"),
        controls,
        ui.help_text("regression"),
        ui.graph("trend-figure"),
        html.H5("Flagged regressions", className="mt-3"),
        html.Div(id="trend-flags"),
        problems=problems,
    )


OUTPUTS = Outputs.of_page(
    "trend",
    figure=blank_figure("trend-figure"),
    flags=message("trend-flags"),
)


def update(
    task: str | None, metric: str | None, nights: int | None, _tick: int | None = None
) -> dict[str, Any]:
    """The named :data:`OUTPUTS`: URL search, trend figure, flagged list, refresh disabled."""
    if not task:
        return OUTPUTS.failure("Choose a task.")
    metric = metric if metric in units.MEASURES else TrendState.metric
    valid = isinstance(nights, int) and 2 <= nights <= 3650
    state = TrendState(task=task, metric=metric, nights=nights if valid else TrendState.nights)
    source = data.current()
    points = source.trend(task, state.nights)
    shown = {p.sweep_id for p in points}
    flags = [f for f in source.regressions(task=task, limit=1000) if f.sweep_id in shown]
    rows = [
        {
            "night": tables.when(f.sweep_created_at),
            "sweep": f.sweep_id,
            "workers": f.world_size,
            "measure": units.measure(f.metric),
            "change": units.signed_percent(f.change),
            "p": "—" if f.p_value is None else f"{f.p_value:.3g}",
            "compare": f"[against its baseline]({tables.link('/compare', a=f.sweep_id)})",
            "reason": f.reason,
        }
        for f in flags
    ]
    flag_table = (
        ui.table("trend-flag-table", rows, links=("compare",))
        if rows
        else html.P("None in these nights.")
    )
    newest = max(points, key=lambda p: p.when, default=None)
    running = (
        newest is not None
        and (sweep := source.sweep(newest.sweep_id)) is not None
        and (sweep.outcome == RUNNING)
    )
    return OUTPUTS.answer(
        search=to_search(state),
        figure=figures.trend_figure(points, flags, metric),
        flags=flag_table,
        refresh_off=not running,
    )


def register(app: Dash) -> None:
    PAGE.register(parse_trend, build)
    OUTPUTS.wire(app, update, *values("trend-task", "trend-metric", "trend-nights"), tick("trend"))
