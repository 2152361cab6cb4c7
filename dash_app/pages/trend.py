"""Nightly trend: time to accuracy or throughput of every nightly (scheduled) sweep per worker
count, with the nights the regression detector flagged marked.

URL: ``/trend?task=<task>&metric=time_to_accuracy_s|samples_per_s&nights=<n>``
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import dash
import dash_bootstrap_components as dbc
import plotly.graph_objects as go
from dash import Dash, Input, Output, dcc, html

from dash_app import components as ui
from dash_app import data, tables
from dash_app.choices import is_allreduce
from dash_app.plots import (
    SECONDS_AXIS,
    base_figure,
    empty_figure,
    thin,
)
from dash_app.state import TREND_METRICS, Query, to_search
from results_db import regressions
from results_db.queries.nightly import RegressionRow, TrendPoint
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


OUTPUTS = {
    "search": Output("trend-url", "search"),
    "figure": Output("trend-figure", "figure"),
    "flags": Output("trend-flags", "children"),
    "refresh_off": Output("trend-refresh", "disabled"),
}


def failure(message: str) -> dict[str, Any]:
    return ui.unchanged(
        OUTPUTS, figure=empty_figure(message), flags=ui.error_alert(message), refresh_off=True
    )


@ui.guarded(failure)
def update(
    task: str | None, metric: str | None, nights: int | None, _tick: int | None = None
) -> dict[str, Any]:
    """The named :data:`OUTPUTS`: URL search, trend figure, flagged list, refresh disabled."""
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
        ui.table("trend-flag-table", rows, links=("compare",))
        if rows
        else html.P("None in these nights.")
    )
    newest = max(points, key=lambda p: p.created_at, default=None)
    running = (
        newest is not None
        and (sweep := source.sweep(newest.sweep_id)) is not None
        and (sweep.outcome == "running")
    )
    return ui.unchanged(
        OUTPUTS,
        search=to_search(state),
        figure=trend_figure(points, flags, metric),
        flags=flag_table,
        refresh_off=not running,
    )


def register(app: Dash) -> None:
    dash.register_page(
        __name__, path=PATH, name=TITLE, title=f"scalebench · {TITLE}", layout=layout, order=7
    )
    app.callback(
        output=OUTPUTS,
        inputs=[
            Input("trend-task", "value"),
            Input("trend-metric", "value"),
            Input("trend-nights", "value"),
            Input("trend-refresh", "n_intervals"),
        ],
    )(update)


# -- the page's figure ---------------------------------------------------------------


def trend_figure(
    points: Sequence[TrendPoint], flags: Sequence[RegressionRow], metric: str
) -> go.Figure:
    """A metric of every nightly (``time_to_accuracy_s`` or ``samples_per_s``) per worker
    count over time; nights the detector flagged are marked with a red cross."""
    measure, unit = units.MEASURES[metric]
    title = f"Nightly {measure}"
    shown = [p for p in points if getattr(p, metric) is not None]
    if not shown:
        return empty_figure("No scheduled sweep with this measure yet.", title)
    configs = sorted({p.config_hash for p in shown})
    networks = {p.network for p in shown}
    series: dict[tuple[int, str, str], list[TrendPoint]] = defaultdict(list)
    for point in shown:
        series[(point.world_size, point.network, point.config_hash)].append(point)
    traces = []
    for (size, network, config), group in sorted(series.items()):
        group = thin(group)
        suffix = f" on {network}" if len(networks) > 1 else ""
        suffix += f" (configuration {config[:6]})" if len(configs) > 1 else ""
        traces.append(
            go.Scatter(
                x=[p.created_at for p in group],
                y=[getattr(p, metric) for p in group],
                mode="lines+markers",
                marker={"size": 5},
                name=units.workers(size) + suffix,
                text=[p.sweep_id for p in group],
                customdata=[[p.succeeded, p.runs] for p in group],
                hovertemplate=(
                    f"%{{text}}<br>%{{y:.4g}} {unit} (%{{customdata[0]}} of "
                    f"%{{customdata[1]}} runs succeeded)<extra>{units.workers(size)}"
                    "</extra>"
                ),
            )
        )
    changes = {
        (f.sweep_id, f.world_size): f.change
        for f in flags
        if metric in (f.metric, regressions.PER_REFERENCE.get(f.metric))
    }
    marked = [p for p in shown if (p.sweep_id, p.world_size) in changes]
    if marked:
        traces.append(
            go.Scatter(
                x=[p.created_at for p in marked],
                y=[getattr(p, metric) for p in marked],
                mode="markers",
                marker={"size": 14, "symbol": "x", "color": "#d62728"},
                name="flagged regression",
                text=[
                    f"{p.sweep_id}, {units.workers(p.world_size)}: "
                    f"{units.signed_percent(changes[(p.sweep_id, p.world_size)])} worse"
                    for p in marked
                ],
                hovertemplate="REGRESSION %{text}<extra></extra>",
            )
        )
    yaxis = {"rangemode": "tozero", "title": {"text": f"{measure} ({unit})"}}
    if unit == "s":
        yaxis.update(SECONDS_AXIS)
    return base_figure(title, traces, {"title": {"text": "night"}}, yaxis)
