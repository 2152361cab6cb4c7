"""Nightly trend: time to accuracy or throughput of every nightly (scheduled) sweep per worker
count, with the nights the regression detector flagged marked.

URL: ``/trend?task=<task>&metric=time_to_accuracy_s|samples_per_s&nights=<n>``
"""

from __future__ import annotations

from typing import Any

import dash
import dash_bootstrap_components as dbc
from dash import Dash, Input, Output, dcc, html, no_update

from dash_app import components as ui
from dash_app import data, figures, tables
from dash_app.choices import is_allreduce
from dash_app.state import TrendState, parse_trend, to_search
from scalebench import units

PATH = "/trend"
TITLE = "Nightly trend"
INTRO = "Every nightly run of the regression suite, night after night; red crosses are flagged."
METRICS = [
    {"label": "time to accuracy", "value": "time_to_accuracy_s"},
    {"label": "throughput (samples/s)", "value": "samples_per_s"},
]
NO_NIGHTLY = (
    "No nightly (scheduled) sweep yet. The nightly DAG (dags/, Airflow) runs the regression "
    "suite every night; its sweeps appear here."
)


def layout(**params: Any) -> html.Div:
    state, problems = parse_trend(params)
    return _layout(state, problems)


@ui.guarded(lambda message: ui.page(TITLE, INTRO, ui.error_alert(message)))
def _layout(state: TrendState, problems: list[str]) -> html.Div:
    source = data.current()
    nightly = [s for s in source.latest_per_task("scheduled") if not is_allreduce(s.task)]
    if not nightly:
        empty = ui.empty_database() if not source.tasks() else dbc.Alert(NO_NIGHTLY, color="info")
        return ui.page(TITLE, INTRO, empty, problems=problems)
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
    return ui.page(
        TITLE,
        INTRO,
        ui.location("trend"),
        ui.refresher("trend"),
        controls,
        ui.help_text("regression"),
        ui.graph("trend-figure"),
        html.H5("Flagged regressions", className="mt-3"),
        html.Div(id="trend-flags"),
        problems=problems,
    )


def failure(message: str) -> tuple[Any, ...]:
    return (no_update, figures.empty_figure(message), ui.error_alert(message), True)


@ui.guarded(failure)
def update(
    task: str | None, metric: str | None, nights: int | None, _tick: int | None = None
) -> tuple[Any, ...]:
    """Outputs: URL search, trend figure, flagged list, refresh disabled."""
    if not task:
        return failure("Choose a task.")
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
        ui.table(
            "trend-flag-table",
            rows,
            markdown_options={"link_target": "_self"},
            columns=[
                {"name": k, "id": k, "presentation": "markdown"}
                if k == "compare"
                else {"name": k, "id": k}
                for k in rows[0]
            ],
        )
        if rows
        else html.P("None in these nights.")
    )
    newest = max(points, key=lambda p: p.created_at, default=None)
    running = (
        newest is not None
        and (sweep := source.sweep(newest.sweep_id)) is not None
        and (sweep.outcome == "running")
    )
    return (to_search(state), figures.trend_figure(points, flags, metric), flag_table, not running)


def register(app: Dash) -> None:
    dash.register_page(
        __name__, path=PATH, name=TITLE, title=f"scalebench · {TITLE}", layout=layout, order=7
    )
    app.callback(
        Output("trend-url", "search"),
        Output("trend-figure", "figure"),
        Output("trend-flags", "children"),
        Output("trend-refresh", "disabled"),
        Input("trend-task", "value"),
        Input("trend-metric", "value"),
        Input("trend-nights", "value"),
        Input("trend-refresh", "n_intervals"),
    )(update)
