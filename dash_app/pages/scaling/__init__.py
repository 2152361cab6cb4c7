"""Scaling: time-to-accuracy, speedup and efficiency of one training sweep, per worker count.

URL: ``/scaling?sweep=<sweep id>[&network=<profile>]`` (default: the newest training sweep;
every network profile of the sweep, a curve each).

Below, the sweep projected to 64 workers with all-reduce sweeps' fits (the newest one by
default; ``results_db.projection``), together with any training sweeps of the same task and
configuration picked beside it (say, the same sweep on another link): its own callback, so
the figures above never wait on it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import dash
import dash_bootstrap_components as dbc
from dash import Dash, Input, Output, html

from dash_app import components as ui
from dash_app import data, plots
from dash_app.choices import pick_sweep, pick_sweeps
from dash_app.pages.scaling import figures
from dash_app.state import Query, to_search
from results_db.analytics import SUPERLINEAR_NOTE, ScalingRow, time_to_accuracy_text
from results_db.queries.runs import RunInfo
from results_db.queries.sweeps import SweepInfo
from scalebench import units

PATH = "/scaling"
TITLE = "Scaling"
INTRO = "How time to accuracy falls as workers are added, against ideal linear scaling."


# -- the page's URL state -----------------------------------------------------------


@dataclass(frozen=True)
class SweepState:
    """Scaling: one training sweep (None: the newest), with the published results overlaid
    or not, on one of its network profiles (None: every profile, a curve each)."""

    sweep: str | None = None
    published: str = "off"
    network: str | None = None


def parse_sweep(params: Mapping[str, Any]) -> tuple[SweepState, list[str]]:
    query = Query(params)
    state = SweepState(
        sweep=query.identifier("sweep", "sweep"),
        published=query.choice("published", ("off", "on"), "off"),
        network=query.identifier("network", "network profile"),
    )
    return state, query.problems()


def layout(**params: Any) -> html.Div:
    state, problems = parse_sweep(params)
    return _layout(state, problems)


@ui.guarded(lambda message: ui.page(TITLE, INTRO, ui.error_alert(message)))
def _layout(state: SweepState, problems: list[str]) -> html.Div:
    source = data.current()
    choice = pick_sweep(source, state.sweep, "training")
    if choice.chosen is None:
        return ui.page(TITLE, INTRO, ui.empty_database(), problems=problems)
    networks = source.networks(choice.chosen.id)
    allreduce = pick_sweeps(source, (), "allreduce", "allreduce")
    return ui.page(
        TITLE,
        INTRO,
        ui.location("scaling"),
        ui.refresher("scaling"),
        dbc.Row(
            [
                ui.sweep_picker("scaling-sweep", choice.offered, choice.chosen.id, "Sweep"),
                ui.network_picker("scaling-network", networks, state.network),
                ui.published_switch("scaling-published", state.published),
            ]
        ),
        html.Div(id="scaling-published-note"),
        ui.help_text("time_to_accuracy"),
        html.Div(id="scaling-summary", className="my-3"),
        dbc.Row([dbc.Col(ui.graph("scaling-tta"), lg=12)]),
        dbc.Row(
            [
                dbc.Col(ui.graph("scaling-speedup"), lg=6),
                dbc.Col(ui.graph("scaling-efficiency"), lg=6),
            ]
        ),
        html.H5("Projection to more workers", className="mt-4"),
        dbc.Row(
            [
                ui.allreduce_picker(
                    "scaling-allreduce",
                    allreduce.offered,
                    allreduce.chosen[0].id if allreduce.chosen else None,
                ),
                ui.sweep_picker(
                    "scaling-projection-with",
                    [s for s in choice.offered if s.id != choice.chosen.id],
                    [],
                    "Measured with it: training sweeps of the same task and configuration "
                    "(say, on another link)",
                    multi=True,
                ),
            ]
        ),
        html.P(PROJECTION_HELP, className="small text-muted mt-2"),
        html.Div(id="scaling-projection-note"),
        dbc.Row([dbc.Col(ui.graph("scaling-projection"), lg=12)]),
        html.Div(id="scaling-projection-table", className="my-3"),
        problems=[*problems, *choice.problems],
    )


def scaling_rows_table(rows: list[ScalingRow]) -> list[dict[str, str]]:
    """The numbers behind the figures, with units."""
    return [
        {
            "workers": str(r.world_size),
            "runs (reached goal)": f"{r.runs} ({r.reached})"
            + (f", {r.contended} contended" if r.contended else ""),
            "time to accuracy": time_to_accuracy_text(r, units.seconds),
            "kept repeats": (
                f"{units.seconds(r.time_to_accuracy_min_s)} – "
                f"{units.seconds(r.time_to_accuracy_max_s)}"
                if r.time_to_accuracy_s is not None
                else "—"
            ),
            "without evaluation": units.seconds(r.time_to_accuracy_without_eval_s),
            "speedup": "—"
            if r.speedup is None
            else f"{r.speedup:.3g}×" + (f" ({SUPERLINEAR_NOTE})" if r.superlinear else ""),
            "compute speedup": "—" if r.compute_speedup is None else f"{r.compute_speedup:.3g}×",
            "efficiency": units.percent(r.efficiency),
            "communication ratio": units.percent(r.communication_ratio),
        }
        for r in rows
    ]


def summary(sweep: SweepInfo, rows: dict[str, list[ScalingRow]], runs: list[RunInfo]) -> html.Div:
    """The sweep in a line, the numbers of each shown network profile, what failed."""
    failed = [r for r in runs if r.status != "succeeded"]
    tables: list[Any] = []
    for network, network_rows in rows.items():
        if len(rows) > 1:
            tables.append(html.H6(f"network {network}", className="mt-3"))
        tables.append(
            ui.table(
                f"scaling-table-{len(tables)}" if tables else "scaling-table",
                scaling_rows_table(network_rows),
            )
        )
    notes = [html.Li(f"{r.id}: {r.status} — {r.reason or 'no reason recorded'}") for r in failed]
    contended = [
        html.Li(
            f"{r.id}: contended — other processes took {units.percent(r.contention_share)} "
            "of its cores while it ran"
        )
        for r in runs
        if r.contended
    ]
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
            *tables,
            html.Ul(notes, className="small text-danger mt-2") if notes else None,
            html.Ul(contended, className="small text-warning-emphasis mt-2 contended-runs")
            if contended
            else None,
        ]
    )


OUTPUTS = {
    "search": Output("scaling-url", "search"),
    "summary": Output("scaling-summary", "children"),
    "published_note": Output("scaling-published-note", "children"),
    "tta": Output("scaling-tta", "figure"),
    "speedup": Output("scaling-speedup", "figure"),
    "efficiency": Output("scaling-efficiency", "figure"),
    "refresh_off": Output("scaling-refresh", "disabled"),
    "network_options": Output("scaling-network", "options"),
    "network_style": Output("scaling-network-column", "style"),
}


def failure(message: str) -> dict[str, Any]:
    blank = plots.empty_figure(message)
    return ui.unchanged(
        OUTPUTS,
        summary=ui.error_alert(message),
        published_note=None,
        tta=blank,
        speedup=blank,
        efficiency=blank,
        refresh_off=True,
    )


@ui.guarded(failure)
def update(
    sweep_id: str | None,
    published: str | None = "off",
    network: str | None = None,
    _tick: int | None = None,
) -> dict[str, Any]:
    """The :data:`OUTPUTS`: URL search, summary, published-results note, TTA, speedup and
    efficiency figures (a curve per network profile shown), whether refreshing stops, the
    network picker's options and visibility."""
    if not sweep_id:
        return failure("Choose a sweep.")
    source = data.current()
    sweep = source.sweep(sweep_id)
    if sweep is None:
        return failure(f"There is no sweep {sweep_id!r} in the database.")
    networks = ui.choose_networks(source.networks(sweep_id), network)
    shown = networks.shown
    rows = {name: source.scaling(sweep_id, name) for name in shown}
    runs = source.sweep_runs(sweep_id)
    runs_on = {name: [r for r in runs if r.network == name] for name in shown}
    per_node = plots.ranks_per_node_of(runs)  # the sweep's: its node boundary and shapes
    points, note = ui.published_for(sweep, published == "on")
    # Published results ran on real clusters' networks: drawn once, beside the first profile.
    drawn_with = {name: points if i == 0 else () for i, name in enumerate(shown)}
    state = SweepState(sweep=sweep_id, published=published or "off", network=networks.picked)
    return ui.unchanged(
        OUTPUTS,
        search=to_search(state),
        summary=summary(sweep, rows, [r for name in shown for r in runs_on[name]]),
        published_note=note,
        tta=plots.per_network(
            {n: figures.tta_figure(rows[n], runs_on[n], drawn_with[n], per_node) for n in shown}
        ),
        speedup=plots.per_network(
            {n: figures.speedup_figure(rows[n], drawn_with[n], per_node) for n in shown}
        ),
        efficiency=plots.per_network(
            {n: figures.efficiency_figure(rows[n], per_node) for n in shown}
        ),
        refresh_off=sweep.outcome != "running",
        network_options=networks.options,
        network_style=networks.style,
    )


