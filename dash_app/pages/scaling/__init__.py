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

import dash_bootstrap_components as dbc
from dash import Dash, html

from dash_app import components as ui
from dash_app import data, plots, reasons
from dash_app.choices import offered, pick_sweep, pick_sweeps
from dash_app.pages.scaling import figures
from dash_app.state import Query, to_search
from dash_app.wiring import (
    Outputs,
    Page,
    blank_figure,
    cleared,
    message,
    shown_sweep,
    tick,
    values,
)
from scalebench.statuses import RUNNING

PAGE = Page(
    __name__,
    "/scaling",
    "Scaling",
    "How time to accuracy falls as workers are added, against ideal linear scaling.",
    order=1,
)


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


def build(state: SweepState, problems: list[str]) -> html.Div:
    """The page for ``state``: its pickers, and the slots :func:`update` and
    :func:`update_projection` fill."""
    source = data.current()
    choice = pick_sweep(source, state.sweep, "training")
    if choice.chosen is None:
        return PAGE.empty(problems)
    networks = source.networks(choice.chosen.id)
    allreduce = pick_sweeps(source, (), "allreduce", "allreduce")
    return PAGE(
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


OUTPUTS = Outputs.of_page(
    "scaling",
    networks=True,
    published=True,
    summary=message("scaling-summary"),
    tta=blank_figure("scaling-tta"),
    speedup=blank_figure("scaling-speedup"),
    efficiency=blank_figure("scaling-efficiency"),
)


def update(
    sweep_id: str | None,
    published: str | None = "off",
    network: str | None = None,
    _tick: int | None = None,
) -> dict[str, Any]:
    """The :data:`OUTPUTS`: URL search, summary, published-results note, TTA, speedup and
    efficiency figures (a curve per network profile shown), whether refreshing stops, the
    network picker's options and visibility."""
    view = shown_sweep(sweep_id, network, published)
    source, sweep, shown, drawn_with = view.source, view.sweep, view.shown, view.published
    rows = {name: source.scaling(sweep.id, name) for name in shown}
    runs = source.sweep_runs(sweep.id)
    runs_on = {name: [r for r in runs if r.network == name] for name in shown}
    per_node = plots.ranks_per_node_of(runs)  # the sweep's: its node boundary and shapes
    state = SweepState(sweep=sweep.id, published=published or "off", network=view.networks.picked)
    return OUTPUTS.answer(
        search=to_search(state),
        summary=figures.summary(sweep, rows, [r for name in shown for r in runs_on[name]]),
        published_note=view.note,
        tta=plots.per_network(
            {n: figures.tta_figure(rows[n], runs_on[n], drawn_with[n], per_node) for n in shown}
        ),
        speedup=plots.per_network(
            {n: figures.speedup_figure(rows[n], drawn_with[n], per_node, runs_on[n]) for n in shown}
        ),
        efficiency=plots.per_network(
            {n: figures.efficiency_figure(rows[n], per_node, runs_on[n]) for n in shown}
        ),
        refresh_off=sweep.outcome != RUNNING,
        **view.networks.values(),
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

PROJECTION_OUTPUTS = Outputs(
    figure=blank_figure("scaling-projection", "Projected time per step"),
    table=cleared("scaling-projection-table"),
    note=message("scaling-projection-note"),
)


def update_projection(
    sweep_id: str | None,
    allreduce_ids: str | list[str] | None,
    also_measured: str | list[str] | None = None,
) -> dict[str, Any]:
    """The :data:`PROJECTION_OUTPUTS`: the projection figure, its table, and what could not be
    projected. ``sweep_id``, with the training sweeps ``also_measured`` (same task and
    configuration), is projected with the pooled fits of ``allreduce_ids``."""
    if not sweep_id:
        return PROJECTION_OUTPUTS.failure("Choose a sweep.")
    allreduce = ui.picked(allreduce_ids)
    if not allreduce:
        return PROJECTION_OUTPUTS.answer(
            figure=plots.empty_figure(
                ui.no_allreduce_sweep(len(offered(data.current(), "allreduce"))),
                "Projected time per step",
            ),
            table=None,
            note=None,
        )
    view = data.current().projection([sweep_id, *ui.picked(also_measured)], allreduce)
    runs = [] if view.points else data.current().sweep_runs(sweep_id)
    message = reasons.projection_gap(view.missing, runs, bool(view.points))
    return PROJECTION_OUTPUTS.answer(
        figure=figures.projection_figure(view.points, view.held, message),
        table=ui.table(
            "scaling-projection-rows", figures.projection_table_rows(view.points, view.held)
        )
        if view.points
        else None,
        note=html.P(message, className="small text-warning-emphasis") if message else None,
    )


def register(app: Dash) -> None:
    PAGE.register(parse_sweep, build)
    OUTPUTS.wire(
        app,
        update,
        *values("scaling-sweep", "scaling-published", "scaling-network"),
        tick("scaling"),
    )
    PROJECTION_OUTPUTS.wire(
        app,
        update_projection,
        *values("scaling-sweep", "scaling-allreduce", "scaling-projection-with"),
    )
