"""Communication: how much of a step is communication, where step time goes, and all-reduce
latency and bus bandwidth against message size.

URL: ``/communication?sweep=<training sweep>&allreduce=<all-reduce sweep>&dtype=all|float32|…``
"""

from __future__ import annotations

from typing import Any

import dash
import dash_bootstrap_components as dbc
from dash import Dash, Input, Output, dcc, html, no_update

from dash_app import components as ui
from dash_app import data, figures
from dash_app.choices import pick_sweep
from dash_app.state import CommunicationState, parse_communication, to_search

PATH = "/communication"
TITLE = "Communication"
INTRO = (
    "The share of each step spent communicating as workers are added, the time of each phase "
    "of a step, and the all-reduce benchmark (Task 0)."
)
GRAPHS = ("comm-ratio", "comm-phases", "comm-phase-totals", "comm-latency", "comm-busbw")
NO_ALLREDUCE = "No all-reduce sweep yet: scalebench run task0-allreduce --light --workers 2"


def layout(**params: Any) -> html.Div:
    state, problems = parse_communication(params)
    return _layout(state, problems)


@ui.guarded(lambda message: ui.page(TITLE, INTRO, ui.error_alert(message)))
def _layout(state: CommunicationState, problems: list[str]) -> html.Div:
    source = data.current()
    training = pick_sweep(source, state.sweep, "training")
    allreduce = pick_sweep(source, state.allreduce, "allreduce", "allreduce")
    if training.chosen is None and allreduce.chosen is None:
        return ui.page(TITLE, INTRO, ui.empty_database(), problems=problems)
    dtype = dbc.Col(
        [
            dbc.Label("all-reduce dtype", html_for="comm-dtype"),
            dcc.RadioItems(
                id="comm-dtype",
                options=["all", "float32", "float16", "bfloat16"],
                value=state.dtype,
                inline=True,
                inputClassName="me-1",
                labelClassName="me-3",
            ),
        ],
        md=3,
    )
    return ui.page(
        TITLE,
        INTRO,
        ui.location("comm"),
        ui.refresher("comm"),
        dbc.Row(
            [
                ui.sweep_picker(
                    "comm-sweep",
                    training.offered,
                    training.chosen.id if training.chosen else None,
                    "Training sweep",
                ),
                ui.sweep_picker(
                    "comm-allreduce",
                    allreduce.offered,
                    allreduce.chosen.id if allreduce.chosen else None,
                    "All-reduce sweep",
                ),
            ]
        ),
        dbc.Row(dtype, className="mt-2"),
        ui.help_text("communication"),
        html.Div(id="comm-status"),
        dbc.Row([dbc.Col(ui.graph(GRAPHS[0]), lg=6), dbc.Col(ui.graph(GRAPHS[1]), lg=6)]),
        dbc.Row([dbc.Col(ui.graph(GRAPHS[2]), lg=6)]),
        dbc.Row([dbc.Col(ui.graph(GRAPHS[3]), lg=6), dbc.Col(ui.graph(GRAPHS[4]), lg=6)]),
        problems=[*problems, *training.problems, *allreduce.problems],
    )


def failure(message: str) -> tuple[Any, ...]:
    blank = figures.empty_figure(message)
    return (no_update, ui.error_alert(message), *(blank for _ in GRAPHS), True)


@ui.guarded(failure)
def update(
    sweep_id: str | None, allreduce_id: str | None, dtype: str | None, _tick: int | None = None
) -> tuple[Any, ...]:
    """Outputs: URL search, status, the ratio, phases per step, phases to the goal,
    latency and busbw figures, refresh disabled."""
    source = data.current()
    state = CommunicationState(sweep=sweep_id, allreduce=allreduce_id, dtype=dtype or "all")
    running = False
    if sweep_id and (sweep := source.sweep(sweep_id)) is not None:
        rows = source.scaling(sweep_id)
        per_step = source.phases(sweep_id)
        ratio = figures.communication_ratio_figure(rows, source.sweep_runs(sweep_id), per_step)
        phases = figures.phase_figure(per_step)
        to_goal = figures.phase_figure(source.phase_totals(sweep_id), to_goal=True)
        running = sweep.outcome == "running"
    else:
        ratio = phases = to_goal = figures.empty_figure("No training sweep chosen.")
    if allreduce_id and (sweep := source.sweep(allreduce_id)) is not None:
        rows = source.allreduce(allreduce_id)
        latency = figures.allreduce_latency_figure(rows, state.dtype)
        busbw = figures.allreduce_busbw_figure(rows, state.dtype)
        running = running or sweep.outcome == "running"
    else:
        latency = busbw = figures.empty_figure(NO_ALLREDUCE)
    status = (
        html.P("A shown sweep is still running; this page refreshes itself.", className="text-info")
        if running
        else None
    )
    return (to_search(state), status, ratio, phases, to_goal, latency, busbw, not running)


def register(app: Dash) -> None:
    dash.register_page(
        __name__, path=PATH, name=TITLE, title=f"scalebench · {TITLE}", layout=layout, order=2
    )
    app.callback(
        Output("comm-url", "search"),
        Output("comm-status", "children"),
        *(Output(graph, "figure") for graph in GRAPHS),
        Output("comm-refresh", "disabled"),
        Input("comm-sweep", "value"),
        Input("comm-allreduce", "value"),
        Input("comm-dtype", "value"),
        Input("comm-refresh", "n_intervals"),
    )(update)