PROJECTION_HELP = (
    "Time per step = compute + gradient packing + all-reduce + wait for the slowest rank. "
    "Compute per step stays as measured (the per-worker batch is fixed; an unmeasured worker "
    "count takes the nearest measured one's); the all-reduce is the ring model "
    "2(k−1)·α + 2(k−1)/k·n/β fitted to the Task 0 sweep on the same link, at the gradient's "
    "n bytes. Each measured point is also predicted from the others (leave-one-out): the "
    "legend gives, per link, how far off the worst of those predictions of step and "
    "communication seconds was. The model "
    "ignores contention, topology beyond one switch, stragglers beyond those measured, and "
    "NCCL's tree algorithms."
)

PROJECTION_OUTPUTS = {
    "figure": Output("scaling-projection", "figure"),
    "table": Output("scaling-projection-table", "children"),
    "note": Output("scaling-projection-note", "children"),
}


def projection_table_rows(points: list[Any], held: list[Any]) -> list[dict[str, str]]:
    """The projection's numbers with their basis, and the leave-one-out error where the point
    was measured and predicted from the others."""
    checked = {(h.network, h.world_size): h for h in held}

    def error(value: float | None) -> str:
        return "—" if value is None else f"{value:+.1%}"

    rows = []
    for p in points:
        h = checked.get((p.network, p.world_size)) if p.measured else None
        rows.append(
            {
                "network": p.network,
                "workers": str(p.world_size),
                "step": units.seconds(p.step_s) + (" (upper bound)" if p.upper_bound else ""),
                "communication": units.percent(p.communication_share),
                "time to accuracy": units.seconds(p.time_to_accuracy_s),
                "speedup": "—" if p.speedup is None else f"{p.speedup:.3g}×",
                "leave-one-out error (step, comm, TTA)": "—"
                if h is None
                else f"{error(h.step_error)}, {error(h.communication_error)}, {error(h.tta_error)}",
                "basis": p.basis,
            }
        )
    return rows


