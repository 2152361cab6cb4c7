"""Cost: dollars to reach the goal per worker count, price index, cost against time with its
Pareto front, the price table in use, and below, the cost projected to worker counts not
measured (its own callback, with all-reduce sweeps' fits: the newest one by default).

URL: ``/cost?sweep=<sweep id>&instance=<machine type>&gpu=<GPU type or none>``
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import dash_bootstrap_components as dbc
from dash import Dash, dcc, html

from dash_app import components as ui
from dash_app import data, plots, reasons, tables
from dash_app.choices import offered, pick_sweep, pick_sweeps
from dash_app.pages.cost import figures
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
from results_db.queries.costs import PriceMissing, PriceRow
from scalebench.statuses import RUNNING

PAGE = Page(
    __name__,
    "/cost",
    "Cost",
    "What reaching the goal costs at each worker count, at regular and preemptible prices, "
    "and whether the extra workers pay for themselves.",
    order=3,
)
NO_GPU = "none"
CHOOSE = "Choose a sweep, a machine type and a GPU type."
GPU_FOR_GPU_RUNS = "nvidia-tesla-t4"  # the published results' GPU


# -- the page's URL state -----------------------------------------------------------


@dataclass(frozen=True)
class CostState:
    """Cost: a training sweep and the instance and GPU types priced (``gpu="none"``: CPU
    only; ``None``: follow the sweep's device, a T4 for GPU runs and none for CPU runs)."""

    sweep: str | None = None
    instance: str = "n1-standard-4"
    gpu: str | None = None
    published: str = "off"
    network: str | None = None  # one network profile of the sweep (None: all, each apart)


def parse_cost(params: Mapping[str, Any]) -> tuple[CostState, list[str]]:
    query = Query(params)
    state = CostState(
        sweep=query.identifier("sweep", "sweep"),
        instance=query.identifier("instance", "instance type") or CostState.instance,
        gpu=query.identifier("gpu", "GPU type"),
        published=query.choice("published", ("off", "on"), "off"),
        network=query.identifier("network", "network profile"),
    )
    return state, query.problems()


def _names(prices: list[PriceRow], kind: str) -> list[str]:
    return sorted({p.name for p in prices if p.kind == kind})


def build(state: CostState, problems: list[str]) -> html.Div:
    """The page for ``state``: its pickers (the prices in the table, the GPU following the
    runs' device unless asked), and the slots :func:`update` and :func:`update_projection`
    fill."""
    source = data.current()
    choice = pick_sweep(source, state.sweep, "training")
    if choice.chosen is None:
        return PAGE.empty(problems)
    allreduce = pick_sweeps(source, (), "allreduce", "allreduce")
    prices = source.prices()
    instances, gpus = _names(prices, "instance"), [*_names(prices, "gpu"), NO_GPU]
    instance, gpu = state.instance, state.gpu
    if gpu is None:  # price what the runs ran on: no GPU price on CPU runs
        devices = {r.device for r in source.sweep_runs(choice.chosen.id)}
        gpu = GPU_FOR_GPU_RUNS if any(d.startswith("cuda") for d in devices) else NO_GPU
    if instances and instance not in instances:
        problems = [*problems, f"instance: no price for {instance!r}; using {instances[0]}."]
        instance = instances[0]
    if gpu not in gpus:
        problems = [*problems, f"gpu: no price for {gpu!r}; using {gpus[0]}."]
        gpu = gpus[0]

    def picker(element_id: str, label: str, options: list[str], value: str) -> dbc.Col:
        return dbc.Col(
            [
                dbc.Label(label, html_for=element_id),
                dcc.Dropdown(id=element_id, options=options, value=value, clearable=False),
            ],
            md=3,
        )

    return PAGE(
        ui.location("cost"),
        ui.refresher("cost"),
        dbc.Row(
            [
                ui.sweep_picker("cost-sweep", choice.offered, choice.chosen.id, "Sweep"),
                picker("cost-instance", "Machine type (one per worker)", instances, instance),
                picker("cost-gpu", "GPU type (one per worker)", gpus, gpu),
            ]
        ),
        dbc.Row(
            [
                ui.published_switch("cost-published", state.published),
                ui.network_picker("cost-network", source.networks(choice.chosen.id), state.network),
            ],
            className="mt-2",
        ),
        html.Div(id="cost-published-note"),
        ui.help_text("cost"),
        html.Div(id="cost-status"),
        dbc.Row([dbc.Col(ui.graph("cost-bars"), lg=6), dbc.Col(ui.graph("cost-index"), lg=6)]),
        dbc.Row([dbc.Col(ui.graph("cost-pareto"), lg=12)]),
        # the price table across the page: its six columns of text fit at 1,280 px
        html.H5("Prices in force", className="mt-3"),
        html.Div(id="cost-prices"),
        html.H5("Projected cost at more workers", className="mt-4"),
        dbc.Row(
            [
                ui.allreduce_picker(
                    "cost-allreduce",
                    allreduce.offered,
                    allreduce.chosen[0].id if allreduce.chosen else None,
                )
            ]
        ),
        html.P(PROJECTED_COST_HELP, className="small text-muted mt-2"),
        html.Div(id="cost-projection-note"),
        dbc.Row([dbc.Col(ui.graph("cost-projection"), lg=12)]),
        problems=[*problems, *choice.problems],
    )


PROJECTED_COST_HELP = (
    "The sweep projected to 64 workers on each of its links (as on Scaling: compute as "
    "measured, the all-reduce from the ring model fitted to the Task 0 sweeps on the same "
    "link), priced at the machine and GPU types above per worker: cost = workers × price per "
    "hour × projected time to accuracy. Steps to the goal at an unmeasured worker count come "
    "from the nearest measured one; each point's basis is in its hover."
)


OUTPUTS = Outputs.of_page(
    "cost",
    networks=True,
    published=True,
    status=message("cost-status"),
    cost=blank_figure("cost-bars"),
    price_index=blank_figure("cost-index"),
    cost_time=blank_figure("cost-pareto"),
    prices=cleared("cost-prices"),
)


def update(
    sweep_id: str | None,
    instance: str | None,
    gpu: str | None,
    published: str | None = "off",
    network: str | None = None,
    _tick: int | None = None,
) -> dict[str, Any]:
    """The named :data:`OUTPUTS`: URL search, status, published-results note, cost, price
    index, Pareto figures (each network profile shown apart), price table, refresh, the
    network picker's options and visibility."""
    if not instance or not gpu:
        return OUTPUTS.failure(CHOOSE)
    view = shown_sweep(sweep_id, network, published, CHOOSE)
    source, sweep, shown, drawn_with = view.source, view.sweep, view.shown, view.published
    sweep_id, note = sweep.id, view.note
    state = CostState(
        sweep=sweep_id,
        instance=instance,
        gpu=gpu,
        published=published or "off",
        network=view.networks.picked,
    )
    prices = ui.table("cost-price-table", tables.price_rows(source.prices()))
    try:
        rows = {
            name: source.costs(sweep_id, instance, None if gpu == NO_GPU else gpu, name)
            for name in shown
        }
    except PriceMissing as exc:
        blank = plots.empty_figure(f"{exc}; add it with `scalebench prices set`.")
        return OUTPUTS.answer(
            search=to_search(state),
            status=ui.error_alert(str(exc)),
            published_note=note,
            cost=blank,
            price_index=blank,
            cost_time=blank,
            prices=prices,
            refresh_off=True,
            **view.networks.values(),
        )
    runs = source.sweep_runs(sweep_id)
    per_node = plots.ranks_per_node_of(runs)  # its node boundary
    why = {  # each profile's reason for having no costs (none without a 1-worker time)
        n: reasons.no_baseline(
            "costs", source.scaling(sweep_id, n), [r for r in runs if r.network == n]
        )
        for n in shown
    }
    status = None
    if not any(rows.values()):
        status = dbc.Alert(why[shown[0]], color="secondary", className="cost-status")
    return OUTPUTS.answer(
        search=to_search(state),
        status=status,
        published_note=note,
        cost=plots.per_network(
            {n: figures.cost_figure(rows[n], drawn_with[n], per_node, why[n]) for n in shown}
        ),
        price_index=plots.per_network(
            {n: figures.price_index_figure(rows[n], per_node, why[n]) for n in shown}
        ),
        cost_time=plots.per_network(
            {n: figures.cost_time_figure(rows[n], drawn_with[n], why[n]) for n in shown}
        ),
        prices=prices,
        refresh_off=sweep.outcome != RUNNING,
        **view.networks.values(),
    )


PROJECTION_OUTPUTS = Outputs(
    figure=blank_figure("cost-projection", "Projected cost to reach the goal"),
    note=message("cost-projection-note"),
)


def update_projection(
    sweep_id: str | None,
    instance: str | None,
    gpu: str | None,
    allreduce_ids: str | list[str] | None,
) -> dict[str, Any]:
    """The :data:`PROJECTION_OUTPUTS`: the sweep's projected cost at the chosen prices with the
    pooled fits of ``allreduce_ids``, and what could not be projected or priced."""
    if not sweep_id or not instance or not gpu:
        return PROJECTION_OUTPUTS.failure(CHOOSE)
    allreduce = ui.picked(allreduce_ids)
    if not allreduce:
        return PROJECTION_OUTPUTS.answer(
            figure=plots.empty_figure(
                ui.no_allreduce_sweep(len(offered(data.current(), "allreduce"))),
                "Projected cost to reach the goal",
            ),
            note=None,
        )
    view = data.current().projection(
        [sweep_id], allreduce, instance, None if gpu == NO_GPU else gpu
    )
    runs = [] if view.points else data.current().sweep_runs(sweep_id)
    message = reasons.projection_gap(view.missing, runs, bool(view.points))
    return PROJECTION_OUTPUTS.answer(
        figure=figures.projected_cost_figure(view.points, message),
        note=html.P(message, className="small text-warning-emphasis") if message else None,
    )


def register(app: Dash) -> None:
    PAGE.register(parse_cost, build)
    OUTPUTS.wire(
        app,
        update,
        *values("cost-sweep", "cost-instance", "cost-gpu", "cost-published", "cost-network"),
        tick("cost"),
    )
    PROJECTION_OUTPUTS.wire(
        app,
        update_projection,
        *values("cost-sweep", "cost-instance", "cost-gpu", "cost-allreduce"),
    )
