"""Compare: two training sweeps side by side (e.g. last night against its baseline), with
per-configuration deltas and the regression verdict.

URL: ``/compare?a=<sweep id>&b=<sweep id>``. Defaults: A is the newest nightly (or the newest
sweep), B the sweep before it with the same configuration.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import dash
import dash_bootstrap_components as dbc
import plotly.graph_objects as go
from dash import Dash, Input, Output, html

from dash_app import components as ui
from dash_app import data, tables
from dash_app.choices import pick_sweep
from dash_app.plots import (
    CATEGORY_WORKERS,
    SECONDS_AXIS,
    base_figure,
    empty_figure,
    per_network,
    spread_of,
)
from dash_app.state import Query, to_search
from results_db.analytics import ScalingRow
from results_db.queries.nightly import RegressionRow
from results_db.queries.runs import RunInfo
from results_db.queries.sweeps import SweepInfo
from scalebench import units

PATH = "/compare"
TITLE = "Compare"
INTRO = "Two sweeps side by side: A (e.g. last night) against B (e.g. its baseline)."


# -- the page's URL state -----------------------------------------------------------


@dataclass(frozen=True)
class CompareState:
    """Two sweeps: ``a`` (e.g. last night) against ``b`` (its baseline)."""

    a: str | None = None
    b: str | None = None


def parse_compare(params: Mapping[str, Any]) -> tuple[CompareState, list[str]]:
    query = Query(params)
    state = CompareState(a=query.identifier("a", "sweep"), b=query.identifier("b", "sweep"))
    return state, query.problems()


def layout(**params: Any) -> html.Div:
    state, problems = parse_compare(params)
    return _layout(state, problems)


@ui.guarded(lambda message: ui.page(TITLE, INTRO, ui.error_alert(message)))
def _layout(state: CompareState, problems: list[str]) -> html.Div:
    source = data.current()
    a = pick_sweep(source, state.a, "training", "a")
    if a.chosen is None:
        return ui.page(TITLE, INTRO, ui.empty_database(), problems=problems)
    a_id = a.chosen.id
    if state.a is None or a.problems:
        nightly = next((s for s in a.offered if s.trigger == "scheduled"), None)
        a_id = nightly.id if nightly else a_id
    b = pick_sweep(source, state.b, "training", "b")
    b_id = b.chosen.id if state.b is not None and not b.problems and b.chosen else None
    if b_id is None:
        b_id = source.baseline_of(a_id) or next(
            (s.id for s in b.offered if s.id != a_id and s.task == a.chosen.task), a_id
        )
    return ui.page(
        TITLE,
        INTRO,
        ui.location("compare"),
        ui.refresher("compare"),
        dbc.Row(
            [
                ui.sweep_picker("compare-a", a.offered, a_id, "A (newer)"),
                ui.sweep_picker("compare-b", b.offered, b_id, "B (baseline)"),
            ]
        ),
        ui.help_text("regression"),
        html.Div(id="compare-verdict", className="my-3"),
        html.Div(id="compare-table"),
        ui.graph("compare-figure"),
        problems=[*problems, *a.problems, *b.problems],
    )


def hardware_warning(a_runs: Sequence[RunInfo], b_runs: Sequence[RunInfo]) -> str | None:
    """Why A and B are not comparable machines, in words (None: same or not recorded)."""
    a_hardware = sorted({r.hardware for r in a_runs if r.hardware})
    b_hardware = sorted({r.hardware for r in b_runs if r.hardware})
    if not a_hardware or not b_hardware or a_hardware == b_hardware:
        return None
    return (
        f"A and B ran on different hardware (A: {'; '.join(a_hardware)}; B: "
        f"{'; '.join(b_hardware)}): their differences are not only the code's."
    )


def verdict(
    a: SweepInfo,
    b: SweepInfo,
    flags: list[RegressionRow],
    deltas: list[tables.Delta],
    hardware: str | None = None,
) -> html.Div:
    """The detector's stored flags for A, then warnings about what is being compared
    (``hardware``: :func:`hardware_warning`)."""
    parts: list[Any] = []
    if flags:
        parts.append(
            dbc.Alert(
                [
                    html.Strong("REGRESSION flagged by the nightly detector for A: "),
                    html.Ul(
                        [
                            html.Li(
                                f"{units.workers(f.world_size)}, {units.measure(f.metric)}: "
                                + (
                                    f"{units.signed_percent(f.change)} worse (p = {f.p_value:.3g})"
                                    if f.change is not None and f.p_value is not None
                                    else f.reason
                                )
                            )
                            for f in flags
                        ]
                    ),
                ],
                color="danger",
                className="regression-verdict",
            )
        )
    elif a.trigger == "scheduled":
        parts.append(
            dbc.Alert(
                "The nightly detector flagged nothing for A.",
                color="success",
                className="regression-verdict",
            )
        )
    else:
        parts.append(
            dbc.Alert(
                "A is not a nightly (scheduled) sweep, so the detector did not "
                "judge it; the table applies its rule to A against B.",
                color="secondary",
                className="regression-verdict",
            )
        )
    if any(d.verdict == "REGRESSION" for d in deltas):
        parts.append(
            dbc.Alert("A is significantly slower than B at some worker count.", color="warning")
        )
    if a.id == b.id:
        parts.append(dbc.Alert("A and B are the same sweep.", color="secondary"))
    elif a.config_hash != b.config_hash or a.task != b.task:
        parts.append(
            dbc.Alert(
                "A and B differ in task or configuration (backend, precision, "
                "variant, light): their differences are not only the code's.",
                color="warning",
            )
        )
    if hardware:
        parts.append(dbc.Alert(hardware, color="warning", className="hardware-differs"))
    if any(d.contended for d in deltas):
        parts.append(
            dbc.Alert(
                "Contended runs (other processes took their cores while they ran) are left "
                "out of the throughputs and the test.",
                color="secondary",
            )
        )
    return html.Div(parts)


OUTPUTS = {
    "search": Output("compare-url", "search"),
    "verdict": Output("compare-verdict", "children"),
    "table": Output("compare-table", "children"),
    "figure": Output("compare-figure", "figure"),
    "refresh_off": Output("compare-refresh", "disabled"),
}


def failure(message: str) -> dict[str, Any]:
    return ui.unchanged(
        OUTPUTS,
        verdict=ui.error_alert(message),
        table=None,
        figure=empty_figure(message),
        refresh_off=True,
    )


@ui.guarded(failure)
def update(a_id: str | None, b_id: str | None, _tick: int | None = None) -> dict[str, Any]:
    """The named :data:`OUTPUTS`: URL search, verdict, deltas table, side-by-side figure,
    refresh disabled."""
    if not a_id or not b_id:
        return failure("Choose two sweeps.")
    source = data.current()
    a, b = source.sweep(a_id), source.sweep(b_id)
    if a is None or b is None:
        return failure(f"There is no sweep {(b_id if a else a_id)!r} in the database.")
    # Each network profile is its own configuration: compared with the same profile only.
    a_networks, b_networks = source.networks(a_id), source.networks(b_id)
    networks = list(dict.fromkeys([*a_networks, *b_networks]))
    a_runs, b_runs = source.sweep_runs(a_id), source.sweep_runs(b_id)
    deltas, drawn = [], {}
    for network in networks:
        a_rows = source.scaling(a_id, network) if network in a_networks else []
        b_rows = source.scaling(b_id, network) if network in b_networks else []
        deltas += tables.compare_rows(a_rows, b_rows, a_runs, b_runs, network)
        drawn[network] = compare_figure(a_rows, b_rows, a_id, b_id)
    flags = source.regressions(sweep_ids=[a_id])
    return ui.unchanged(
        OUTPUTS,
        search=to_search(CompareState(a=a_id, b=b_id)),
        verdict=verdict(a, b, flags, deltas, hardware_warning(a_runs, b_runs)),
        table=ui.table("compare-deltas", tables.delta_rows(deltas)),
        figure=per_network(drawn),
        refresh_off="running" not in (a.outcome, b.outcome),
    )


def register(app: Dash) -> None:
    dash.register_page(
        __name__, path=PATH, name=TITLE, title=f"scalebench · {TITLE}", layout=layout, order=6
    )
    app.callback(
        output=OUTPUTS,
        inputs=[
            Input("compare-a", "value"),
            Input("compare-b", "value"),
            Input("compare-refresh", "n_intervals"),
        ],
    )(update)


# -- the page's figure ---------------------------------------------------------------


def compare_figure(
    a_rows: Sequence[ScalingRow], b_rows: Sequence[ScalingRow], a_name: str, b_name: str
) -> go.Figure:
    """Time to accuracy (s) of two sweeps side by side, per worker count."""
    title = "Time to accuracy, side by side"
    if not any(r.time_to_accuracy_s for r in [*a_rows, *b_rows]):
        return empty_figure("Neither sweep has a run that reached its goal.", title)
    traces = []
    for rows, name in ((b_rows, f"B: {b_name}"), (a_rows, f"A: {a_name}")):
        done = [r for r in rows if r.time_to_accuracy_s is not None]
        traces.append(
            go.Bar(
                x=[str(r.world_size) for r in done],
                y=[r.time_to_accuracy_s for r in done],
                name=name,
                error_y=spread_of(done),
                hovertemplate="%{x} worker(s): %{y:.4g} s<extra>" + name[:40] + "</extra>",
            )
        )
    yaxis = {**SECONDS_AXIS, "title": {"text": "time to accuracy (s)"}}
    return base_figure(title, traces, CATEGORY_WORKERS, yaxis, barmode="group")