def projection_failure(message: str) -> dict[str, Any]:
    return ui.unchanged(
        PROJECTION_OUTPUTS,
        figure=plots.empty_figure(message, "Projected time per step"),
        table=None,
        note=ui.error_alert(message),
    )


@ui.guarded(projection_failure)
def update_projection(
    sweep_id: str | None,
    allreduce_ids: str | list[str] | None,
    also_measured: str | list[str] | None = None,
) -> dict[str, Any]:
    """The :data:`PROJECTION_OUTPUTS`: the projection figure, its table, and what could not be
    projected. ``sweep_id``, with the training sweeps ``also_measured`` (same task and
    configuration), is projected with the pooled fits of ``allreduce_ids``."""
    if not sweep_id:
        return projection_failure("Choose a sweep.")
    allreduce = ui.picked(allreduce_ids)
    if not allreduce:
        return ui.unchanged(
            PROJECTION_OUTPUTS,
            figure=plots.empty_figure(ui.NO_ALLREDUCE_SWEEP, "Projected time per step"),
            table=None,
            note=None,
        )
    view = data.current().projection([sweep_id, *ui.picked(also_measured)], allreduce)
    message = " ".join(view.missing)
    return ui.unchanged(
        PROJECTION_OUTPUTS,
        figure=figures.projection_figure(view.points, view.held, message),
        table=ui.table("scaling-projection-rows", projection_table_rows(view.points, view.held))
        if view.points
        else None,
        note=html.P(message, className="small text-warning-emphasis") if message else None,
    )


def register(app: Dash) -> None:
    dash.register_page(
        __name__, path=PATH, name=TITLE, title=f"scalebench · {TITLE}", layout=layout, order=1
    )
    app.callback(
        output=OUTPUTS,
        inputs=[
            Input("scaling-sweep", "value"),
            Input("scaling-published", "value"),
            Input("scaling-network", "value"),
            Input("scaling-refresh", "n_intervals"),
        ],
    )(update)
    app.callback(
        output=PROJECTION_OUTPUTS,
        inputs=[
            Input("scaling-sweep", "value"),
            Input("scaling-allreduce", "value"),
            Input("scaling-projection-with", "value"),
        ],
    )(update_projection)
