"""Compare: two training sweeps side by side (e.g. last night against its baseline), with
per-configuration deltas and the regression verdict; and where A ran two or more stacks
(``scalebench run TASK --stack base=PY --stack tonight=PY2 --pairs 5``), A's stacks side by
side, each against its first with 95 % intervals, as ``scalebench compare A`` prints them.

URL: ``/compare?a=<sweep id>&b=<sweep id>``. Defaults: A is the newest nightly (or the newest
sweep), B the sweep before it with the same configuration.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import dash_bootstrap_components as dbc
from dash import Dash, html

from dash_app import components as ui
from dash_app import data, tables
from dash_app.choices import pick_sweep
from dash_app.pages.compare import figures
from dash_app.plots import per_network
from dash_app.state import Query, to_search
from dash_app.wiring import Outputs, Page, blank_figure, chosen, cleared, message, tick, values
from scalebench.statuses import RUNNING

PAGE = Page(
    __name__,
    "/compare",
    "Compare",
    "Two sweeps side by side: A (e.g. last night) against B (e.g. its baseline).",
    order=6,
)


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


def build(state: CompareState, problems: list[str]) -> html.Div:
    """The page for ``state``: A, B (the newest nightly and its baseline by default), and
    the slots :func:`update` fills."""
    source = data.current()
    a = pick_sweep(source, state.a, "training", "a")
    if a.chosen is None:
        return PAGE.empty(problems)
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
    return PAGE(
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
        html.Div(id="compare-stacks"),
        problems=[*problems, *a.problems, *b.problems],
    )


OUTPUTS = Outputs.of_page(
    "compare",
    verdict=message("compare-verdict"),
    table=cleared("compare-table"),
    figure=blank_figure("compare-figure"),
    stacks=cleared("compare-stacks"),
)


def update(a_id: str | None, b_id: str | None, _tick: int | None = None) -> dict[str, Any]:
    """The named :data:`OUTPUTS`: URL search, verdict, deltas table, side-by-side figure,
    A's stacks side by side (:func:`figures.stacks_section`: nothing for a sweep that ran
    none, a note for one that ran one), refresh disabled."""
    if not a_id or not b_id:
        return OUTPUTS.failure("Choose two sweeps.")
    source = data.current()
    a, b = chosen(a_id, source.sweep, "sweep"), chosen(b_id, source.sweep, "sweep")
    # Each network profile is its own configuration: compared with the same profile only.
    a_networks, b_networks = source.networks(a_id), source.networks(b_id)
    networks = list(dict.fromkeys([*a_networks, *b_networks]))
    a_runs, b_runs = source.sweep_runs(a_id), source.sweep_runs(b_id)
    deltas, drawn = [], {}
    for network in networks:
        a_rows = source.scaling(a_id, network) if network in a_networks else []
        b_rows = source.scaling(b_id, network) if network in b_networks else []
        deltas += tables.compare_rows(a_rows, b_rows, a_runs, b_runs, network)
        drawn[network] = figures.compare_figure(
            a_rows,
            b_rows,
            a_id,
            b_id,
            [r for r in a_runs if r.network == network],
            [r for r in b_runs if r.network == network],
        )
    flags = source.regressions(sweep_ids=[a_id])
    return OUTPUTS.answer(
        search=to_search(CompareState(a=a_id, b=b_id)),
        verdict=figures.verdict(a, b, flags, deltas, figures.hardware_warning(a_runs, b_runs)),
        table=ui.table("compare-deltas", tables.delta_rows(deltas)),
        figure=per_network(drawn),
        stacks=figures.stacks_section(source.stack_report(a_id)),
        refresh_off=RUNNING not in (a.outcome, b.outcome),
    )


def register(app: Dash) -> None:
    PAGE.register(parse_compare, build)
    OUTPUTS.wire(app, update, *values("compare-a", "compare-b"), tick("compare"))
