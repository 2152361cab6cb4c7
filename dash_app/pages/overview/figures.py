"""What the Overview draws: pure functions from query results to its alert and tables."""

from __future__ import annotations

from typing import Any

import dash_bootstrap_components as dbc
from dash import dcc, html

from dash_app import components as ui
from dash_app import tables
from dash_app.choices import is_allreduce
from results_db.queries.nightly import RegressionRow
from results_db.queries.sweeps import RunProgress, SweepInfo
from scalebench import units


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
