"""Scaling: time-to-accuracy, speedup and efficiency of one training sweep, per worker count.

URL: ``/scaling?sweep=<sweep id>`` (default: the newest training sweep).
"""

from __future__ import annotations

from typing import Any

import dash
import dash_bootstrap_components as dbc
from dash import Dash, Input, Output, html, no_update

from dash_app import components as ui
from dash_app import data, figures, units
from dash_app.choices import pick_sweep
from dash_app.state import SweepState, parse_sweep, to_search
from results_db.analytics import ScalingRow, time_to_accuracy_text
from results_db.queries import RunInfo, SweepInfo

PATH = "/scaling"
TITLE = "Scaling"
INTRO = "How time to accuracy falls as workers are added, against ideal linear scaling."
GRAPHS = ("scaling-tta", "scaling-speedup", "scaling-efficiency")


def layout(**params: Any) -> html.Div:
    state, problems = parse_sweep(params)
    return _layout(state, problems)


@ui.guarded(lambda message: ui.page(TITLE, INTRO, ui.error_alert(message)))
def _layout(state: SweepState, problems: list[str]) -> html.Div:
    choice = pick_sweep(data.current(), state.sweep, "training")
    if choice.chosen is None:
        return ui.page(TITLE, INTRO, ui.empty_database(), problems=problems)
    return ui.page(
        TITLE,
        INTRO,
        ui.location("scaling"),
        ui.refresher("scaling"),
        dbc.Row(ui.sweep_picker("scaling-sweep", choice.offered, choice.chosen.id, "Sweep")),
        ui.help_text("time_to_accuracy"),
        html.Div(id="scaling-summary", className="my-3"),
        dbc.Row([dbc.Col(ui.graph(GRAPHS[0]), lg=12)]),
        dbc.Row([dbc.Col(ui.graph(GRAPHS[1]), lg=6), dbc.Col(ui.graph(GRAPHS[2]), lg=6)]),
        problems=[*problems, *choice.problems],
    )


def scaling_rows_table(rows: list[ScalingRow]) -> list[dict[str, str]]:
    """The numbers behind the figures, with units."""
    return [
        {
            "workers": str(r.world_size),
            "runs (reached goal)": f"{r.runs} ({r.reached})",
            "time to accuracy": time_to_accuracy_text(r, units.seconds),
            "kept repeats": (
                f"{units.seconds(r.time_to_accuracy_min_s)} – "
                f"{units.seconds(r.time_to_accuracy_max_s)}"
                if r.time_to_accuracy_s is not None
                else "—"
            ),
            "without evaluation": units.seconds(r.time_to_accuracy_without_eval_s),
            "speedup": "—" if r.speedup is None else f"{r.speedup:.3g}×",
            "compute speedup": "—" if r.compute_speedup is None else f"{r.compute_speedup:.3g}×",
            "efficiency": units.percent(r.efficiency),
            "communication ratio": units.percent(r.communication_ratio),
        }
        for r in rows
    ]


def summary(sweep: SweepInfo, rows: list[ScalingRow], runs: list[RunInfo]) -> html.Div:
    failed = [r for r in runs if r.status != "succeeded"]
    notes = [html.Li(f"{r.id}: {r.status} — {r.reason or 'no reason recorded'}") for r in failed]
    return html.Div(
        [
            html.P(
                [
                    ui.badge(sweep.outcome),
                    f" {sweep.task}, {sweep.trigger}, created ",
                    f"{sweep.created_at:%Y-%m-%d %H:%M}, {len(runs)} run(s). ",
                    html.A("Its runs", href=f"/runs?q={sweep.id}"),
                ]
            ),
            ui.table("scaling-table", scaling_rows_table(rows)),
            html.Ul(notes, className="small text-danger mt-2") if notes else None,
        ]
    )


def failure(message: str) -> tuple[Any, ...]:
    blank = figures.empty_figure(message)
    return (no_update, ui.error_alert(message), blank, blank, blank, True)


@ui.guarded(failure)
def update(sweep_id: str | None, _tick: int | None = None) -> tuple[Any, ...]:
    """Outputs: URL search, summary, TTA, speedup, efficiency figures, refresh disabled."""
    if not sweep_id:
        return failure("Choose a sweep.")
    source = data.current()
    sweep = source.sweep(sweep_id)
    if sweep is None:
        return failure(f"There is no sweep {sweep_id!r} in the database.")
    rows = source.scaling(sweep_id)
    runs = source.sweep_runs(sweep_id)
    return (
        to_search(SweepState(sweep=sweep_id)),
        summary(sweep, rows, runs),
        figures.tta_figure(rows, runs),
        figures.speedup_figure(rows),
        figures.efficiency_figure(rows),
        sweep.outcome != "running",
    )


def register(app: Dash) -> None:
    dash.register_page(
        __name__, path=PATH, name=TITLE, title=f"scalebench · {TITLE}", layout=layout, order=1
    )
    app.callback(
        Output("scaling-url", "search"),
        Output("scaling-summary", "children"),
        *(Output(graph, "figure") for graph in GRAPHS),
        Output("scaling-refresh", "disabled"),
        Input("scaling-sweep", "value"),
        Input("scaling-refresh", "n_intervals"),
    )(update)
