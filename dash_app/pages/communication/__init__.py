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

import dash_bootstrap_components as dbc
from dash import Dash, dcc, html

from dash_app import components as ui
from dash_app import data, plots, reasons
from dash_app.choices import offered, pick_sweep, pick_sweeps
from dash_app.pages.communication import figures
from dash_app.state import MAX_OVERLAID, Query, to_search
from dash_app.wiring import Outputs, Page, blank_figure, kept, message, tick, values
from scalebench.statuses import RUNNING

PAGE = Page(
    __name__,
    "/communication",
    "Communication",
    "The communication ratio (communication / step time) as workers are added, the time of "
    "each phase of a step, and the all-reduce benchmark (Task 0).",
    order=2,
)
TO_MEASURE = "To measure one: scalebench run task0-allreduce --light --workers 2"


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


def build(state: CommunicationState, problems: list[str]) -> html.Div:
    """The page for ``state``: its pickers, and the slots :func:`update` fills."""
    source = data.current()
    training = pick_sweep(source, state.sweep, "training")
    allreduce = pick_sweeps(source, state.allreduce, "allreduce", "allreduce")
    if training.chosen is None and not allreduce.chosen:
        return PAGE.empty(problems)
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
    return PAGE(
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


OUTPUTS = Outputs.of_page(
    "comm",
    networks=True,
    status=message("comm-status"),
    ratio=blank_figure("comm-ratio"),
    phases=blank_figure("comm-phases"),
    phase_totals=blank_figure("comm-phase-totals"),
    latency=blank_figure("comm-latency"),
    busbw=blank_figure("comm-busbw"),
    fits=kept("comm-fits", "children"),
)


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
        first = [r for r in runs if r.network == shown[0]]
        phases = figures.phase_figure(source.phases(sweep_id, shown[0]), runs=first)
        to_goal = figures.phase_figure(source.phase_totals(sweep_id, shown[0]), True, first)
        if networks.several:  # the stacked bars show one profile
            for figure in (phases, to_goal):
                figure.update_layout(title_text=f"{figure.layout.title.text} · {shown[0]}")
        running = sweep.outcome == RUNNING
    else:
        stored = len(offered(source, "training"))
        ratio = phases = to_goal = plots.empty_figure(
            reasons.no_sweep("training", [sweep_id] if sweep_id else [], [], stored)
        )
    state = CommunicationState(
        sweep=sweep_id, allreduce=chosen, dtype=dtype or "all", network=networks.picked
    )
    sweeps = [s for s in (source.sweep(i) for i in chosen) if s is not None]
    if sweeps:
        rows = [row for s in sweeps for row in source.allreduce(s.id)]
        measured = [r for s in sweeps for r in source.sweep_runs(s.id)]
        latency = figures.allreduce_latency_figure(rows, state.dtype, measured)
        busbw = figures.allreduce_busbw_figure(rows, state.dtype, measured)
        fits = figures.fits_section(
            [f for s in sweeps for f in source.allreduce_fits(s.id)], state.dtype, len(sweeps)
        )
        running = running or any(s.outcome == RUNNING for s in sweeps)
    else:
        missing = reasons.no_sweep("all-reduce", chosen, [], len(offered(source, "allreduce")))
        latency = busbw = plots.empty_figure(f"{missing}<br>{TO_MEASURE}")
        fits = None
    if running:
        notes.append("A shown sweep is still running; this page refreshes itself.")
    status = html.P(" ".join(notes), className="text-info") if notes else None
    return OUTPUTS.answer(
        search=to_search(state),
        status=status,
        ratio=ratio,
        phases=phases,
        phase_totals=to_goal,
        latency=latency,
        busbw=busbw,
        fits=fits,
        refresh_off=not running,
        **networks.values(),
    )


def register(app: Dash) -> None:
    PAGE.register(parse_communication, build)
    OUTPUTS.wire(
        app,
        update,
        *values("comm-sweep", "comm-allreduce", "comm-dtype", "comm-network"),
        tick("comm"),
    )
