"""Communication: how much of a step is communication, where step time goes, and all-reduce
latency and bus bandwidth against message size.

URL: ``/communication?sweep=<training sweep>&allreduce=<all-reduce sweep>[,<another>…]&dtype=…``
(several all-reduce sweeps, e.g. gloo against nccl or CPU against GPU tensors, are overlaid on
one latency and one bus-bandwidth plot; each network profile of a sweep is a curve of its own;
``&network=<profile>`` shows one profile of the training sweep)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import dash
import dash_bootstrap_components as dbc
from dash import Dash, Input, Output, dcc, html

from dash_app import components as ui
from dash_app import data, plots
from dash_app.choices import pick_sweep, pick_sweeps
from dash_app.pages.communication import figures
from dash_app.state import MAX_OVERLAID, Query, to_search
from scalebench import units

PATH = "/communication"
TITLE = "Communication"
INTRO = (
    "The communication ratio (communication / step time) as workers are added, the time of "
    "each phase of a step, and the all-reduce benchmark (Task 0)."
)
NO_ALLREDUCE = (
    "No all-reduce sweep chosen.<br>To measure one: "
    "scalebench run task0-allreduce --light --workers 2"
)


# -- the page's URL state -----------------------------------------------------------


@dataclass(frozen=True)
class CommunicationState:
    """Communication: a training sweep (None: the newest) and the all-reduce sweeps whose
    curves are overlaid (none: the newest one)."""

    sweep: str | None = None
    allreduce: tuple[str, ...] = ()
    dtype: str = "all"
    network: str | None = None  # the training sweep's profile shown (None: all, a curve each)


def parse_communication(params: Mapping[str, Any]) -> tuple[CommunicationState, list[str]]:
    query = Query(params)
    state = CommunicationState(
        sweep=query.identifier("sweep", "sweep"),
        allreduce=query.identifiers("allreduce", "sweep", MAX_OVERLAID),
        dtype=query.choice("dtype", ("all", "float32", "float16", "bfloat16"), "all"),
        network=query.identifier("network", "network profile"),
    )
    return state, query.problems()


def layout(**params: Any) -> html.Div:
    state, problems = parse_communication(params)
    return _layout(state, problems)


@ui.guarded(lambda message: ui.page(TITLE, INTRO, ui.error_alert(message)))
def _layout(state: CommunicationState, problems: list[str]) -> html.Div:
    source = data.current()
    training = pick_sweep(source, state.sweep, "training")
    allreduce = pick_sweeps(source, state.allreduce, "allreduce", "allreduce")
    if training.chosen is None and not allreduce.chosen:
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
                    [s.id for s in allreduce.chosen],
                    f"All-reduce sweeps (up to {MAX_OVERLAID} overlaid)",
                    multi=True,
                ),
            ]
        ),
        dbc.Row(
            [
                dtype,
                ui.network_picker(
                    "comm-network",
                    source.networks(training.chosen.id) if training.chosen else ["host"],
                    state.network,
                ),
            ],
            className="mt-2",
        ),
        ui.help_text("communication"),
        html.Div(id="comm-status"),
        dbc.Row([dbc.Col(ui.graph("comm-ratio"), lg=6), dbc.Col(ui.graph("comm-phases"), lg=6)]),
        dbc.Row([dbc.Col(ui.graph("comm-phase-totals"), lg=6)]),
        dbc.Row([dbc.Col(ui.graph("comm-latency"), lg=6), dbc.Col(ui.graph("comm-busbw"), lg=6)]),
        html.Div(id="comm-fits", className="my-3"),
        problems=[*problems, *training.problems, *allreduce.problems],
    )


OUTPUTS = {
    "search": Output("comm-url", "search"),
    "status": Output("comm-status", "children"),
    "ratio": Output("comm-ratio", "figure"),
    "phases": Output("comm-phases", "figure"),
    "phase_totals": Output("comm-phase-totals", "figure"),
    "latency": Output("comm-latency", "figure"),
    "busbw": Output("comm-busbw", "figure"),
    "fits": Output("comm-fits", "children"),
    "refresh_off": Output("comm-refresh", "disabled"),
    "network_options": Output("comm-network", "options"),
    "network_style": Output("comm-network-column", "style"),
}


def failure(message: str) -> dict[str, Any]:
    blank = plots.empty_figure(message)
    return ui.unchanged(
        OUTPUTS,
        status=ui.error_alert(message),
        ratio=blank,
        phases=blank,
        phase_totals=blank,
        latency=blank,
        busbw=blank,
        refresh_off=True,
    )


@ui.guarded(failure)
def chosen_ids(value: Any) -> tuple[str, ...]:
    """The all-reduce picker's value as sweep ids: a list, or one id (an older link's)."""
    values = value if isinstance(value, list) else [value]
    return tuple(dict.fromkeys(v for v in values if isinstance(v, str) and v))


def update(
    sweep_id: str | None,
    allreduce_value: Any,
    dtype: str | None,
    network: str | None = None,
    _tick: int | None = None,
) -> dict[str, Any]:
    """The named :data:`OUTPUTS`: URL search, status, the ratio (a curve per network
    profile shown), phases per step, phases to the goal (the first profile shown), latency
    and busbw figures (the chosen all-reduce sweeps overlaid), refresh disabled, the network
    picker's options and visibility."""
    source = data.current()
    chosen = chosen_ids(allreduce_value)
    notes = []
    if len(chosen) > MAX_OVERLAID:
        notes.append(f"At most {MAX_OVERLAID} all-reduce sweeps are overlaid; the first are shown.")
        chosen = chosen[:MAX_OVERLAID]
    running = False
    sweep = source.sweep(sweep_id) if sweep_id else None
    networks = ui.choose_networks(source.networks(sweep.id) if sweep else ["host"], network)
    shown = networks.shown
    if sweep is not None:
        runs = source.sweep_runs(sweep.id)
        ratio = plots.per_network(
            {
                name: figures.communication_ratio_figure(
                    source.scaling(sweep_id, name),
                    [r for r in runs if r.network == name],
                    source.phases(sweep_id, name),
                )
                for name in shown
            }
        )
        phases = figures.phase_figure(source.phases(sweep_id, shown[0]))
        to_goal = figures.phase_figure(source.phase_totals(sweep_id, shown[0]), to_goal=True)
        if networks.several:  # the stacked bars show one profile
            for figure in (phases, to_goal):
                figure.update_layout(title_text=f"{figure.layout.title.text} · {shown[0]}")
        running = sweep.outcome == "running"
    else:
        ratio = phases = to_goal = plots.empty_figure("No training sweep chosen.")
    state = CommunicationState(
        sweep=sweep_id, allreduce=chosen, dtype=dtype or "all", network=networks.picked
    )
    sweeps = [s for s in (source.sweep(i) for i in chosen) if s is not None]
    if sweeps:
        rows = [row for s in sweeps for row in source.allreduce(s.id)]
        latency = figures.allreduce_latency_figure(rows, state.dtype)
        busbw = figures.allreduce_busbw_figure(rows, state.dtype)
        fits = fits_section(
            [f for s in sweeps for f in source.allreduce_fits(s.id)], state.dtype, len(sweeps)
        )
        running = running or any(s.outcome == "running" for s in sweeps)
    else:
        latency = busbw = plots.empty_figure(NO_ALLREDUCE)
        fits = None
    if running:
        notes.append("A shown sweep is still running; this page refreshes itself.")
    status = html.P(" ".join(notes), className="text-info") if notes else None
    return ui.unchanged(
        OUTPUTS,
        search=to_search(state),
        status=status,
        ratio=ratio,
        phases=phases,
        phase_totals=to_goal,
        latency=latency,
        busbw=busbw,
        fits=fits,
        refresh_off=not running,
        network_options=networks.options,
        network_style=networks.style,
    )


