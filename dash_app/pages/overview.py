"""Overview: flagged regressions first, then the nightly status and the latest sweep of each task.

URL: ``/`` (no parameters). With an empty database it says what to run.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import dash
import dash_bootstrap_components as dbc
from dash import Dash, Input, Output, dcc, html

from dash_app import components as ui
from dash_app import data, tables
from dash_app.choices import is_allreduce
from dash_app.state import Query
from results_db.queries.nightly import RegressionRow
from results_db.queries.sweeps import RunProgress, SweepInfo
from scalebench import units

PATH = "/"
TITLE = "Overview"
INTRO = "The latest results of every benchmark task and how last night went."


# -- the page's URL state -----------------------------------------------------------


@dataclass(frozen=True)
class OverviewState:
    """The overview has no filters."""


def parse_overview(params: Mapping[str, Any]) -> tuple[OverviewState, list[str]]:
    return OverviewState(), Query(params).problems()


def layout(**params: Any) -> html.Div:
    _, problems = parse_overview(params)
    return ui.page(
        TITLE,
        INTRO,
        ui.refresher("overview"),
        dcc.Loading(html.Div(id="overview-content")),
        problems=problems,
    )


def sweep_link(sweep: SweepInfo) -> dcc.Link:
    page = "/communication" if is_allreduce(sweep.task) else "/scaling"
    key = "allreduce" if is_allreduce(sweep.task) else "sweep"
    return dcc.Link(sweep.id, href=tables.link(page, **{key: sweep.id}))


def regressions_alert(flags: list[RegressionRow]) -> dbc.Alert:
    if not flags:
        return dbc.Alert(
            "No regression flagged in the latest nightlies.",
            color="success",
            className="overview-regressions",
        )
    items = [
        html.Li(
            [
                f"{f.task}, {units.workers(f.world_size)}, {units.measure(f.metric)}: ",
                html.Strong(
                    units.signed_percent(f.change) + " worse" if f.change is not None else f.reason
                ),
                f" (p = {f.p_value:.3g}) " if f.p_value is not None else " ",
                f"in {f.sweep_id} ({tables.when(f.sweep_created_at)}) — ",
                dcc.Link("compare with its baseline", href=tables.link("/compare", a=f.sweep_id)),
            ]
        )
        for f in flags
    ]
    return dbc.Alert(
        [
            html.H4("Regression flagged", className="alert-heading"),
            html.Ul(items, className="mb-0"),
        ],
        color="danger",
        className="overview-regressions",
    )


def nightly_table(nightly: list[SweepInfo], flags: list[RegressionRow]) -> Any:
    if not nightly:
        return html.P("No nightly (scheduled) sweep yet.", className="text-muted")
    counts = {s.id: sum(f.sweep_id == s.id for f in flags) for s in nightly}
    rows = [
        html.Tr(
            [
                html.Td(s.task),
                html.Td(tables.when(s.created_at)),
                html.Td(ui.badge(s.outcome)),
                html.Td(
                    dbc.Badge(f"{counts[s.id]} flagged", color="danger")
                    if counts[s.id]
                    else "none flagged"
                ),
                html.Td(
                    [
                        sweep_link(s),
                        " · ",
                        dcc.Link("trend", href=tables.link("/trend", task=s.task)),
                        " · ",
                        dcc.Link("compare", href=tables.link("/compare", a=s.id)),
                    ]
                ),
            ]
        )
        for s in nightly
    ]
    header = html.Thead(
        html.Tr([html.Th(h) for h in ("task", "night", "outcome", "regressions", "sweep")])
    )
    return dbc.Table([header, html.Tbody(rows)], size="sm", hover=True, id="overview-nightly")


def latest_table(latest: list[SweepInfo]) -> Any:
    rows = [
        html.Tr(
            [
                html.Td(s.task),
                html.Td(sweep_link(s)),
                html.Td(s.trigger),
                html.Td(tables.when(s.created_at)),
                html.Td(", ".join(str(k) for k in s.world_sizes) + f" × {s.repeats}"),
                html.Td(ui.badge(s.outcome)),
            ]
        )
        for s in latest
    ]
    header = html.Thead(
        html.Tr(
            [
                html.Th(h)
                for h in (
                    "task",
                    "latest sweep",
                    "trigger",
                    "created",
                    "workers × repeats",
                    "outcome",
                )
            ]
        )
    )
    return dbc.Table([header, html.Tbody(rows)], size="sm", hover=True, id="overview-latest")


def running_table(running: list[RunProgress]) -> Any:
    """The groups running now, as their last load found them."""
    rows = [
        html.Tr(
            [
                html.Td(dcc.Link(r.id, href=tables.link("/run", id=r.id))),
                html.Td(r.task),
                html.Td(units.workers(r.world_size)),
                html.Td(str(r.repeat + 1)),
                html.Td(f"{r.epochs} epoch(s), {r.steps:,} steps"),
                html.Td(tables.progress_metric(r.goal_metric, r.last_metric)),
                html.Td(units.seconds(r.elapsed_s)),
            ]
        )
        for r in running
    ]
    header = html.Thead(
        html.Tr(
            [
                html.Th(h)
                for h in ("run", "task", "workers", "repeat", "done", "last evaluation", "elapsed")
            ]
        )
    )
    return dbc.Table([header, html.Tbody(rows)], size="sm", hover=True, id="overview-running")


OUTPUTS = {
    "content": Output("overview-content", "children"),
    "refresh_off": Output("overview-refresh", "disabled"),
}


def failure(message: str) -> dict[str, Any]:
    return ui.unchanged(OUTPUTS, content=ui.error_alert(message), refresh_off=True)


@ui.guarded(failure)
def update(_tick: int | None = None) -> dict[str, Any]:
    """The page's content, and whether it stops refreshing."""
    source = data.current()
    latest = source.latest_per_task()
    if not latest:
        return ui.unchanged(OUTPUTS, content=ui.empty_database(), refresh_off=True)
    nightly = source.latest_per_task("scheduled")
    flags = source.regressions(sweep_ids=[s.id for s in nightly]) if nightly else []
    running = source.running()
    now = [html.H4("Running now", className="mt-4"), running_table(running)] if running else []
    content = html.Div(
        [
            regressions_alert(flags),
            *now,
            html.H4("Nightly", className="mt-4"),
            nightly_table(nightly, flags),
            html.H4("Latest sweep of each task", className="mt-4"),
            latest_table(latest),
        ]
    )
    refresh = bool(running) or any(s.outcome == "running" for s in [*latest, *nightly])
    return ui.unchanged(OUTPUTS, content=content, refresh_off=not refresh)


def register(app: Dash) -> None:
    dash.register_page(__name__, path=PATH, name=TITLE, title="scalebench", layout=layout, order=0)
    app.callback(output=OUTPUTS, inputs=[Input("overview-refresh", "n_intervals")])(update)