FITS_HELP = (
    "Ring model of each configuration: t(n, k) = 2(k−1)·α + 2(k−1)/k·n/β, fitted to the "
    "median time of each size in relative error (least absolute log error, robust to the few "
    "sizes a busy machine or a link's burst disturbed). α: seconds per ring step; β: one "
    "link's bandwidth; residual: root mean square of the sizes' relative errors, with their "
    "median and largest. gloo runs a ring (halving-doubling and bcube send the same bytes in "
    "fewer steps); nccl switches to trees for small messages across many nodes, where this "
    "model overestimates the latency."
)


def fits_section(fits: list[Any], dtype: str, sweeps: int) -> html.Div | None:
    """The table of the shown all-reduce sweeps' fits (α, β, residual), one row each."""
    shown = [f for f in fits if dtype in ("all", f.dtype)]
    if not shown:
        return None
    rows = [
        {
            **({"sweep": figures.short_sweep(f.sweep_id)} if sweeps > 1 else {}),
            "configuration": f"{f.backend} {f.device} {f.dtype}, {f.world_size} workers",
            "network": f.network,
            "α (per ring step)": units.seconds(f.alpha_s),
            "β (per link)": units.bandwidth(f.beta_bytes_per_s),
            "residual (RMS)": units.percent(f.residual),
            "median error": units.percent(f.median_error),
            "largest error": units.percent(f.max_error),
            "sizes": f"{f.sizes}",
        }
        for f in shown
    ]
    return html.Div(
        [
            html.H6("All-reduce model: latency α and bandwidth β"),
            html.P(FITS_HELP, className="small text-muted"),
            ui.table("comm-fits-table", rows),
        ]
    )


def register(app: Dash) -> None:
    dash.register_page(
        __name__, path=PATH, name=TITLE, title=f"scalebench · {TITLE}", layout=layout, order=2
    )
    app.callback(
        output=OUTPUTS,
        inputs=[
            Input("comm-sweep", "value"),
            Input("comm-allreduce", "value"),
            Input("comm-dtype", "value"),
            Input("comm-network", "value"),
            Input("comm-refresh", "n_intervals"),
        ],
    )(update)
